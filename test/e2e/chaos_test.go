package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/selfsigned"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

const (
	cfgName   = "guarded"
	target    = "target.tripswitch.e2e"
	bystander = "bystander.tripswitch.e2e"
	adminKey  = "admin.tripswitch.e2e/revision"
)

// cluster is a control plane with a slow webhook guarded by a fast breaker.
type cluster struct {
	c          client.Client
	hook       *slowhook.Server
	kubeconfig string
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	hook, err := slowhook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })
	entry := func(name string) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:          name,
			ClientConfig:  admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + "/mutate"), CABundle: hook.CABundle},
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), TimeoutSeconds: ptr.To(int32(1)),
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			// Matches no namespace: the API server never has to wait for it here.
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"tripswitch.e2e/never": "true"}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: cfgName},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{entry(bystander), entry(target)},
	}
	wcb := &v1alpha1.WebhookCircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: cfgName, WebhookName: target},
			AllowAdmissionWithoutMutation: true,
			Probe: v1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: 100 * time.Millisecond}, Timeout: &metav1.Duration{Duration: 50 * time.Millisecond},
				FailureThreshold: 2, SuccessThreshold: 2},
		},
	}
	for _, obj := range []client.Object{cfg, wcb} {
		if err := env.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	return &cluster{c: env.Client, hook: hook, kubeconfig: adminKubeconfig(t, env)}
}

func (cl *cluster) config(ctx context.Context) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	return &cfg, cl.c.Get(ctx, client.ObjectKey{Name: cfgName}, &cfg)
}

func entryOf(cfg *admissionregistrationv1.MutatingWebhookConfiguration, name string) *admissionregistrationv1.MutatingWebhook {
	for i := range cfg.Webhooks {
		if cfg.Webhooks[i].Name == name {
			return &cfg.Webhooks[i]
		}
	}
	return nil
}

// adminState is what the administrator last wrote successfully.
type adminState struct {
	revision string
	caBundle []byte
}

// adminEdit plays an administrator: it rotates the target's caBundle (keeping
// the real CA in it, so the webhook stays reachable) and bumps an annotation,
// retrying on conflict like kubectl edit would.
func (cl *cluster) adminEdit(ctx context.Context, cycle int, extra []byte) (adminState, error) {
	st := adminState{revision: strconv.Itoa(cycle), caBundle: append(append([]byte{}, cl.hook.CABundle...), extra...)}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cfg, err := cl.config(ctx)
		if err != nil {
			return err
		}
		if cfg.Annotations == nil {
			cfg.Annotations = map[string]string{}
		}
		cfg.Annotations[adminKey] = st.revision
		entryOf(cfg, target).ClientConfig.CABundle = st.caBundle
		return cl.c.Update(ctx, cfg)
	})
	return st, err
}

// converged reports whether the webhook is where it must be for the health
// of the webhook: open with a record while down, restored without one while
// up; and whether the administrator's last edit is intact.
func (cl *cluster) converged(ctx context.Context, down bool, admin adminState) (bool, error) {
	cfg, err := cl.config(ctx)
	if err != nil {
		return false, err
	}
	w := entryOf(cfg, target)
	_, recorded := cfg.Annotations[circuit.AnnotationKey(target)]
	if admin.revision != "" && (cfg.Annotations[adminKey] != admin.revision || !bytes.Equal(w.ClientConfig.CABundle, admin.caBundle)) {
		return false, fmt.Errorf("administrator's edit %s lost: annotation %q, caBundle %d bytes (want %d)",
			admin.revision, cfg.Annotations[adminKey], len(w.ClientConfig.CABundle), len(admin.caBundle))
	}
	if *entryOf(cfg, bystander).FailurePolicy != admissionregistrationv1.Fail {
		return false, fmt.Errorf("bystander webhook changed")
	}
	if down {
		return recorded && *w.FailurePolicy == admissionregistrationv1.Ignore, fmt.Errorf("want open, have policy %s record %v", *w.FailurePolicy, recorded)
	}
	return !recorded && *w.FailurePolicy == admissionregistrationv1.Fail, fmt.Errorf("want closed, have policy %s record %v", *w.FailurePolicy, recorded)
}

// TestKillNineAtRandomPoints kills the controller with SIGKILL at a random
// moment of each open or close cycle, with an administrator editing the same
// webhook at another random moment, restarts it, and checks that the webhook
// converges with no orphaned record and no lost edit. The seed is logged; set
// TRIPSWITCH_E2E_SEED to replay a run.
func TestKillNineAtRandomPoints(t *testing.T) {
	rng := seeded(t)
	cl := newCluster(t)
	other, err := selfsigned.NewCA("rotated")
	if err != nil {
		t.Fatal(err)
	}
	const cycles = 20
	var admin adminState
	// One controller runs at a time, so every kill hits the leader; its Lease
	// is not released, and the next one takes over when it expires.
	p := startController(t, cl.kubeconfig, "initial")
	for cycle := range cycles {
		down := cycle%2 == 0
		if down {
			cl.hook.SetDelay(2 * time.Second)
		} else {
			cl.hook.SetDelay(0)
		}
		killAt := time.Duration(rng.Int64N(int64(2500 * time.Millisecond)))
		editAt := time.Duration(rng.Int64N(int64(2500 * time.Millisecond)))
		start := time.Now()
		edited := make(chan error, 1)
		go func() {
			time.Sleep(editAt)
			var extra []byte
			if cycle%4 < 2 {
				extra = other.PEM
			}
			st, err := cl.adminEdit(t.Context(), cycle, extra)
			if err == nil {
				admin = st
			}
			edited <- err
		}()
		time.Sleep(killAt)
		p.kill()
		if err := <-edited; err != nil {
			t.Fatalf("cycle %d: administrator edit: %v", cycle, err)
		}
		p = startController(t, cl.kubeconfig, fmt.Sprintf("after-cycle-%d", cycle))
		eventually(t, 30*time.Second, fmt.Sprintf("cycle %d (down=%v, killed at %s, edit at %s) to converge", cycle, down, killAt.Round(time.Millisecond), editAt.Round(time.Millisecond)),
			func(ctx context.Context) (bool, error) { return cl.converged(ctx, down, admin) })
		t.Logf("cycle %2d: down=%-5v killed at %4dms, admin edit at %4dms, converged %4dms after start",
			cycle, down, killAt.Milliseconds(), editAt.Milliseconds(), time.Since(start).Milliseconds())
	}
}

// TestLeaderFailover runs two replicas; the leader is killed while the
// circuit is open, and the other takes over and closes it after recovery.
func TestLeaderFailover(t *testing.T) {
	cl := newCluster(t)
	leader := startController(t, cl.kubeconfig, "first")
	holder := func(ctx context.Context) (string, error) {
		var lease coordinationv1.Lease
		if err := cl.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "tripswitch.dev"}, &lease); err != nil {
			return "", err
		}
		return ptr.Deref(lease.Spec.HolderIdentity, ""), nil
	}
	var first string
	eventually(t, 30*time.Second, "the first replica to lead", func(ctx context.Context) (bool, error) {
		var err error
		first, err = holder(ctx)
		return first != "", err
	})
	startController(t, cl.kubeconfig, "second")

	cl.hook.SetDelay(2 * time.Second)
	eventually(t, 30*time.Second, "circuit to open under the first leader", func(ctx context.Context) (bool, error) {
		return cl.converged(ctx, true, adminState{})
	})
	leader.kill()
	cl.hook.SetDelay(0)
	eventually(t, 30*time.Second, "the second replica to take over and close the circuit", func(ctx context.Context) (bool, error) {
		return cl.converged(ctx, false, adminState{})
	})
	if now, err := holder(t.Context()); err != nil || now == first || now == "" {
		t.Fatalf("lease holder after failover = %q (%v), first was %q", now, err, first)
	}
}

// BenchmarkLeaderFailover measures how long after a SIGKILL of the leader
// the circuit it held open is closed by the standby once the webhook has
// recovered, for the default lease (15s duration, 10s renew deadline, 2s
// retry) and a short one (5s, 3s, 1s): what a crash costs, against how
// often the Lease is written. Each iteration starts a fresh leader and
// standby. Run it with
// go test -run '^$' -bench LeaderFailover -benchtime 5x ./test/e2e
func BenchmarkLeaderFailover(b *testing.B) {
	for _, l := range []struct{ duration, renew, retry string }{{"15s", "10s", "2s"}, {"5s", "3s", "1s"}} {
		b.Run("lease="+l.duration, func(b *testing.B) {
			failover(b, "--leader-election-lease-duration="+l.duration, "--leader-election-renew-deadline="+l.renew, "--leader-election-retry-period="+l.retry)
		})
	}
}

func failover(b *testing.B, lease ...string) {
	cl := newCluster(b)
	var took []time.Duration
	i := 0
	for b.Loop() {
		i++
		leader := startController(b, cl.kubeconfig, fmt.Sprintf("leader-%d", i), lease...)
		cl.hook.SetDelay(2 * time.Second)
		// A leader from the previous iteration is dead, so this one may first
		// wait out that lease.
		eventually(b, 60*time.Second, "circuit open under the new leader", func(ctx context.Context) (bool, error) {
			return cl.converged(ctx, true, adminState{})
		})
		standby := startController(b, cl.kubeconfig, fmt.Sprintf("standby-%d", i), lease...)
		time.Sleep(3 * time.Second) // the standby is up and waiting for the lease
		leader.kill()
		cl.hook.SetDelay(0)
		start := time.Now()
		eventually(b, 60*time.Second, "the standby to close the circuit", func(ctx context.Context) (bool, error) {
			return cl.converged(ctx, false, adminState{})
		})
		took = append(took, time.Since(start))
		standby.kill()
	}
	slices.Sort(took)
	b.ReportMetric(took[len(took)/2].Seconds(), "s-p50-converged")
	b.ReportMetric(took[len(took)-1].Seconds(), "s-max-converged")
	b.Logf("SIGKILL of the leader to circuit closed by the standby: %v", took)
}

package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// TestKillNineAfterAnAdministratorsEdit: during an outage, with the circuit
// open, an administrator sets the webhook back to Fail (a kubectl edit that
// leaves tripswitch's record in place), and the controller is killed with
// SIGKILL at a random moment of the next 400 ms — before it has seen the
// edit, while it drops its record and disarms (about 200 ms without the
// crash), or after. The next controller must never re-open the webhook over
// the administrator while the outage lasts: whatever tripswitch must
// remember to never fight a human survives the crash. Twenty cycles; the
// seed is logged (TRIPSWITCH_E2E_SEED replays it).
func TestKillNineAfterAnAdministratorsEdit(t *testing.T) {
	rng := seeded(t)
	cl := newCluster(t)
	p := startController(t, cl.kubeconfig, "initial")
	const cycles = 20
	for cycle := range cycles {
		cl.hook.SetDelay(2 * time.Second)
		eventually(t, 30*time.Second, fmt.Sprintf("cycle %d: the circuit to open", cycle), func(ctx context.Context) (bool, error) {
			return cl.converged(ctx, true, adminState{})
		})
		killAt := time.Duration(rng.Int64N(int64(400 * time.Millisecond)))
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cfg, err := cl.config(t.Context())
			if err != nil {
				return err
			}
			entryOf(cfg, target).FailurePolicy = ptr.To(admissionregistrationv1.Fail)
			return cl.c.Update(t.Context(), cfg)
		})
		if err != nil {
			t.Fatalf("cycle %d: administrator's edit: %v", cycle, err)
		}
		time.Sleep(killAt)
		p.kill()
		p = startController(t, cl.kubeconfig, fmt.Sprintf("after-edit-%d", cycle))
		// The next leader takes over when the killed one's 3 s Lease
		// expires, then needs two failed probes (200 ms) to judge the
		// webhook down again: 6 s covers both with room.
		watchUntil := time.Now().Add(6 * time.Second)
		for time.Now().Before(watchUntil) {
			cfg, err := cl.config(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if w := entryOf(cfg, target); *w.FailurePolicy != admissionregistrationv1.Fail {
				t.Fatalf("cycle %d (killed %s after the edit): the webhook was re-opened over the administrator: policy %s, record %v",
					cycle, killAt.Round(time.Millisecond), *w.FailurePolicy, cfg.Annotations[circuit.AnnotationKey(target)] != "")
			}
			time.Sleep(20 * time.Millisecond)
		}
		var wcb v1alpha1.WebhookCircuitBreaker
		if err := cl.c.Get(t.Context(), client.ObjectKey{Name: "guarded"}, &wcb); err != nil {
			t.Fatal(err)
		}
		if wcb.Status.DisarmedReason == "" {
			t.Fatalf("cycle %d (killed %s after the edit): the breaker is not disarmed (state %s)", cycle, killAt.Round(time.Millisecond), wcb.Status.State)
		}
		// The outage ends: the breaker re-arms once the webhook is healthy.
		cl.hook.SetDelay(0)
		eventually(t, 30*time.Second, fmt.Sprintf("cycle %d: the breaker to re-arm", cycle), func(ctx context.Context) (bool, error) {
			var wcb v1alpha1.WebhookCircuitBreaker
			if err := cl.c.Get(ctx, client.ObjectKey{Name: "guarded"}, &wcb); err != nil {
				return false, err
			}
			return wcb.Status.DisarmedReason == "", fmt.Errorf("still disarmed: %s", wcb.Status.DisarmedReason)
		})
		t.Logf("cycle %2d: killed %3dms after the administrator's edit: never re-opened, disarmed, re-armed after recovery", cycle, killAt.Milliseconds())
	}
}

// TestTwinDeletedUnmutesTheSignal: two breakers name webhooks of the same
// name in two configurations, so the API server's counts (keyed by webhook
// name and type) cannot tell their calls apart and the signal does not open
// either circuit alone. When the twin is deleted, the remaining breaker acts
// on its signal, which still holds the failures, within a few signal
// intervals — not at the next refresh of the signal (30 s), by which time
// the failures may have left its window, or at the next resync.
func TestTwinDeletedUnmutesTheSignal(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	// Healthy to the probes, failing to the API server's real calls.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /mutate", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	base, caPEM := serveTLS(t, "twin-hook", mux)
	url := base + "/mutate"

	const hookName = "twin.signal.tripswitch.e2e"
	label := map[string]string{"tripswitch.e2e/twin": "yes"}
	config := func(name string, selector map[string]string) *admissionregistrationv1.MutatingWebhookConfiguration {
		return &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name:          hookName,
				ClientConfig:  admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
				FailurePolicy: ptr.To(admissionregistrationv1.Fail), TimeoutSeconds: ptr.To(int32(2)),
				Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
				ObjectSelector:          &metav1.LabelSelector{MatchLabels: selector},
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				AdmissionReviewVersions: []string{"v1"},
			}},
		}
	}
	breaker := func(name string, signal bool) *v1alpha1.WebhookCircuitBreaker {
		wcb := &v1alpha1.WebhookCircuitBreaker{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.WebhookCircuitBreakerSpec{
				Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: name, WebhookName: hookName},
				AllowAdmissionWithoutMutation: true,
				OpenAction:                    v1alpha1.OpenActionIgnore,
				Probe:                         v1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: 500 * time.Millisecond}},
			},
		}
		if signal {
			wcb.Spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true, Window: &metav1.Duration{Duration: 30 * time.Second}, MinimumCalls: 5, FailureRateThreshold: 50}
		}
		return wcb
	}
	for _, obj := range []client.Object{
		config("twin-a", label), config("twin-b", map[string]string{"tripswitch.e2e/never": "true"}),
		breaker("twin-a", true), breaker("twin-b", false),
	} {
		if err := env.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	startController(t, adminKubeconfig(t, env), "twins", "--leader-elect=false", "--apiserver-signal-interval=1s")

	// Real calls fail until the signal shows it.
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("twin-%d", i), Labels: label}}
			_ = env.Client.Create(ctx, cm)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	get := func(ctx context.Context, name string) (*v1alpha1.WebhookCircuitBreaker, error) {
		var wcb v1alpha1.WebhookCircuitBreaker
		return &wcb, env.Client.Get(ctx, client.ObjectKey{Name: name}, &wcb)
	}
	eventually(t, 60*time.Second, "the signal to fail and be muted as ambiguous", func(ctx context.Context) (bool, error) {
		wcb, err := get(ctx, "twin-a")
		if err != nil {
			return false, err
		}
		muted := false
		for _, c := range wcb.Status.Conditions {
			muted = muted || (c.Type == "APIServerSignal" && c.Reason == "Ambiguous")
		}
		failing := wcb.Status.APIServer != nil && wcb.Status.APIServer.Failing
		if wcb.Status.State == v1alpha1.StateOpen {
			return false, fmt.Errorf("opened on an ambiguous signal")
		}
		return muted && failing, fmt.Errorf("muted %v, failing %v, state %s", muted, failing, wcb.Status.State)
	})
	// No more calls: the failures stay in the signal's 30 s window, and its
	// numbers stop changing, so nothing but the twin's deletion has reason
	// to look at the breaker again (the signal's own refresh is 30 s).
	stop()
	time.Sleep(3 * time.Second)
	twin, err := get(t.Context(), "twin-b")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(t.Context(), twin); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the twin to be gone", func(ctx context.Context) (bool, error) {
		_, err := get(ctx, "twin-b")
		return apierrors.IsNotFound(err), err
	})
	gone := time.Now()
	eventually(t, 30*time.Second, "the remaining breaker to open on its signal", func(ctx context.Context) (bool, error) {
		wcb, err := get(ctx, "twin-a")
		if err != nil {
			return false, err
		}
		return wcb.Status.State == v1alpha1.StateOpen, fmt.Errorf("state %s", wcb.Status.State)
	})
	took := time.Since(gone)
	t.Logf("opened %s after the twin was gone", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("opened %s after the twin was gone; want within a few 1 s signal intervals", took.Round(time.Millisecond))
	}
}

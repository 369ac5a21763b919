package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// switchable is a prober the test flips between healthy and unhealthy.
type switchable struct{ down atomic.Bool }

func (s *switchable) Probe(context.Context, probe.Target) probe.Result {
	if s.down.Load() {
		return probe.Result{Status: probe.Unhealthy, Reason: "scripted outage"}
	}
	return probe.Result{Status: probe.Healthy, Reason: "scripted"}
}

// counted counts the probes a prober made.
type counted struct {
	probe.Prober
	n atomic.Int64
}

func (c *counted) Probe(ctx context.Context, t probe.Target) probe.Result {
	defer c.n.Add(1)
	return c.Prober.Probe(ctx, t)
}

// runManager runs a full manager (leader election on) until the returned stop
// is called; it reconciles only the breaker named id. onWrite, if set, is called after every successful write.
func runManager(t *testing.T, id string, p probe.Prober, onWrite func()) (stop func()) {
	t.Helper()
	if onWrite == nil {
		return runManagerWith(t, id, p, nil)
	}
	after := func(err error) error {
		if err == nil {
			onWrite()
		}
		return err
	}
	return runManagerWith(t, id, p, &interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			return after(c.Patch(ctx, obj, p, opts...))
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return after(c.SubResource(sub).Update(ctx, obj, opts...))
		},
	})
}

// runManagerWith is runManager with the manager's client's calls going
// through funcs, if set.
func runManagerWith(t *testing.T, id string, p probe.Prober, funcs *interceptor.Funcs) (stop func()) {
	t.Helper()
	return runManagerOpts(t, id, controller.Options{Prober: p}, funcs)
}

// runManagerOpts is runManagerWith with the controller's options.
func runManagerOpts(t *testing.T, id string, copts controller.Options, funcs *interceptor.Funcs) (stop func()) {
	t.Helper()
	cp := controlPlane(t)
	opts := ctrl.Options{
		Scheme:                        cp.Scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		LeaderElection:                true,
		LeaderElectionID:              id,
		LeaderElectionNamespace:       "default",
		LeaderElectionReleaseOnCancel: true,
		// Tests run several managers in one process, one after another.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// Each manager sees only its own test's breaker, as if alone in the cluster.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&v1alpha1.WebhookCircuitBreaker{}: {Field: fields.OneTermEqualSelector("metadata.name", id)},
		}},
	}
	if funcs != nil {
		opts.NewClient = func(cfg *rest.Config, o client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(cfg, o)
			if err != nil {
				return nil, err
			}
			return interceptor.NewClient(c, *funcs), nil
		}
	}
	mgr, err := ctrl.NewManager(cp.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controller.Setup(mgr, copts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func fastBreaker(w *v1alpha1.WebhookCircuitBreaker) {
	w.Spec.Probe = v1alpha1.ProbeSpec{
		Interval: &metav1.Duration{Duration: 100 * time.Millisecond}, Timeout: &metav1.Duration{Duration: 50 * time.Millisecond},
		FailureThreshold: 1, SuccessThreshold: 1,
	}
}

// eventually polls cond for up to 30s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConcurrentWriterIsNeverOverwritten flips the circuit repeatedly while
// another writer rotates caBundles and inserts and removes a webhook in front
// of the target (so its index moves). Before each of its writes, the writer
// checks that its previous write is still there.
func TestConcurrentWriterIsNeverOverwritten(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	wcb := b.createBreaker(b.cfg, fastBreaker)
	p := &switchable{}
	runManager(t, b.cfg, p, nil)

	ctx, cancel := context.WithTimeout(b.ctx, 8*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			p.down.Store(!p.down.Load())
			time.Sleep(350 * time.Millisecond)
		}
	})
	var writes, lost int
	var last []byte
	extra := false
	for i := 0; ctx.Err() == nil; i++ {
		cfg := b.getConfig()
		if last != nil {
			for _, w := range cfg.Webhooks {
				if w.Name != "extra.tripswitch.test" && !bytes.Equal(w.ClientConfig.CABundle, last) {
					lost++
					t.Errorf("write %d: caBundle of %s is %q, want the writer's %q", writes, w.Name, w.ClientConfig.CABundle, last)
				}
			}
			if hasExtra := cfg.Webhooks[0].Name == "extra.tripswitch.test"; hasExtra != extra {
				lost++
				t.Errorf("write %d: extra webhook present = %v, want %v", writes, hasExtra, extra)
			}
		}
		ca := fmt.Appendf(nil, "rotated-%d", i)
		for j := range cfg.Webhooks {
			cfg.Webhooks[j].ClientConfig.CABundle = ca
		}
		wantExtra := extra
		if i%3 == 0 {
			wantExtra = !extra
			if wantExtra {
				x := cfg.Webhooks[0].DeepCopy()
				x.Name = "extra.tripswitch.test"
				cfg.Webhooks = append([]admissionregistrationv1.MutatingWebhook{*x}, cfg.Webhooks...)
			} else {
				cfg.Webhooks = cfg.Webhooks[1:]
			}
		}
		err := b.c.Update(b.ctx, cfg)
		switch {
		case err == nil:
			writes++
			last, extra = ca, wantExtra
		case !apierrors.IsConflict(err):
			t.Fatalf("writer update: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()

	p.down.Store(false)
	eventually(t, "circuit closed after recovery", func() bool { return !hasRecord(b.getConfig()) })
	cfg := b.getConfig()
	if fp := hookOf(t, cfg, target).FailurePolicy; *fp != admissionregistrationv1.Fail || len(hookOf(t, cfg, target).MatchConditions) != 0 {
		t.Fatalf("after recovery the target is %s", webhookJSON(t, cfg, target))
	}
	windows := len(b.getBreaker(wcb.Name).Status.History)
	t.Logf("writer made %d writes while the circuit opened %d times; %d of its changes were lost", writes, windows, lost)
	if windows < 3 || writes < 20 {
		t.Fatalf("too little overlap to prove anything: %d open windows, %d writes", windows, writes)
	}
}

// TestManagerRestartAfterEveryWriteConverges stops the whole manager right
// after its k-th write (status, finalizer or webhook patch), for every k of an
// open-and-close cycle, and starts a fresh one: the webhook must always end
// at the right policy with the record present exactly while open.
func TestManagerRestartAfterEveryWriteConverges(t *testing.T) {
	for k := 1; ; k++ {
		var fired bool
		t.Run(fmt.Sprintf("crash-after-write-%d", k), func(t *testing.T) {
			fired = crashCycle(t, k)
		})
		if t.Failed() || !fired {
			t.Logf("covered %d crash points", k-1)
			return
		}
	}
}

func crashCycle(t *testing.T, k int) (fired bool) {
	b := newBed(t)
	orig := b.createConfig(nil)
	wcb := b.createBreaker(b.cfg, fastBreaker)
	p := &switchable{}
	p.down.Store(true)

	var writes atomic.Int32
	crashed := make(chan struct{})
	stop := runManager(t, b.cfg, p, func() {
		if writes.Add(1) == int32(k) {
			close(crashed)
		}
	})
	// Wait for the event, never for a time: the k-th write, or the circuit
	// opened and reported with fewer than k writes (then crash during the
	// close instead), or the cycle complete with fewer than k (no crash point
	// left). The bounds are only there to fail a hung test.
	crashedNow := func() bool {
		select {
		case <-crashed:
			return true
		default:
			return false
		}
	}
	settled := func(open bool) bool {
		cfg := b.getConfig()
		st := b.getBreaker(wcb.Name).Status.State
		if open {
			return hasRecord(cfg) && st == v1alpha1.StateOpen
		}
		return !hasRecord(cfg) && st == v1alpha1.StateClosed
	}
	phase := "open"
	eventually(t, "the k-th write or the circuit open", func() bool { return crashedNow() || settled(true) })
	if !crashedNow() {
		phase = "close"
		p.down.Store(false)
		eventually(t, "the k-th write or the circuit closed", func() bool { return crashedNow() || settled(false) })
		if !crashedNow() {
			stop()
			return false
		}
	}
	stop()

	runManager(t, b.cfg, p, nil)
	if phase == "open" {
		eventually(t, "open after restart", func() bool {
			return hasRecord(b.getConfig()) && b.getBreaker(wcb.Name).Status.State == v1alpha1.StateOpen
		})
		p.down.Store(false)
	}
	eventually(t, "closed after restart", func() bool {
		cfg := b.getConfig()
		return !hasRecord(cfg) && webhookJSON(t, cfg, target) == webhookJSON(t, orig, target) &&
			b.getBreaker(wcb.Name).Status.State == v1alpha1.StateClosed
	})
	return true
}

// TestUnprobeableWebhookNeverOpens runs the real prober against a webhook whose
// caBundle is garbage: the probe is Unknown, the breaker says why, and the
// circuit stays closed however long it runs.
func TestUnprobeableWebhookNeverOpens(t *testing.T) {
	b := newBed(t)
	orig := b.createConfig(nil) // caBundle "not-a-real-ca-...": not PEM
	wcb := b.createBreaker(b.cfg, fastBreaker)
	p := &counted{Prober: &probe.HTTPProber{}}
	runManager(t, b.cfg, p, nil)
	eventually(t, "ProbeUnsupported reported", func() bool {
		c := condition(b.getBreaker(wcb.Name), v1alpha1.ConditionProbeUnsupported)
		return c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "caBundle holds no PEM certificate")
	})
	// Ten more probes (not a time: a busy machine probes late), then the
	// breaker has had every chance to open.
	seen := p.n.Load()
	eventually(t, "ten more probes", func() bool { return p.n.Load() >= seen+10 })
	cfg := b.getConfig()
	if hasRecord(cfg) || webhookJSON(t, cfg, target) != webhookJSON(t, orig, target) {
		t.Fatalf("an unprobeable webhook was opened: %s", webhookJSON(t, cfg, target))
	}
	// It must not look reassuring: Unknown, and not Ready, saying why.
	st := b.getBreaker(wcb.Name).Status
	ready := condition(b.getBreaker(wcb.Name), v1alpha1.ConditionReady)
	if st.State != v1alpha1.StateUnknown || st.Probe.LastResult != string(probe.Unknown) || ready.Status != metav1.ConditionFalse || ready.Reason != policy.ReasonProbeUnsupported {
		t.Fatalf("status: %+v", st)
	}
}

// TestEditsAreSeenWhenTheyHappen: with the webhook steady (probes change
// nothing, so they trigger no reconcile) and the periodic resync a minute
// away, an administrator's edit of the open circuit is acted on within
// seconds: the controller watches the approved configuration by name.
func TestEditsAreSeenWhenTheyHappen(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	wcb := b.createBreaker(b.cfg, func(w *v1alpha1.WebhookCircuitBreaker) {
		fastBreaker(w)
		w.Spec.Mode = v1alpha1.ModeForceOpen
	})
	p := &counted{Prober: &switchable{}}
	runManager(t, b.cfg, p, nil)
	eventually(t, "forced open", func() bool { return hasRecord(b.getConfig()) })
	// Probes saturate their counts after a few: from then on they change
	// nothing, so only the watch can bring the edit in.
	probes := func(n int64) {
		seen := p.n.Load()
		eventually(t, "more probes", func() bool { return p.n.Load() >= seen+n })
	}
	probes(10)
	start := time.Now()
	b.setPolicy(admissionregistrationv1.Fail)
	eventually(t, "the edit seen as an external change", func() bool {
		got := b.getBreaker(wcb.Name)
		c := condition(got, v1alpha1.ConditionExternalChange)
		return c.Status == metav1.ConditionTrue && got.Status.State == v1alpha1.StateDisarmed && !hasRecord(b.getConfig())
	})
	// ForceOpen does not fight the administrator: still closed ten probes later.
	probes(10)
	if hasRecord(b.getConfig()) || *hookOf(t, b.getConfig(), target).FailurePolicy != admissionregistrationv1.Fail {
		t.Fatal("tripswitch reopened over the administrator's change")
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the edit was seen after %s: that is the resync, not the watch", took)
	}
}

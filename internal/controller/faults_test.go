package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// fault is how the Nth API call fails.
type fault string

const (
	// faultError: the call is not made and returns a server error.
	faultError fault = "error"
	// faultConflict: the call is not made and returns 409.
	faultConflict fault = "conflict"
	// faultLostReply: the call is made, then the client sees a timeout, as when
	// the reply is lost; the nastiest case for a two-write design.
	faultLostReply fault = "lost-reply"
	// faultCrash: the call is made, then this process "dies": every later call
	// fails until a new reconciler takes over.
	faultCrash fault = "crash"
)

// faulty wraps c so that call number n (1-based, counting every API call)
// fails with f. It reports whether the fault fired.
type faulty struct {
	mu    sync.Mutex
	calls int
	n     int
	f     fault
	fired bool
	dead  bool
}

func (fl *faulty) before() (skip bool, err error) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.dead {
		return true, errors.New("injected: process is dead")
	}
	fl.calls++
	if fl.calls != fl.n {
		return false, nil
	}
	fl.fired = true
	switch fl.f {
	case faultError:
		return true, apierrors.NewInternalError(errors.New("injected"))
	case faultConflict:
		return true, apierrors.NewConflict(schema.GroupResource{}, "injected", errors.New("injected"))
	}
	return false, nil
}

func (fl *faulty) after(err error) error {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.calls != fl.n || err != nil {
		return err
	}
	switch fl.f {
	case faultLostReply:
		return apierrors.NewTimeoutError("injected: reply lost", 1)
	case faultCrash:
		fl.dead = true
		return errors.New("injected: process died after the call")
	}
	return err
}

func (fl *faulty) wrap(c client.WithWatch) client.Client {
	call := func(do func() error) error {
		if skip, err := fl.before(); skip {
			return err
		}
		return fl.after(do())
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			return call(func() error { return c.Get(ctx, key, obj, opts...) })
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			return call(func() error { return c.Patch(ctx, obj, p, opts...) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return call(func() error { return c.Update(ctx, obj, opts...) })
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			return call(func() error { return c.SubResource(sub).Update(ctx, obj, opts...) })
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			return call(func() error { return c.SubResource(sub).Patch(ctx, obj, p, opts...) })
		},
	})
}

// TestEveryInjectedFaultConverges fails the Nth API call, for every N across a
// full open and close cycle and for each kind of fault, then lets a healthy
// reconciler run: each run must end at the right policy with the record
// present exactly while open.
func TestEveryInjectedFaultConverges(t *testing.T) {
	cp := controlPlane(t)
	w, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	injected := 0
	for _, action := range []v1alpha1.OpenAction{v1alpha1.OpenActionIgnore, v1alpha1.OpenActionBypass} {
		for _, f := range []fault{faultError, faultConflict, faultLostReply, faultCrash} {
			for n := 1; ; n++ {
				fl := &faulty{n: n, f: f}
				ok := t.Run(fmt.Sprintf("%s/%s/call-%d", action, f, n), func(t *testing.T) {
					runFaultedCycle(t, action, fl.wrap(w))
				})
				if !ok {
					return
				}
				if !fl.fired {
					break // the cycle made fewer than n calls: every point is covered
				}
				injected++
			}
		}
	}
	t.Logf("injected %d faults (2 actions × 4 kinds × every API call of an open+close cycle); all converged", injected)
}

// runFaultedCycle drives one open-and-close cycle through the faulty client,
// then checks that a fresh reconciler over a healthy client converges.
func runFaultedCycle(t *testing.T, action v1alpha1.OpenAction, faultyClient client.Client) {
	b := newBed(t)
	orig := b.createConfig(nil)
	origTarget := webhookJSON(t, orig, target)
	wcb := b.createBreaker(b.cfg, func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.OpenAction = action })
	healthy := b.reconciler(b.c)

	broken := b.reconciler(faultyClient)
	b.health.set(wcb.Name, probe.Unhealthy)
	_ = b.trySettle(broken, wcb.Name) // errors are the point; convergence is checked below
	b.settle(healthy, wcb.Name)
	cfg := b.getConfig()
	if !isOpenAs(hookOf(t, cfg, target), action) || !hasRecord(cfg) {
		t.Fatalf("after open with a fault: webhook %s, record %v", webhookJSON(t, cfg, target), hasRecord(cfg))
	}

	broken = b.reconciler(faultyClient)
	b.health.set(wcb.Name, probe.Healthy)
	_ = b.trySettle(broken, wcb.Name)
	b.settle(healthy, wcb.Name)
	cfg = b.getConfig()
	if got := webhookJSON(t, cfg, target); got != origTarget || hasRecord(cfg) {
		t.Fatalf("after close with a fault: record %v, webhook\n got %s\nwant %s", hasRecord(cfg), got, origTarget)
	}
	if st := b.getBreaker(wcb.Name).Status; st.State != v1alpha1.StateClosed || st.Record != nil {
		t.Fatalf("status after close: %+v", st)
	}
}

func isOpenAs(w admissionregistrationv1.MutatingWebhook, action v1alpha1.OpenAction) bool {
	if action == v1alpha1.OpenActionIgnore {
		return *w.FailurePolicy == admissionregistrationv1.Ignore
	}
	for _, c := range w.MatchConditions {
		if c.Name == "tripswitch.dev/circuit-open" && c.Expression == "false" {
			return true
		}
	}
	return false
}

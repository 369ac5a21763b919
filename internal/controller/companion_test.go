package controller_test

import (
	"context"
	"sync/atomic"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// patchCounter counts the patches that reach webhook configurations.
type patchCounter struct {
	client.Client
	n atomic.Int32
}

func (c *patchCounter) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	if _, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
		c.n.Add(1)
	}
	return c.Client.Patch(ctx, obj, p, opts...)
}

// TestOneOutageOpensAConfigurationsBreakersInOnePatch: three breakers on
// one configuration's three webhooks (Ignore, Bypass, and one in Observe
// mode), all three webhooks down. One reconcile of the first opens the
// first two in a single patch (the Observe breaker's own reconcile would
// not open, so neither does the patch); each record is its own breaker's,
// the second breaker's reconcile mirrors its record without writing, and
// one patch closes both on recovery, back to the exact original, each
// window closed as WebhookRecovered. Without the watches' list of a
// configuration's breakers (no Targets), each takes a patch of its own.
func TestOneOutageOpensAConfigurationsBreakersInOnePatch(t *testing.T) {
	for _, coalesce := range []bool{true, false} {
		name := map[bool]string{true: "together", false: "alone"}[coalesce]
		t.Run(name, func(t *testing.T) {
			b := newBed(t)
			const third = "third.tripswitch.test"
			orig := b.createConfig(func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
				w := *cfg.Webhooks[0].DeepCopy()
				w.Name = third
				cfg.Webhooks = append(cfg.Webhooks, w)
			})
			counter := &patchCounter{Client: b.c}
			r := b.reconciler(counter)
			if coalesce {
				watches := startWatches(t, b)
				r.Targets = watches
			}
			one, two, observer := b.cfg+"-a", b.cfg+"-b", b.cfg+"-c"
			b.createBreaker(one, nil)
			b.createBreaker(two, func(w *v1alpha1.WebhookCircuitBreaker) {
				w.Spec.Target.WebhookName, w.Spec.OpenAction = other, v1alpha1.OpenActionBypass
			})
			b.createBreaker(observer, func(w *v1alpha1.WebhookCircuitBreaker) {
				w.Spec.Target.WebhookName, w.Spec.Mode = third, v1alpha1.ModeObserve
			})
			for _, n := range []string{one, two, observer} {
				b.drive(r, n, probe.Healthy)
			}
			if n := counter.n.Load(); n != 0 {
				t.Fatalf("%d patches while everything was healthy", n)
			}

			for _, n := range []string{one, two, observer} {
				b.health.set(n, probe.Unhealthy)
			}
			b.settle(r, one)
			cfg := b.getConfig()
			st := func(webhook string) circuit.State {
				view, err := circuit.View(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return circuit.Inspect(view, webhook)
			}
			if s := st(target); s.Record == nil || s.Record.Breaker != one || s.Record.BreakerUID != b.getBreaker(one).UID || !s.Intact() {
				t.Fatalf("%s's record after its reconcile: %+v", one, s.Record)
			}
			if s := st(third); s.Record != nil {
				t.Fatalf("the Observe breaker's webhook was opened: %+v", s.Record)
			}
			s := st(other)
			if coalesce {
				if s.Record == nil || s.Record.Breaker != two || s.Record.BreakerUID != b.getBreaker(two).UID || s.Record.Action != v1alpha1.OpenActionBypass || !s.Intact() {
					t.Fatalf("%s's record after %s's reconcile: %+v", two, one, s.Record)
				}
				if n := counter.n.Load(); n != 1 {
					t.Fatalf("%d patches opened two circuits, want 1", n)
				}
			} else if s.Record != nil {
				t.Fatalf("without the list of the configuration's breakers, %s was opened by %s: %+v", two, one, s.Record)
			}
			b.settle(r, two)
			b.settle(r, observer)
			want := map[bool]int32{true: 1, false: 2}[coalesce]
			if n := counter.n.Load(); n != want {
				t.Fatalf("%d patches opened the two circuits, want %d", n, want)
			}
			for n, state := range map[string]v1alpha1.CircuitState{one: v1alpha1.StateOpen, two: v1alpha1.StateOpen, observer: v1alpha1.StateClosed} {
				got := b.getBreaker(n)
				if got.Status.State != state {
					t.Fatalf("%s is %s, want %s", n, got.Status.State, state)
				}
				if state == v1alpha1.StateOpen && (len(got.Status.History) != 1 || got.Status.Record == nil || got.Status.Record.Breaker != n) {
					t.Fatalf("%s's status: history %+v, record %+v", n, got.Status.History, got.Status.Record)
				}
			}

			for _, n := range []string{one, two, observer} {
				b.health.set(n, probe.Healthy)
			}
			for _, n := range []string{one, two, observer} {
				b.settle(r, n)
			}
			if n := counter.n.Load(); n != 2*want {
				t.Fatalf("%d patches opened and closed the two circuits, want %d", n, 2*want)
			}
			for _, n := range []string{one, two} {
				if got := b.getBreaker(n); got.Status.State != v1alpha1.StateClosed || len(got.Status.History) != 1 || got.Status.History[0].ClosedAt == nil ||
					got.Status.History[0].CloseReason != policy.ReasonWebhookRecovered {
					t.Fatalf("%s after recovery: %s, history %+v", n, got.Status.State, got.Status.History)
				}
			}
			cfg = b.getConfig()
			for _, w := range []string{target, other, third} {
				if got, want := webhookJSON(t, cfg, w), webhookJSON(t, orig, w); got != want {
					t.Errorf("webhook %s after recovery:\n got %s\nwant %s", w, got, want)
				}
			}
			if len(cfg.Annotations) != 0 {
				t.Errorf("annotations left after recovery: %v", cfg.Annotations)
			}
		})
	}
}

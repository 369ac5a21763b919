package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestPreflightJudgesTheChain, on the real API server (which defaults an
// unset timeoutSeconds to 10): a breaker's webhook and its neighbour (10 s
// each) with another watched configuration's two mutating webhooks that
// match the same requests (30 s, one reinvoked: 90 s) can take 110 s, past
// the 60 s request deadline: Preflight False, ChainExceedsDeadline, naming
// them, and Ready stays True. Once the other configuration's timeouts are
// lowered (seen through its watch), Preflight is True; a configured
// deadline of 30 s makes it False again.
func TestPreflightJudgesTheChain(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	peer := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: b.cfg + "-peer"}}
	for i, name := range []string{"slow-a.tripswitch.test", "slow-b.tripswitch.test"} {
		w := *b.getConfig().Webhooks[0].DeepCopy()
		w.Name, w.TimeoutSeconds = name, ptr.To(int32(30))
		w.Rules[0].Resources = []string{"*"} // overlaps secrets
		if i == 0 {
			w.ReinvocationPolicy = ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy)
		}
		peer.Webhooks = append(peer.Webhooks, w)
	}
	if err := b.c.Create(b.ctx, peer); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.c.Delete(context.Background(), peer) })

	watches := startWatches(t, b)
	r := b.reconciler(b.c)
	r.Targets = watches

	mine := b.createBreaker(b.cfg, nil)
	// A breaker on the peer's webhook: its configuration is watched.
	observer := b.createBreaker(b.cfg+"-peer", func(w *v1alpha1.WebhookCircuitBreaker) {
		w.Spec.Target.ConfigurationName, w.Spec.Target.WebhookName, w.Spec.Mode = peer.Name, "slow-b.tripswitch.test", v1alpha1.ModeObserve
	})
	b.drive(r, observer.Name, probe.Healthy)

	preflight := func() *metav1.Condition {
		t.Helper()
		got := b.getBreaker(mine.Name)
		if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) {
			t.Fatalf("Ready is not True: %+v", got.Status.Conditions)
		}
		return meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionPreflight)
	}
	// until reconciles mine until Preflight has status want (the peer's
	// watch sees an edit a moment after it is made).
	until := func(want metav1.ConditionStatus) *metav1.Condition {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			b.clock.Step(6 * time.Second) // past the 5 s between two gatherings of the watched webhooks
			b.drive(r, mine.Name, probe.Healthy)
			c := preflight()
			if c != nil && c.Status == want {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatalf("Preflight never %s: %+v", want, c)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	c := until(metav1.ConditionFalse)
	if c.Reason != v1alpha1.ReasonChainExceedsDeadline {
		t.Fatalf("reason %s", c.Reason)
	}
	for _, want := range []string{"can take 1m50s", "deadline of 1m0s", peer.Name + "/slow-a.tripswitch.test (reinvoked) 1m0s", peer.Name + "/slow-b.tripswitch.test 30s", b.cfg + "/" + target + " 10s"} {
		if !strings.Contains(c.Message, want) {
			t.Fatalf("message %q lacks %q", c.Message, want)
		}
	}

	fresh := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := b.c.Get(b.ctx, types.NamespacedName{Name: peer.Name}, fresh); err != nil {
		t.Fatal(err)
	}
	for i := range fresh.Webhooks {
		fresh.Webhooks[i].TimeoutSeconds = ptr.To(int32(5))
	}
	if err := b.c.Update(b.ctx, fresh); err != nil {
		t.Fatal(err)
	}
	c = until(metav1.ConditionTrue)
	if c.Reason != v1alpha1.ReasonWithinDeadline || !strings.Contains(c.Message, "the 4 webhooks that can match the same requests take at most 35s") {
		t.Fatalf("after lowering the peer's timeouts: %+v", c)
	}

	// The deadline is a flag: a process started with 30s.
	r2 := b.reconciler(b.c)
	r2.Targets, r2.RequestDeadline = watches, 30*time.Second
	b.settle(r2, mine.Name)
	if c := preflight(); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "deadline of 30s") {
		t.Fatalf("with a 30s deadline: %+v", c)
	}
}

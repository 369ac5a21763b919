package controller_test

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// A breaker with openAction Ignore on a webhook that is already
// failurePolicy Ignore can do nothing for it: its Ready reason says so as
// soon as it is created, before any outage, and points at Bypass. An Ignore
// webhook with Bypass is Armed: skipping the call still helps.
func TestAlreadyIgnoreIsSaidAtOnce(t *testing.T) {
	b := newBed(t)
	b.createConfig(func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
		c.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore) // other
		c.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Ignore) // target
	})
	ignore := b.createBreaker(b.cfg, nil)
	r := b.reconciler(b.c)
	for _, st := range []probe.Status{"", probe.Healthy} { // no probe yet, then healthy
		if st != "" {
			b.health.set(ignore.Name, st)
		}
		b.settle(r, ignore.Name)
		got := b.getBreaker(ignore.Name)
		ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if ready == nil || ready.Reason != policy.ReasonAlreadyFailOpen || !strings.Contains(ready.Message, "Bypass") {
			t.Fatalf("probe %q: Ready %+v, want reason %s pointing at Bypass", st, ready, policy.ReasonAlreadyFailOpen)
		}
		if got.Status.State != v1alpha1.StateClosed {
			t.Fatalf("probe %q: state %s, want Closed", st, got.Status.State)
		}
	}

	bypass := b.createBreaker(b.cfg+"-bypass", func(w *v1alpha1.WebhookCircuitBreaker) {
		w.Spec.Target.WebhookName = other
		w.Spec.OpenAction = v1alpha1.OpenActionBypass
	})
	b.drive(r, bypass.Name, probe.Healthy)
	if ready := meta.FindStatusCondition(b.getBreaker(bypass.Name).Status.Conditions, v1alpha1.ConditionReady); ready == nil ||
		ready.Status != metav1.ConditionTrue || ready.Reason != policy.ReasonArmed {
		t.Fatalf("Bypass breaker: Ready %+v, want True/Armed", ready)
	}
}

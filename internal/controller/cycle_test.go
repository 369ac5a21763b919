package controller_test

import (
	"bytes"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestFullCycle opens and closes a circuit with each action on the real API
// server and checks the exact webhook after every step.
func TestFullCycle(t *testing.T) {
	for _, action := range []v1alpha1.OpenAction{v1alpha1.OpenActionIgnore, v1alpha1.OpenActionBypass} {
		t.Run(string(action), func(t *testing.T) {
			b := newBed(t)
			orig := b.createConfig(nil)
			wcb := b.createBreaker(b.cfg, func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.OpenAction = action })
			r := b.reconciler(b.c)
			origTarget, origOther := webhookJSON(t, orig, target), webhookJSON(t, orig, other)

			// Healthy: nothing changes on the webhook; the breaker gets its finalizer and status.
			b.drive(r, wcb.Name, probe.Healthy)
			cfg := b.getConfig()
			if got := webhookJSON(t, cfg, target); got != origTarget || hasRecord(cfg) {
				t.Fatalf("healthy webhook was changed:\n got %s\nwant %s", got, origTarget)
			}
			got := b.getBreaker(wcb.Name)
			if got.Status.State != v1alpha1.StateClosed || len(got.Finalizers) != 1 || got.Finalizers[0] != controller.Finalizer {
				t.Fatalf("healthy breaker: state %q finalizers %v", got.Status.State, got.Finalizers)
			}

			// Down: one patch opens the circuit and writes the record.
			b.drive(r, wcb.Name, probe.Unhealthy)
			cfg = b.getConfig()
			w := hookOf(t, cfg, target)
			switch action {
			case v1alpha1.OpenActionIgnore:
				if *w.FailurePolicy != admissionregistrationv1.Ignore || len(w.MatchConditions) != 0 {
					t.Fatalf("Ignore: failurePolicy %v matchConditions %v", *w.FailurePolicy, w.MatchConditions)
				}
			case v1alpha1.OpenActionBypass:
				if *w.FailurePolicy != admissionregistrationv1.Fail || len(w.MatchConditions) != 1 ||
					w.MatchConditions[0] != (admissionregistrationv1.MatchCondition{Name: circuit.MatchConditionName, Expression: "false"}) {
					t.Fatalf("Bypass: failurePolicy %v matchConditions %v", *w.FailurePolicy, w.MatchConditions)
				}
			}
			if !bytes.Equal(w.ClientConfig.CABundle, orig.Webhooks[1].ClientConfig.CABundle) {
				t.Error("opening changed the target's caBundle")
			}
			if webhookJSON(t, cfg, other) != origOther {
				t.Error("opening changed the other webhook")
			}
			rec, err := circuit.ReadRecord(cfg.Annotations, target)
			if err != nil || rec == nil || rec.BreakerUID != wcb.UID || rec.Action != action {
				t.Fatalf("record after open: %+v, %v", rec, err)
			}
			got = b.getBreaker(wcb.Name)
			if got.Status.State != v1alpha1.StateOpen || got.Status.Record == nil || !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionCircuitOpen) {
				t.Fatalf("open breaker status: %+v", got.Status)
			}
			if len(got.Status.History) != 1 || got.Status.History[0].ClosedAt != nil {
				t.Fatalf("history after open: %+v", got.Status.History)
			}

			// Recovered: one patch restores the exact original and removes the record.
			b.drive(r, wcb.Name, probe.Healthy)
			cfg = b.getConfig()
			if got := webhookJSON(t, cfg, target); got != origTarget {
				t.Fatalf("close did not restore the original webhook:\n got %s\nwant %s", got, origTarget)
			}
			if webhookJSON(t, cfg, other) != origOther || hasRecord(cfg) {
				t.Fatalf("after close: other webhook changed or record left: %v", cfg.Annotations)
			}
			got = b.getBreaker(wcb.Name)
			if got.Status.State != v1alpha1.StateClosed || got.Status.Record != nil || len(got.Status.History) != 1 || got.Status.History[0].ClosedAt == nil {
				t.Fatalf("closed breaker status: %+v", got.Status)
			}
		})
	}
}

package controller_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/breakglass"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// After `tripswitch restore`, with no controller, the breaker no longer says
// Open: its state is Closed, CircuitOpen False and Ready Unknown, both with
// reason BreakGlassRestore. The controller, when it returns, sets Ready.
func TestRestoreSetsStateAndConditions(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	wcb := b.createBreaker(b.cfg, nil)
	b.drive(b.reconciler(b.c), wcb.Name, probe.Unhealthy)
	if got := b.getBreaker(wcb.Name); got.Status.State != v1alpha1.StateOpen {
		t.Fatalf("state %s before the restore, want Open", got.Status.State)
	}
	breakGlass(b)

	got := b.getBreaker(wcb.Name)
	if got.Status.State != v1alpha1.StateClosed || got.Status.Record != nil {
		t.Fatalf("after the restore: state %s, record %+v; want Closed and none", got.Status.State, got.Status.Record)
	}
	for typ, want := range map[string]metav1.ConditionStatus{v1alpha1.ConditionCircuitOpen: metav1.ConditionFalse, v1alpha1.ConditionReady: metav1.ConditionUnknown} {
		c := meta.FindStatusCondition(got.Status.Conditions, typ)
		if c == nil || c.Status != want || c.Reason != breakglass.CloseReason {
			t.Errorf("after the restore: %s = %+v, want %s/%s", typ, c, want, breakglass.CloseReason)
		}
	}

	b.drive(b.reconciler(b.c), wcb.Name, probe.Healthy)
	got = b.getBreaker(wcb.Name)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); got.Status.State != v1alpha1.StateClosed || c == nil || c.Reason != policy.ReasonArmed {
		t.Fatalf("after the controller returned: state %s, Ready %+v; want Closed and Armed", got.Status.State, c)
	}
}

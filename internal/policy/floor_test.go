package policy_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
)

// TestFloorOrder: the floor is armed before an open and only then; after a
// write it follows the circuit (armed while this breaker's record is on the
// webhook, a trial included; released once a deleted breaker lets go).
func TestFloorOrder(t *testing.T) {
	for _, w := range []policy.Write{policy.WriteNone, policy.WriteOpen, policy.WriteClose, policy.WriteDrop, policy.WriteTrial, policy.WriteEndTrial} {
		want, first := policy.FloorBeforeWrite(policy.Decision{Write: w})
		if first != (w == policy.WriteOpen) || want != floor.WantArmed {
			t.Errorf("%s: before the write %v %s", w, first, want)
		}
	}
	b := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u"}}
	deleting := b.DeepCopy()
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	ours := circuit.State{Record: &v1alpha1.CircuitRecord{BreakerUID: "u"}}
	trial := circuit.State{Record: &v1alpha1.CircuitRecord{BreakerUID: "u", Trial: &v1alpha1.TrialRecord{}}}
	theirs := circuit.State{Record: &v1alpha1.CircuitRecord{BreakerUID: "other"}}
	for _, tc := range []struct {
		name  string
		b     *v1alpha1.WebhookCircuitBreaker
		d     policy.Decision
		after circuit.State
		want  floor.Want
	}{
		{"open", b, policy.Decision{}, ours, floor.WantArmed},
		{"half-open", b, policy.Decision{}, trial, floor.WantArmed},
		{"closed", b, policy.Decision{}, circuit.State{}, floor.WantInert},
		{"another breaker's record", b, policy.Decision{}, theirs, floor.WantInert},
		{"deleting, still open", deleting, policy.Decision{ReleaseFinalizer: true}, ours, floor.WantArmed},
		{"deleting, blocked", deleting, policy.Decision{}, circuit.State{}, floor.WantInert},
		{"deleting, restored", deleting, policy.Decision{ReleaseFinalizer: true}, circuit.State{}, floor.WantReleased},
	} {
		if got := policy.FloorAfter(tc.b, tc.d, tc.after); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

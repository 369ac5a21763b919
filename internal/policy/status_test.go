package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestComputeStatus: what an operator reads at a glance (state, Ready and
// its reason) follows from the decision's fields, whatever its reason string.
func TestComputeStatus(t *testing.T) {
	cfgUID := types.UID("cfg-uid")
	cases := []struct {
		name       string
		in         Input
		d          Decision
		after      circuit.State
		writeErr   error
		disarmed   string // the breaker's status before
		wantState  v1alpha1.CircuitState
		wantReady  metav1.ConditionStatus
		wantReason string
	}{
		{name: "a closed, probed webhook is armed", in: Input{TargetFound: true}, d: Decision{Reason: ReasonNoChange}, after: closedFail,
			wantState: v1alpha1.StateClosed, wantReady: metav1.ConditionTrue, wantReason: ReasonArmed},
		{name: "a circuit tripswitch holds is Open and Ready", in: Input{TargetFound: true}, d: Decision{Write: WriteOpen, Reason: ReasonWebhookUnhealthy}, after: openIgnore,
			wantState: v1alpha1.StateOpen, wantReady: metav1.ConditionTrue, wantReason: ReasonCircuitOpen},
		{name: "a webhook that cannot be probed is Unknown and not Ready", in: Input{TargetFound: true, ProbeUnknown: true, ProbeReason: "caBundle holds no PEM"}, d: Decision{Reason: ReasonProbeUnsupported, Blocked: true, Message: "cannot probe"}, after: closedFail,
			wantState: v1alpha1.StateUnknown, wantReady: metav1.ConditionFalse, wantReason: ReasonProbeUnsupported},
		{name: "an open circuit that cannot be probed is Open but not Ready", in: Input{TargetFound: true, ProbeUnknown: true}, d: Decision{Reason: ReasonProbeUnsupported, Blocked: true}, after: openIgnore,
			wantState: v1alpha1.StateOpen, wantReady: metav1.ConditionFalse, wantReason: ReasonProbeUnsupported},
		{name: "a missing target is Unknown and not Ready", in: Input{}, d: Decision{Reason: ReasonTargetNotFound, Blocked: true}, after: circuit.State{Index: -1},
			wantState: v1alpha1.StateUnknown, wantReady: metav1.ConditionFalse, wantReason: ReasonTargetNotFound},
		{name: "a blocking decision with a reason no one listed is still not Ready", in: Input{TargetFound: true}, d: Decision{Reason: "SomeFutureRefusal", Blocked: true}, after: closedFail,
			wantState: v1alpha1.StateUnknown, wantReady: metav1.ConditionFalse, wantReason: "SomeFutureRefusal"},
		{name: "a disarm shows Disarmed and not Ready", in: Input{TargetFound: true}, d: Decision{Write: WriteDrop, Reason: ReasonExternalChange, ExternalChange: true, Disarm: "an operator changed it"}, after: closedFail,
			wantState: v1alpha1.StateDisarmed, wantReady: metav1.ConditionFalse, wantReason: ReasonDisarmed},
		{name: "a disarm from before stays until re-armed", in: Input{TargetFound: true}, d: Decision{Reason: ReasonDisarmed}, after: closedFail, disarmed: "forced closed",
			wantState: v1alpha1.StateDisarmed, wantReady: metav1.ConditionFalse, wantReason: ReasonDisarmed},
		{name: "a re-arm clears it", in: Input{TargetFound: true}, d: Decision{Reason: ReasonNoChange, Rearm: true}, after: closedFail, disarmed: "forced closed",
			wantState: v1alpha1.StateClosed, wantReady: metav1.ConditionTrue, wantReason: ReasonArmed},
		{name: "a failed write is not Ready", in: Input{TargetFound: true}, d: Decision{Write: WriteOpen, Reason: ReasonWebhookUnhealthy}, after: closedFail, writeErr: errors.New("patch: connection refused"),
			wantState: v1alpha1.StateClosed, wantReady: metav1.ConditionFalse, wantReason: ReasonWriteFailed},
		{name: "Bypass that cannot be applied is not Ready", in: Input{TargetFound: true}, d: Decision{Write: WriteOpen, Reason: ReasonWebhookUnhealthy}, after: closedFail, writeErr: fmt.Errorf("open: %w", circuit.ErrCannotBypass),
			wantState: v1alpha1.StateClosed, wantReady: metav1.ConditionFalse, wantReason: ReasonCannotBypass},
		{name: "a refusal that leaves it able to act is Ready with its reason", in: Input{TargetFound: true}, d: Decision{Reason: ReasonAlreadyFailOpen, Refused: true, Message: "already fails open"}, after: adminIgnore,
			wantState: v1alpha1.StateClosed, wantReady: metav1.ConditionTrue, wantReason: ReasonAlreadyFailOpen},
		{name: "Observe is Ready and says so", in: Input{TargetFound: true, Mode: v1alpha1.ModeObserve}, d: Decision{Reason: ReasonObserving}, after: closedFail,
			wantState: v1alpha1.StateClosed, wantReady: metav1.ConditionTrue, wantReason: ReasonObserving},
		{name: "another breaker's record is not ours: Unknown", in: Input{TargetFound: true}, d: Decision{Reason: ReasonRecordOfOther, Blocked: true}, after: othersRecord,
			wantState: v1alpha1.StateUnknown, wantReady: metav1.ConditionFalse, wantReason: ReasonRecordOfOther},
	}
	now := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := &v1alpha1.WebhookCircuitBreaker{
				ObjectMeta: metav1.ObjectMeta{Name: "b", UID: uid, Generation: 2},
				Spec: v1alpha1.WebhookCircuitBreakerSpec{Target: v1alpha1.Target{
					Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "sidecar-injector", WebhookName: "w.tripswitch.test",
				}},
				Status: v1alpha1.WebhookCircuitBreakerStatus{TargetUID: cfgUID, DisarmedReason: tc.disarmed},
			}
			obs := Observed{State: tc.after}
			if tc.in.TargetFound {
				obs.Config = &circuit.Configuration{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: cfgUID}}}
			}
			if tc.in.ProbeUnknown {
				obs.Health.Last = probe.Result{Status: probe.Unknown, Reason: tc.in.ProbeReason}
			}
			s := NextStatus(b, Outcome{Input: tc.in, Decision: tc.d, Observed: obs, After: tc.after, WriteErr: tc.writeErr, Now: now})
			ready := meta.FindStatusCondition(s.Conditions, ConditionReady)
			if s.State != tc.wantState || ready == nil || ready.Status != tc.wantReady || ready.Reason != tc.wantReason {
				t.Fatalf("state %s, Ready %+v; want %s, %s %s", s.State, ready, tc.wantState, tc.wantReady, tc.wantReason)
			}
			if s.Target != "sidecar-injector/w.tripswitch.test" {
				t.Fatalf("target column %q", s.Target)
			}
			probeCond := meta.FindStatusCondition(s.Conditions, ConditionProbeUnsupported)
			if (probeCond.Status == metav1.ConditionTrue) != tc.in.ProbeUnknown {
				t.Fatalf("ProbeUnsupported %+v with ProbeUnknown %v", probeCond, tc.in.ProbeUnknown)
			}
			// A missing target has nothing to probe; it never "can be probed".
			if !tc.in.TargetFound && (probeCond.Reason != ReasonTargetNotFound || strings.Contains(probeCond.Message, "can be probed")) {
				t.Fatalf("missing target: ProbeUnsupported %+v", probeCond)
			}
		})
	}
}

package policy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/owners"
)

// Event is one event a status report emits on its breaker.
type Event struct {
	Type, Reason, Action, Message string
}

// ReportEvents are the events that go with writing next as b's status:
// refusals and findings once, when their condition first turns up, not on
// every reconcile (a disarm is one: Ready turns False with reason Disarmed
// and the message says how it re-arms); an owner that may undo the open
// (Owned), once; a refusal that leaves the breaker Ready, once when it
// starts; a recreated target; a re-arm.
func ReportEvents(b *v1alpha1.WebhookCircuitBreaker, d Decision, next v1alpha1.WebhookCircuitBreakerStatus) []Event {
	var out []Event
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionTargetFound, v1alpha1.ConditionExternalChange, v1alpha1.ConditionProbeUnsupported, v1alpha1.ConditionAPIServerSignal, v1alpha1.ConditionControllerStarved, v1alpha1.ConditionOpenTooLong, v1alpha1.ConditionPreflight} {
		c := meta.FindStatusCondition(next.Conditions, typ)
		if c == nil {
			continue
		}
		prev := meta.FindStatusCondition(b.Status.Conditions, typ)
		bad := (c.Status == metav1.ConditionFalse) == (typ == v1alpha1.ConditionReady || typ == v1alpha1.ConditionTargetFound || typ == v1alpha1.ConditionAPIServerSignal || typ == v1alpha1.ConditionPreflight)
		if bad && (prev == nil || prev.Status != c.Status || prev.Reason != c.Reason) {
			out = append(out, Event{"Warning", c.Reason, "Report", c.Message})
		}
	}
	if c, prev := meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionOwned), meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionOwned); c != nil &&
		(c.Reason == owners.ReasonUndoesOpen || c.Reason == owners.ReasonMayUndoOpen) && (prev == nil || prev.Reason != c.Reason) {
		out = append(out, Event{"Warning", c.Reason, "Report", c.Message})
	}
	if prev := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionReady); d.Refused && (prev == nil || prev.Reason != d.Reason) {
		out = append(out, Event{"Normal", d.Reason, "Refuse", d.Message})
	}
	if next.TargetUID != b.Status.TargetUID && b.Status.TargetUID != "" {
		out = append(out, Event{"Warning", ReasonTargetRecreated, "Report", fmt.Sprintf("%s %s was deleted and recreated (uid %s, was %s); any record of the old one is gone, starting fresh",
			b.Spec.Target.Kind, b.Spec.Target.ConfigurationName, next.TargetUID, b.Status.TargetUID)})
	}
	if RearmRequested(b) {
		out = append(out, Event{"Normal", ReasonRearmed, "Rearm", fmt.Sprintf("re-armed by annotation %s=%s", RearmAnnotation, b.Annotations[RearmAnnotation])})
	}
	return out
}

// StatusCanWait reports whether writing next as b's status loses nothing by
// waiting (during a storm, decisions go first): the circuit's truth is its
// record on the configuration, written already, and the status mirrors it
// later (with the record's times, and a close's reason kept in memory); a
// decision that must be remembered in the status (a disarm or re-arm, an
// external change, a refusal, a failed write, a recreated target) is
// written at once.
func StatusCanWait(b *v1alpha1.WebhookCircuitBreaker, o Outcome, next v1alpha1.WebhookCircuitBreakerStatus) bool {
	d := o.Decision
	return d.Disarm == "" && !d.Rearm && !d.ExternalChange && !d.Refused && !d.ReleaseFinalizer &&
		o.WriteErr == nil && !RearmRequested(b) && o.Observed.NotApproved == "" && next.TargetUID == b.Status.TargetUID &&
		!equality.Semantic.DeepEqual(next, b.Status)
}

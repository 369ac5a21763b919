package policy

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/openlimit"
)

// ReasonWithinMaxOpen is OpenTooLong's reason while it is False.
const ReasonWithinMaxOpen = "WithinMaxOpenDuration"

// Clocked sets what in knows from the clock: the half-open trial's verdict
// and spec.maxOpenDuration's judgement of this breaker's open circuit (on
// the record's openedAt, which survives failover).
func Clocked(in *Input, spec v1alpha1.ResolvedSpec, obs Observed, now time.Time) {
	in.Trial = TrialVerdict(spec, obs, now)
	if rec := in.State.Record; rec != nil && rec.BreakerUID == in.BreakerUID {
		in.MaxOpen = openlimit.CheckMaxOpen(rec.OpenedAt.Time, now, spec.MaxOpen, spec.OnMaxOpen)
	}
}

// decideMaxOpen: a circuit open for maxOpenDuration with onMaxOpen Close
// fails closed again although the webhook may still be failing, and stays
// closed for this outage (a disarm: it re-arms once the webhook is healthy,
// or with the annotation), so it does not open again at once.
func decideMaxOpen(in Input) (Decision, bool) {
	if !in.MaxOpen.Close || in.State.Record == nil {
		return Decision{}, false
	}
	why := fmt.Sprintf("open since %s, maxOpenDuration reached at %s and onMaxOpen is Close",
		in.State.Record.OpenedAt.UTC().Format(time.RFC3339), in.MaxOpen.Deadline.UTC().Format(time.RFC3339))
	return Decision{Write: WriteClose, Reason: v1alpha1.ReasonMaxOpenClosed, Disarm: why,
		Message: why + ": restoring the original policy although the webhook may still be failing"}, true
}

// setMaxOpen sets OpenTooLong: True while this breaker's circuit has been
// open for maxOpenDuration, and after onMaxOpen Close ended it (reason
// MaxOpenDurationClosed) until the breaker re-arms; none without a limit.
func setMaxOpen(s *v1alpha1.WebhookCircuitBreakerStatus, b *v1alpha1.WebhookCircuitBreaker, o Outcome, ours *v1alpha1.CircuitRecord) {
	if b.Spec.MaxOpenDuration == nil || b.Spec.MaxOpenDuration.Duration <= 0 {
		meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionOpenTooLong)
		return
	}
	set := setter(s, b, o)
	m := o.Input.MaxOpen
	prev := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionOpenTooLong)
	switch {
	case ours != nil && m.TooLong:
		set(v1alpha1.ConditionOpenTooLong, true, v1alpha1.ReasonMaxOpenDuration, fmt.Sprintf("open since %s, longer than maxOpenDuration %s (onMaxOpen %s)",
			ours.OpenedAt.UTC().Format(time.RFC3339), b.Spec.MaxOpenDuration.Duration, b.Spec.Resolve().OnMaxOpen))
	case o.Decision.Reason == v1alpha1.ReasonMaxOpenClosed && o.WriteErr == nil:
		set(v1alpha1.ConditionOpenTooLong, true, v1alpha1.ReasonMaxOpenClosed, o.Decision.Message)
	case ours == nil && s.DisarmedReason != "" && prev != nil && prev.Reason == v1alpha1.ReasonMaxOpenClosed:
		// Closed at the limit, not yet re-armed: as it was.
	case ours != nil:
		set(v1alpha1.ConditionOpenTooLong, false, ReasonWithinMaxOpen, "open until "+m.Deadline.UTC().Format(time.RFC3339)+" at most")
	default:
		set(v1alpha1.ConditionOpenTooLong, false, ReasonWithinMaxOpen, "the circuit is closed")
	}
}

// ReasonNotRefused is OpenRefused's reason while it is False.
const ReasonNotRefused = "NotRefused"

// setOpenRefused sets OpenRefused: True while --max-open-circuits keeps
// the circuit from opening (its transition time is the breaker's place in
// line, kept across failover); False once it is not, if it ever was.
func setOpenRefused(s *v1alpha1.WebhookCircuitBreakerStatus, b *v1alpha1.WebhookCircuitBreaker, o Outcome) {
	set := setter(s, b, o)
	switch {
	case o.Decision.Reason == v1alpha1.ReasonClusterLimit:
		set(v1alpha1.ConditionOpenRefused, true, v1alpha1.ReasonClusterLimit, o.Decision.Message)
	case meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionOpenRefused) != nil:
		set(v1alpha1.ConditionOpenRefused, false, ReasonNotRefused, "the cluster limit does not hold this circuit back")
	}
}

package policy

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// ReasonWithinMaxOpen is OpenTooLong's reason while it is False.
const ReasonWithinMaxOpen = "WithinMaxOpenDuration"

// MaxOpen is what spec.maxOpenDuration says about an open circuit now.
type MaxOpen struct {
	// TooLong: the circuit has been open for maxOpenDuration or longer
	// (the OpenTooLong condition, event and metric).
	TooLong bool
	// Close: TooLong and onMaxOpen is Close, so the webhook's original policy
	// is to be restored although it may still be failing.
	Close bool
	// Remaining is how long until TooLong (0 once it is): when to look again.
	Remaining time.Duration
	// Deadline is openedAt + maxOpenDuration.
	Deadline time.Time
}

// CheckMaxOpen judges a circuit opened at openedAt (the record's OpenedAt,
// which survives failover) at now, under spec's resolved limit. No limit
// (max 0) or no record (zero openedAt) is never too long. An openedAt in
// the future (clock skew between replicas) counts from now, so the wait is
// never longer than the limit.
func CheckMaxOpen(openedAt, now time.Time, max time.Duration, on v1alpha1.OnMaxOpen) MaxOpen {
	if max <= 0 || openedAt.IsZero() {
		return MaxOpen{}
	}
	if openedAt.After(now) {
		openedAt = now
	}
	m := MaxOpen{Deadline: openedAt.Add(max)}
	if m.Remaining = m.Deadline.Sub(now); m.Remaining <= 0 {
		m.Remaining, m.TooLong = 0, true
		m.Close = on == v1alpha1.OnMaxOpenClose
	}
	return m
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
	if o.Spec.MaxOpen <= 0 {
		meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionOpenTooLong)
		return
	}
	set := setter(s, b, o)
	m := o.Input.MaxOpen
	prev := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionOpenTooLong)
	switch {
	case ours != nil && m.TooLong:
		set(v1alpha1.ConditionOpenTooLong, true, v1alpha1.ReasonMaxOpenDuration, fmt.Sprintf("open since %s, longer than maxOpenDuration %s (onMaxOpen %s)",
			ours.OpenedAt.UTC().Format(time.RFC3339), o.Spec.MaxOpen, o.Spec.OnMaxOpen))
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

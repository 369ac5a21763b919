package policy

import (
	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// checkAlreadyFailOpen: the webhook already fails open the way this breaker
// would open it, and tripswitch did not do it (a failurePolicy of Ignore
// with openAction Ignore, or tripswitch's own matchCondition with Bypass
// left without a record). Opening would change nothing, so the breaker
// says so at once, not only when an outage comes. Only in the modes that
// may open; a disarm still re-arms on a healthy webhook.
func checkAlreadyFailOpen(in Input) (Decision, bool) {
	if (in.Mode != v1alpha1.ModeAuto && in.Mode != v1alpha1.ModeForceOpen) || in.Deleting || !in.TargetFound ||
		!in.State.FailsOpenWithoutRecord(in.Action) {
		return Decision{}, false
	}
	return Decision{Reason: ReasonAlreadyFailOpen, Refused: true, Message: circuit.AlreadyOpen(in.Action)}, true
}

package policy

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
)

// Reasons of the floor's condition and events.
const (
	ReasonFloorArmed    = "FloorArmed"
	ReasonFloorInert    = "FloorInert"
	ReasonFloorReleased = "FloorReleased"
	ReasonFloorFailed   = "FloorWriteFailed"
)

// FloorReport is what the floor's sync found and did, for the status and
// events (nil: the breaker has no fallback policy).
type FloorReport struct {
	Synced floor.Synced
	Err    error
	// Released are the replaced policies given back by this sync, Left
	// those still to give back, and PreviousErr why (floor.ReleaseAll).
	Released, Left []v1alpha1.FallbackPolicy
	PreviousErr    error
}

// FloorBeforeWrite is the floor a write needs in place before it is made:
// armed before an open (then the webhook opens), nothing before any other
// write (a close restores the webhook first, then disarms).
func FloorBeforeWrite(d Decision) (floor.Want, bool) {
	return floor.WantArmed, d.Write == WriteOpen
}

// FloorAfter is the floor the circuit as a write left it asks for: armed
// while this breaker's record is on the webhook (through a half-open trial
// too), released once a deleted breaker's webhook is restored, else inert.
func FloorAfter(b *v1alpha1.WebhookCircuitBreaker, d Decision, after circuit.State) floor.Want {
	switch {
	case after.Record != nil && after.Record.BreakerUID == b.UID:
		return floor.WantArmed
	case !b.DeletionTimestamp.IsZero() && d.ReleaseFinalizer:
		return floor.WantReleased
	}
	return floor.WantInert
}

// setFloor mirrors the floor into the status: status.floor and the
// FloorArmed condition; neither without a fallback policy or once it is
// released.
func setFloor(s *v1alpha1.WebhookCircuitBreakerStatus, b *v1alpha1.WebhookCircuitBreaker, o Outcome) {
	if o.Floor == nil && b.Spec.WhileOpen != nil && b.Spec.WhileOpen.FallbackPolicy != nil {
		return // not synced this time (a write failed): as last reported
	}
	if o.Floor == nil || (o.Floor.Synced.Status == nil && len(o.Floor.Left) == 0) {
		s.Floor = nil
		meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionFloorArmed)
		return
	}
	if o.Floor.Synced.Status == nil {
		// No policy named now (or it was released), one replaced still held.
		s.Floor = &v1alpha1.FloorStatus{Previous: floor.Names(o.Floor.Left), Message: errMessage(o.Floor.PreviousErr)}
		meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionFloorArmed)
		return
	}
	f := o.Floor.Synced.Status
	s.Floor = f.DeepCopy()
	if len(o.Floor.Left) > 0 {
		s.Floor.Previous = floor.Names(o.Floor.Left)
		if s.Floor.Message == "" {
			s.Floor.Message = errMessage(o.Floor.PreviousErr)
		}
	}
	set := setter(s, b, o)
	switch {
	case f.Armed:
		set(v1alpha1.ConditionFloorArmed, true, ReasonFloorArmed, fmt.Sprintf("fallback policy %s applies since %s", f.Policy, armedAt(f)))
	case o.Floor.Err != nil:
		set(v1alpha1.ConditionFloorArmed, false, ReasonFloorFailed, f.Message)
	default:
		set(v1alpha1.ConditionFloorArmed, false, ReasonFloorInert, "fallback policy "+f.Policy+" is inert while the circuit is closed")
	}
}

// errMessage is why a replaced policy is still held: its release failed,
// or it waits for the policy named now to be armed.
func errMessage(err error) string {
	if err != nil {
		return err.Error()
	}
	return "the replaced fallback policy is given back once the one named now is armed"
}

func armedAt(f *v1alpha1.FloorStatus) string {
	if f.ArmedAt == nil {
		return "a write of someone else"
	}
	return f.ArmedAt.UTC().Format(time.RFC3339)
}

// FloorEvents are the events of a floor's sync: each write, an external
// change, and a failure.
func FloorEvents(b *v1alpha1.WebhookCircuitBreaker, f *FloorReport) []Event {
	if f == nil {
		return nil
	}
	var out []Event
	if fp := fallbackOf(b); fp != nil {
		name := string(fp.Kind) + "/" + fp.Name
		switch f.Synced.Wrote {
		case floor.WantArmed:
			out = append(out, Event{"Warning", ReasonFloorArmed, "Arm", "armed fallback policy " + name + ": it applies while the circuit is open"})
		case floor.WantInert:
			out = append(out, Event{"Normal", ReasonFloorInert, "Disarm", "fallback policy " + name + " is inert"})
		case floor.WantReleased:
			out = append(out, Event{"Normal", ReasonFloorReleased, "Release", "released fallback policy " + name + " as tripswitch found it"})
		}
	}
	for _, name := range floor.Names(f.Released) {
		out = append(out, Event{"Normal", ReasonFloorReleased, "Release", "released fallback policy " + name +
			", no longer named by spec.whileOpen.fallbackPolicy, as tripswitch found it"})
	}
	if f.Synced.ExternalChange {
		out = append(out, Event{"Warning", ReasonExternalChange, "Report", f.Synced.Status.Message})
	}
	if f.Err != nil && (b.Status.Floor == nil || b.Status.Floor.Message != f.Synced.Status.Message) {
		out = append(out, Event{"Warning", ReasonFloorFailed, "Report", f.Err.Error()})
	}
	if f.PreviousErr != nil && (b.Status.Floor == nil || b.Status.Floor.Message != f.PreviousErr.Error()) {
		out = append(out, Event{"Warning", ReasonFloorFailed, "Report", f.PreviousErr.Error()})
	}
	return out
}

func fallbackOf(b *v1alpha1.WebhookCircuitBreaker) *v1alpha1.FallbackPolicy {
	if b.Spec.WhileOpen == nil {
		return nil
	}
	return b.Spec.WhileOpen.FallbackPolicy
}

package circuit

import (
	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// State is what a configuration says about one webhook's circuit.
type State struct {
	// Index is the webhook's position in the configuration, or -1 if it is missing.
	Index int
	// Webhook is the entry at Index.
	Webhook Webhook
	// Record is the recovery record, nil when there is none or it is corrupt.
	Record *v1alpha1.CircuitRecord
	// RecordErr wraps ErrCorruptRecord when the annotation cannot be trusted.
	RecordErr error
}

// Inspect reads webhook's state from cfg.
func Inspect(cfg *Configuration, webhook string) State {
	s := State{Index: cfg.Index(webhook)}
	if s.Index >= 0 {
		s.Webhook = cfg.Webhooks[s.Index]
	}
	s.Record, s.RecordErr = ReadRecord(cfg.Object.GetAnnotations(), webhook)
	return s
}

// Intact reports whether the change the record describes is still in place,
// that is, nobody else has changed the value tripswitch set (every change
// of its action's row still holds).
func (s State) Intact() bool {
	if s.Record == nil || s.Index < 0 {
		return false
	}
	gone, _ := undoneChanges(s.Record, s.Webhook)
	return len(gone) == 0
}

// InTrial reports whether the record says a half-open trial is running.
func (s State) InTrial() bool { return s.Record != nil && s.Record.Trial != nil }

// FailsOpenWithoutRecord reports whether the webhook already fails open in the
// way action would make it, with no record of tripswitch's: someone else set
// it, and tripswitch must neither take it over nor later restore it.
func (s State) FailsOpenWithoutRecord(a v1alpha1.OpenAction) bool {
	if s.Record != nil || s.Index < 0 {
		return false
	}
	row := actionOf(a, false)
	return row != nil && row.failsOpen(s.Webhook)
}

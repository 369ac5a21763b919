package floor

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Want is the floor a circuit asks for.
type Want string

// What a circuit asks of its floor.
const (
	// WantInert: the circuit is closed; the policy is adopted and inert.
	WantInert Want = "Inert"
	// WantArmed: the circuit is open, or about to open; the policy applies.
	WantArmed Want = "Armed"
	// WantReleased: the breaker is deleted and its webhook restored; the
	// policy goes back to how tripswitch found it.
	WantReleased Want = "Released"
)

// DroppedMessage starts status.floor.message after someone else changed
// tripswitch's condition and the record was dropped: the policy is left as
// it is while the circuit stays closed, and adopted anew when it opens.
const DroppedMessage = "someone else changed tripswitch's matchCondition on the policy; its record was dropped"

// Synced is what Sync found and did.
type Synced struct {
	// Status is the floor as the policy now has it, for the breaker's
	// status; nil once released.
	Status *v1alpha1.FloorStatus
	// Wrote is the write made toward the floor wanted, "" when none was needed.
	Wrote Want
	// ExternalChange: someone else changed tripswitch's condition; the
	// record was dropped and the policy left as it is.
	ExternalChange bool
}

// staleRetries is how often Sync reads again after a write that found the
// policy changed since it was read.
const staleRetries = 3

// Sync reads the fallback policy fp and writes its floor toward want, one
// conditional patch, reading again and deciding again when the policy
// changed in between. prev is the breaker's status.floor: a policy whose
// record was dropped (DroppedMessage) is not adopted again while the circuit
// stays closed. An error is also in Status.Message.
func (w Writer) Sync(ctx context.Context, fp v1alpha1.FallbackPolicy, owner Owner, want Want, prev *v1alpha1.FloorStatus, now metav1.Time) (Synced, error) {
	var err error
	for range staleRetries {
		var s Synced
		if s, err = w.syncOnce(ctx, fp, owner, want, prev, now); err == nil || !IsStale(err) {
			if err != nil {
				s.Status = &v1alpha1.FloorStatus{Policy: string(fp.Kind) + "/" + fp.Name, Message: err.Error()}
				if prev != nil {
					s.Status.Armed, s.Status.ArmedAt = prev.Armed, prev.ArmedAt
				}
			}
			return s, err
		}
	}
	return Synced{Status: &v1alpha1.FloorStatus{Policy: string(fp.Kind) + "/" + fp.Name, Message: err.Error()}}, err
}

func (w Writer) syncOnce(ctx context.Context, fp v1alpha1.FallbackPolicy, owner Owner, want Want, prev *v1alpha1.FloorStatus, now metav1.Time) (Synced, error) {
	p, err := w.Read(ctx, fp)
	if err != nil {
		return Synced{}, err
	}
	st := Inspect(p)
	if st.Drifted() {
		if _, err := w.Drop(ctx, p, owner); err != nil {
			return Synced{}, err
		}
		return Synced{Status: status(p, DroppedMessage+" (it now "+liveOrInert(p)+")"), ExternalChange: true}, nil
	}
	var wrote bool
	switch {
	case want == WantArmed:
		wrote, err = w.Arm(ctx, p, owner, now)
	case want == WantReleased:
		wrote, err = w.Release(ctx, p, owner)
	case st.Record == nil && prev != nil && prev.Policy == p.Name() && len(prev.Message) >= len(DroppedMessage) &&
		prev.Message[:len(DroppedMessage)] == DroppedMessage:
		return Synced{Status: prev}, nil // dropped: left as it is until the circuit opens
	default:
		wrote, err = w.Disarm(ctx, p, owner, now)
	}
	if err != nil {
		return Synced{}, fmt.Errorf("whileOpen.fallbackPolicy %s: %w", p.Name(), err)
	}
	s := Synced{Status: status(p, "")}
	if wrote {
		s.Wrote = want
	}
	if want == WantReleased {
		s.Status = nil
	}
	return s, nil
}

// status is the breaker's status.floor for p as it now is.
func status(p *Policy, msg string) *v1alpha1.FloorStatus {
	s := &v1alpha1.FloorStatus{Policy: p.Name(), Armed: Inspect(p).Armed(), Message: msg}
	if rec, _ := ReadRecord(p.Object.GetAnnotations()); rec != nil && rec.Armed {
		s.ArmedAt = rec.ArmedAt
	}
	return s
}

func liveOrInert(p *Policy) string {
	if Inspect(p).Armed() {
		return "applies"
	}
	return "is inert"
}

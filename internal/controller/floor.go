package controller

import (
	"context"
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
)

// syncFloor writes b's fallback policy toward want (floor.Writer.Sync),
// gives back any policy an earlier spec named (floor.Replaced: while the
// circuit is open, only once the policy named now is armed, so the circuit
// never goes without the floor it is meant to have) and emits its events;
// nil without a fallback policy, named now or before.
func (r *Reconciler) syncFloor(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, want floor.Want) *policy.FloorReport {
	replaced := floor.Replaced(b.Status.Floor, spec.Fallback)
	if spec.Fallback == nil && len(replaced) == 0 {
		return nil
	}
	w := floor.Writer{Client: r.Client, Reader: r.APIReader}
	owner := floor.Owner{Breaker: b.Name, UID: b.UID}
	f := &policy.FloorReport{}
	if spec.Fallback != nil {
		now := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
		f.Synced, f.Err = w.Sync(ctx, *spec.Fallback, owner, want, b.Status.Floor, now)
	}
	f.Left = replaced
	if len(replaced) > 0 && (f.Err == nil || want != floor.WantArmed) {
		f.Released, f.Left, f.PreviousErr = w.ReleaseAll(ctx, replaced, owner)
	}
	for _, e := range policy.FloorEvents(b, f) {
		r.event(b, e.Type, e.Reason, e.Action, "%s", e.Message)
	}
	return f
}

// writeWithFloor makes the decision's write between the floor's two steps:
// armed before an open, then as the write left the circuit (inert after a
// close, released after a deleted breaker's restore). A floor that cannot
// be armed stops the open (never looser than the policy intends), one that
// cannot be released holds the finalizer, and after a failed write the
// floor stays as it is until the next decision.
func (r *Reconciler) writeWithFloor(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, s step, others []companion) (circuit.State, *policy.FloorReport, error) {
	var f *policy.FloorReport
	if want, first := policy.FloorBeforeWrite(s.d); first {
		if f = r.syncFloor(ctx, b, spec, want); f != nil && f.Err != nil {
			return s.obs.State, f, f.Err
		}
	}
	after, err := r.write(ctx, b, s.obs, s.d, others)
	if err != nil && !errors.Is(err, circuit.ErrCannotBypass) {
		return after, f, err // decided again on a fresh read; the floor stays as it is
	}
	want := policy.FloorAfter(b, s.d, after)
	f = r.syncFloor(ctx, b, spec, want)
	if err == nil && f != nil && want == floor.WantReleased {
		err = errors.Join(f.Err, f.PreviousErr)
	}
	return after, f, err
}

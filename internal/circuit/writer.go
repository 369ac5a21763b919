package circuit

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/budget"
)

// FieldManager is the field manager of every write tripswitch makes to a
// webhook configuration: managedFields then tell its writes from an owner's
// (internal/owners), whatever the binary or user agent is called.
const FieldManager = "tripswitch"

// Writer applies circuit patches: it is the one code path that writes a
// webhook configuration, and it asks its Budget before every write. On
// success the configuration's Object holds the API server's answer, so the
// caller can Inspect it again without a read.
type Writer struct {
	// Client patches webhook configurations.
	Client client.Client
	// Budget counts each write against the outage window of every breaker
	// it writes for, before it is sent, and refuses one the window does
	// not allow (package budget). Required: NoBudget says so explicitly
	// for an operator's own writes.
	Budget Budget
}

// Budget is asked before every write to a webhook configuration. Spend
// counts write against the outage window of each breaker named, before the
// write is sent, or refuses it with an error wrapping budget.ErrExhausted;
// Refund gives back what Spend counted for a write the API server refused
// (so it was never applied).
type Budget interface {
	Spend(ctx context.Context, write budget.Write, breakers []string) error
	Refund(ctx context.Context, write budget.Write, breakers []string)
}

// NoBudget counts nothing and refuses nothing: for the writes a person
// makes through tripswitch's commands (a break-glass restore, the
// uninstall's stand-down), which no outage window budgets.
type NoBudget struct{}

// Spend allows every write.
func (NoBudget) Spend(context.Context, budget.Write, []string) error { return nil }

// Refund does nothing.
func (NoBudget) Refund(context.Context, budget.Write, []string) {}

// Open opens webhook's circuit (see OpenPatch) and returns the record written.
func (w Writer) Open(ctx context.Context, cfg *Configuration, webhook string, rec v1alpha1.CircuitRecord) (v1alpha1.CircuitRecord, error) {
	data, full, err := OpenPatch(cfg, webhook, rec)
	if err != nil {
		return full, err
	}
	return full, w.apply(ctx, cfg, "open circuit of webhook "+webhook, data, budget.Open, rec.Breaker)
}

// OpenAll opens several webhooks' circuits in one patch (see OpenAllPatch)
// and returns the records written.
func (w Writer) OpenAll(ctx context.Context, cfg *Configuration, recs []v1alpha1.CircuitRecord) ([]v1alpha1.CircuitRecord, error) {
	data, full, err := OpenAllPatch(cfg, recs)
	if err != nil {
		return nil, err
	}
	return full, w.apply(ctx, cfg, fmt.Sprintf("open the circuits of %d webhooks", len(recs)), data, budget.Open, breakersOf(recs)...)
}

// Close restores what rec says tripswitch changed and removes the record.
func (w Writer) Close(ctx context.Context, cfg *Configuration, webhook string, rec *v1alpha1.CircuitRecord) error {
	data, err := ClosePatch(cfg, webhook, rec)
	if err != nil {
		return err
	}
	return w.apply(ctx, cfg, "close circuit of webhook "+webhook, data, budget.Close, rec.Breaker)
}

// CloseAll closes several webhooks' circuits in one patch (see
// CloseAllPatch).
func (w Writer) CloseAll(ctx context.Context, cfg *Configuration, recs []v1alpha1.CircuitRecord) error {
	data, err := CloseAllPatch(cfg, recs)
	if err != nil {
		return err
	}
	return w.apply(ctx, cfg, fmt.Sprintf("close the circuits of %d webhooks", len(recs)), data, budget.Close, breakersOf(recs)...)
}

// StartTrial starts a half-open trial on rec's open Bypass circuit (see
// TrialPatch) and returns the record written.
func (w Writer) StartTrial(ctx context.Context, cfg *Configuration, rec v1alpha1.CircuitRecord, percent int32, now metav1.Time) (v1alpha1.CircuitRecord, error) {
	data, full, err := TrialPatch(cfg, rec, percent, now)
	if err != nil {
		return rec, err
	}
	return full, w.apply(ctx, cfg, "start a trial of webhook "+rec.Webhook, data, budget.TrialStart, rec.Breaker)
}

// EndTrial ends rec's failed trial (see EndTrialPatch) and returns the
// record written.
func (w Writer) EndTrial(ctx context.Context, cfg *Configuration, rec v1alpha1.CircuitRecord, next metav1.Time) (v1alpha1.CircuitRecord, error) {
	data, full, err := EndTrialPatch(cfg, rec, next)
	if err != nil {
		return rec, err
	}
	return full, w.apply(ctx, cfg, "end the trial of webhook "+rec.Webhook, data, budget.TrialEnd, rec.Breaker)
}

// Drop removes webhook's record and nothing else.
func (w Writer) Drop(ctx context.Context, cfg *Configuration, webhook string) error {
	data, err := DropPatch(cfg, webhook)
	if err != nil {
		return err
	}
	var breaker string
	if rec, _ := ReadRecord(cfg.Object.GetAnnotations(), webhook); rec != nil {
		breaker = rec.Breaker
	}
	return w.apply(ctx, cfg, "drop circuit record of webhook "+webhook, data, budget.Drop, breaker)
}

// apply sends one patch of cfg, spent first against the budget of each
// breaker it writes for; a patch the API server refused (so never
// applied) is refunded.
func (w Writer) apply(ctx context.Context, cfg *Configuration, what string, data []byte, write budget.Write, breakers ...string) error {
	if w.Budget == nil {
		return fmt.Errorf("%s on %s: the circuit writer has no budget (NoBudget says so for a person's own writes)", what, cfg.Object.GetName())
	}
	if err := w.Budget.Spend(ctx, write, breakers); err != nil {
		return fmt.Errorf("%s on %s: %w", what, cfg.Object.GetName(), err)
	}
	if err := w.Client.Patch(ctx, cfg.Object, client.RawPatch(types.JSONPatchType, data), client.FieldOwner(FieldManager)); err != nil {
		if refused(err) {
			w.Budget.Refund(ctx, write, breakers)
		}
		return fmt.Errorf("%s on %s: %w", what, cfg.Object.GetName(), err)
	}
	view, err := View(cfg.Object)
	if err != nil {
		return err
	}
	cfg.Webhooks = view.Webhooks
	return nil
}

// breakersOf names the breakers of recs.
func breakersOf(recs []v1alpha1.CircuitRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Breaker
	}
	return out
}

// refused reports whether the API server answered err having applied
// nothing: a refusal of the request (400, 403, 404, 409, 422). A timeout, a
// lost connection or a server error may have come after the write was
// stored, so what it spent stays spent.
func refused(err error) bool {
	return apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) || apierrors.IsNotFound(err) ||
		apierrors.IsConflict(err) || apierrors.IsInvalid(err)
}

// IsStale reports whether a patch failed because the object changed since it
// was read: 409 from the resourceVersion precondition, or 422 from a failed
// test operation (the API server does not tell the two apart from a malformed
// patch, which the unit tests rule out). The answer is to re-read and decide
// again, never to resend the same patch.
func IsStale(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsInvalid(err)
}

package circuit

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// FieldManager is the field manager of every write tripswitch makes to a
// webhook configuration: managedFields then tell its writes from an owner's
// (internal/owners), whatever the binary or user agent is called.
const FieldManager = "tripswitch"

// Writer applies circuit patches. On success the configuration's Object holds
// the API server's answer, so the caller can Inspect it again without a read.
type Writer struct {
	// Client patches webhook configurations.
	Client client.Client
}

// Open opens webhook's circuit (see OpenPatch) and returns the record written.
func (w Writer) Open(ctx context.Context, cfg *Configuration, webhook string, rec v1alpha1.CircuitRecord) (v1alpha1.CircuitRecord, error) {
	data, full, err := OpenPatch(cfg, webhook, rec)
	if err != nil {
		return full, err
	}
	return full, w.apply(ctx, cfg, "open circuit of webhook "+webhook, data)
}

// OpenAll opens several webhooks' circuits in one patch (see OpenAllPatch)
// and returns the records written.
func (w Writer) OpenAll(ctx context.Context, cfg *Configuration, recs []v1alpha1.CircuitRecord) ([]v1alpha1.CircuitRecord, error) {
	data, full, err := OpenAllPatch(cfg, recs)
	if err != nil {
		return nil, err
	}
	return full, w.apply(ctx, cfg, fmt.Sprintf("open the circuits of %d webhooks", len(recs)), data)
}

// Close restores what rec says tripswitch changed and removes the record.
func (w Writer) Close(ctx context.Context, cfg *Configuration, webhook string, rec *v1alpha1.CircuitRecord) error {
	data, err := ClosePatch(cfg, webhook, rec)
	if err != nil {
		return err
	}
	return w.apply(ctx, cfg, "close circuit of webhook "+webhook, data)
}

// CloseAll closes several webhooks' circuits in one patch (see
// CloseAllPatch).
func (w Writer) CloseAll(ctx context.Context, cfg *Configuration, recs []v1alpha1.CircuitRecord) error {
	data, err := CloseAllPatch(cfg, recs)
	if err != nil {
		return err
	}
	return w.apply(ctx, cfg, fmt.Sprintf("close the circuits of %d webhooks", len(recs)), data)
}

// StartTrial starts a half-open trial on rec's open Bypass circuit (see
// TrialPatch) and returns the record written.
func (w Writer) StartTrial(ctx context.Context, cfg *Configuration, rec v1alpha1.CircuitRecord, percent int32, now metav1.Time) (v1alpha1.CircuitRecord, error) {
	data, full, err := TrialPatch(cfg, rec, percent, now)
	if err != nil {
		return rec, err
	}
	return full, w.apply(ctx, cfg, "start a trial of webhook "+rec.Webhook, data)
}

// EndTrial ends rec's failed trial (see EndTrialPatch) and returns the
// record written.
func (w Writer) EndTrial(ctx context.Context, cfg *Configuration, rec v1alpha1.CircuitRecord, next metav1.Time) (v1alpha1.CircuitRecord, error) {
	data, full, err := EndTrialPatch(cfg, rec, next)
	if err != nil {
		return rec, err
	}
	return full, w.apply(ctx, cfg, "end the trial of webhook "+rec.Webhook, data)
}

// Drop removes webhook's record and nothing else.
func (w Writer) Drop(ctx context.Context, cfg *Configuration, webhook string) error {
	data, err := DropPatch(cfg, webhook)
	if err != nil {
		return err
	}
	return w.apply(ctx, cfg, "drop circuit record of webhook "+webhook, data)
}

func (w Writer) apply(ctx context.Context, cfg *Configuration, what string, data []byte) error {
	if err := w.Client.Patch(ctx, cfg.Object, client.RawPatch(types.JSONPatchType, data), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("%s on %s: %w", what, cfg.Object.GetName(), err)
	}
	view, err := View(cfg.Object)
	if err != nil {
		return err
	}
	cfg.Webhooks = view.Webhooks
	return nil
}

// IsStale reports whether a patch failed because the object changed since it
// was read: 409 from the resourceVersion precondition, or 422 from a failed
// test operation (the API server does not tell the two apart from a malformed
// patch, which the unit tests rule out). The answer is to re-read and decide
// again, never to resend the same patch.
func IsStale(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsInvalid(err)
}

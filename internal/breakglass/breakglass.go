// Package breakglass finds and restores the circuits tripswitch holds open,
// from the records on the webhook configurations themselves, for when the
// controller is not there to do it: it opened a circuit and then died, or it
// was uninstalled in the wrong order. It uses the controller's own one-patch
// protocol and ownership rules, with the operator's credentials.
package breakglass

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
)

// Circuit is one open circuit, as its record describes it.
type Circuit struct {
	Kind          v1alpha1.TargetKind `json:"kind"`
	Configuration string              `json:"configuration"`
	Webhook       string              `json:"webhook"`
	Action        v1alpha1.OpenAction `json:"action,omitempty"`
	Since         time.Time           `json:"since,omitzero"`
	Breaker       string              `json:"breaker,omitempty"`
	// BreakerExists: a WebhookCircuitBreaker with the record's name and UID
	// still exists (if not, nothing but a restore will close this circuit).
	BreakerExists bool `json:"breakerExists"`
	// Trial, when set, says the circuit is half-open: a trial lets this
	// share of requests reach the webhook, under failurePolicy Ignore, since
	// TrialSince. A restore ends the trial too.
	Trial      string    `json:"trial,omitempty"`
	TrialSince time.Time `json:"trialSince,omitzero"`
	// FailedTrials counts the trials of this open window that failed.
	FailedTrials int32 `json:"failedTrials,omitempty"`
	// Floor, when the breaker has a fallback policy, is how it stands:
	// "Kind/name armed" while the circuit is open.
	Floor string `json:"floor,omitempty"`
	// Problem, when set, is why tripswitch would not restore it: the record
	// is unreadable, or someone changed what tripswitch set.
	Problem string `json:"problem,omitempty"`
}

// Ref is CONFIGURATION/WEBHOOK.
func (c Circuit) Ref() string { return c.Configuration + "/" + c.Webhook }

// List returns every circuit recorded open in the cluster, sorted. It lists
// every webhook configuration, so it needs an operator's list permission,
// not the controller's.
func List(ctx context.Context, c client.Client) ([]Circuit, error) {
	var out []Circuit
	for _, kind := range circuit.Kinds {
		cfgs, err := circuit.List(ctx, c, kind)
		if err != nil {
			return nil, err
		}
		for _, cfg := range cfgs {
			for key, value := range cfg.Object.GetAnnotations() {
				webhook, ok := strings.CutPrefix(key, circuit.AnnotationPrefix)
				if !ok {
					continue
				}
				// A long webhook name is hashed in the key; the record names it in full.
				var rec v1alpha1.CircuitRecord
				if json.Unmarshal([]byte(value), &rec) == nil && rec.Webhook != "" {
					webhook = rec.Webhook
				}
				out = append(out, describe(ctx, c, kind, cfg, webhook))
			}
		}
	}
	slices.SortFunc(out, func(a, b Circuit) int { return strings.Compare(string(a.Kind)+a.Ref(), string(b.Kind)+b.Ref()) })
	return out, nil
}

// describe reads one record and says whether tripswitch could restore it.
func describe(ctx context.Context, c client.Client, kind v1alpha1.TargetKind, cfg *circuit.Configuration, webhook string) Circuit {
	out := Circuit{Kind: kind, Configuration: cfg.Object.GetName(), Webhook: webhook}
	st := circuit.Inspect(cfg, webhook)
	switch {
	case st.RecordErr != nil:
		out.Problem = "the record is unreadable: " + st.RecordErr.Error()
		return out
	case st.Record == nil:
		out.Problem = "no record"
		return out
	}
	rec := st.Record
	out.Action, out.Since, out.Breaker = rec.Action, rec.OpenedAt.Time, rec.Breaker
	out.FailedTrials = rec.FailedTrials
	if t := rec.Trial; t != nil {
		out.Trial, out.TrialSince = t.SamplePercent, t.StartedAt.Time
	}
	var b v1alpha1.WebhookCircuitBreaker
	if err := c.Get(ctx, client.ObjectKey{Name: rec.Breaker}, &b); err == nil && b.UID == rec.BreakerUID {
		out.BreakerExists = true
		out.Floor = floorState(ctx, c, &b)
	}
	switch {
	case st.Index < 0:
		out.Problem = "the webhook is no longer in the configuration"
	case !st.Intact():
		out.Problem = "someone changed what tripswitch set; restoring would overwrite their change"
	}
	return out
}

var (
	errNoRecord        = errors.New("no circuit record: tripswitch holds nothing open there")
	errNoConfiguration = errors.New("no webhook configuration")
)

// ErrRefused is matched by a restore that tripswitch's ownership rules forbid.
var ErrRefused = errors.New("refused")

// Restore closes the circuit of webhook in the configuration named config:
// it restores exactly what the record says tripswitch changed and removes
// the record, in one patch conditional on the version read; then it
// disarms the breaker's fallback policy, if it has one. kind may be
// empty when only one kind of configuration has that name. It refuses, with
// an error matching ErrRefused, when the record is unreadable or what
// tripswitch set was changed by someone else.
func Restore(ctx context.Context, c client.Client, kind v1alpha1.TargetKind, config, webhook string) error {
	return restore(ctx, c, kind, config, webhook, breakGlass)
}

// restorer is who restored a circuit, as the breaker's status says it.
type restorer struct {
	// reason closes the window and is CircuitOpen's and Ready's reason.
	reason string
	// by completes "restored by ...".
	by string
}

// breakGlass is `tripswitch restore`.
var breakGlass = restorer{reason: CloseReason, by: "a break-glass restore (tripswitch restore)"}

// restore is Restore, recorded on the breaker as by's.
func restore(ctx context.Context, c client.Client, kind v1alpha1.TargetKind, config, webhook string, by restorer) error {
	var restored *v1alpha1.CircuitRecord
	var ref string
	// A concurrent writer makes the patch stale: read again.
	err := retry.OnError(retry.DefaultRetry, circuit.IsStale, func() error {
		cfg, k, err := read(ctx, c, kind, config)
		if err != nil {
			return err
		}
		st := circuit.Inspect(cfg, webhook)
		ref = fmt.Sprintf("%s %s, webhook %s", k, config, webhook)
		switch {
		case st.RecordErr != nil:
			return fmt.Errorf("%w: %s: the record is unreadable (%v); fix or remove annotation %s by hand", ErrRefused, ref, st.RecordErr, circuit.AnnotationKey(webhook))
		case st.Record == nil:
			return fmt.Errorf("%s: %w", ref, errNoRecord)
		case st.Index < 0:
			return fmt.Errorf("%w: %s: the webhook is no longer in the configuration; remove annotation %s by hand", ErrRefused, ref, circuit.AnnotationKey(webhook))
		case !st.Intact():
			return fmt.Errorf("%w: %s: someone changed what tripswitch set (%s), so restoring would overwrite their change; if the current value is wrong, fix the webhook and remove annotation %s by hand", ErrRefused, ref, st.Record.Action, circuit.AnnotationKey(webhook))
		}
		if err := (circuit.Writer{Client: c, Budget: circuit.NoBudget{}}).Close(ctx, cfg, webhook, st.Record); err != nil && !circuit.IsStale(err) {
			return fmt.Errorf("restore %s: %w", ref, err)
		} else if err != nil {
			return err
		}
		restored = st.Record
		return nil
	})
	switch {
	case circuit.IsStale(err):
		return fmt.Errorf("restore %s/%s: the configuration kept changing: %w", config, webhook, err)
	case err != nil:
		return err
	}
	recorded := closeWindow(ctx, c, restored, ref, by)
	if err := syncFloor(ctx, c, restored.Breaker, floor.WantInert); err != nil {
		return fmt.Errorf("%w: restored %s, but its fallback policy is still armed (stricter, never looser; the controller disarms it when it returns): %w", ErrNotRecorded, ref, err)
	}
	return recorded
}

// read finds the configuration named config, of kind or of whichever kind
// has one by that name.
func read(ctx context.Context, c client.Client, kind v1alpha1.TargetKind, config string) (*circuit.Configuration, v1alpha1.TargetKind, error) {
	try := circuit.Kinds
	if kind != "" {
		try = []v1alpha1.TargetKind{kind}
	}
	var found []client.Object
	var foundKind v1alpha1.TargetKind
	for _, k := range try {
		obj, err := circuit.NewObject(k)
		if err != nil {
			return nil, "", err
		}
		if err := c.Get(ctx, client.ObjectKey{Name: config}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, "", fmt.Errorf("get %s %s: %w", k, config, err)
		}
		found, foundKind = append(found, obj), k
	}
	switch len(found) {
	case 0:
		return nil, "", fmt.Errorf("%w named %s", errNoConfiguration, config)
	case 1:
		cfg, err := circuit.View(found[0])
		return cfg, foundKind, err
	}
	return nil, "", fmt.Errorf("both a mutating and a validating configuration are named %s: say which with --kind", config)
}

// ErrNotRecorded is matched by a Restore that restored the webhook but
// could not close the window on its breaker's status: the circuit is
// closed; only the history lacks the restore.
var ErrNotRecorded = errors.New("not recorded")

// CloseReason closes a breaker's open window when a break-glass restore
// closed its circuit.
const CloseReason = v1alpha1.ReasonBreakGlassRestore

// StandDownReason closes a breaker's open window when the stand-down before
// an uninstall (`tripswitch standdown`, which the chart's pre-delete hook
// runs) closed its circuit.
const StandDownReason = "StandDown"

// closeWindow records the restore on the breaker that owns the record, if it
// still exists: its last open window closes now, with CloseReason, the
// status no longer mirrors a record, and its state and conditions say the
// circuit is closed (see restoredStatus). A controller that returns later
// would otherwise only see that the record is gone, not when or why, and
// until then `kubectl get wcb` would still say Open. The restore itself is
// done by then; failing to record it is reported, not undone.
func closeWindow(ctx context.Context, c client.Client, rec *v1alpha1.CircuitRecord, ref string, by restorer) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var b v1alpha1.WebhookCircuitBreaker
		err := c.Get(ctx, client.ObjectKey{Name: rec.Breaker}, &b)
		if apierrors.IsNotFound(err) || (err == nil && b.UID != rec.BreakerUID) {
			return nil
		}
		if err != nil {
			return err
		}
		base := b.DeepCopy()
		restoredStatus(&b, rec, metav1.Now(), by)
		if equality.Semantic.DeepEqual(base.Status, b.Status) {
			return nil
		}
		return c.Status().Patch(ctx, &b, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	})
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("%w: restored %s, but breaker %s kept changing while the restore was recorded", ErrNotRecorded, ref, rec.Breaker)
	case err != nil:
		return fmt.Errorf("%w: restored %s, but could not record it on breaker %s: %w", ErrNotRecorded, ref, rec.Breaker, err)
	}
	return nil
}

// restoredStatus makes b's status say that the circuit rec recorded was
// closed by the restorer by at now, if the status showed it: its window
// closes with by's reason, the mirrored record goes, the state becomes
// Closed, CircuitOpen turns False and Ready Unknown (with that reason),
// since only the controller can tell whether it could open and close the
// webhook again; its next look sets both.
func restoredStatus(b *v1alpha1.WebhookCircuitBreaker, rec *v1alpha1.CircuitRecord, now metav1.Time, by restorer) {
	s := &b.Status
	shown := s.State == v1alpha1.StateOpen
	if n := len(s.History); n > 0 && s.History[n-1].OpenedAt.Equal(&rec.OpenedAt) && s.CloseLast(now, by.reason) {
		shown = true
	}
	if s.Record != nil && s.Record.OpenedAt.Equal(&rec.OpenedAt) {
		s.Record = nil
		shown = true
	}
	if !shown {
		return
	}
	// An operator's restore ends the outage window: the returning
	// controller decides afresh, as after a recovery, and does not take
	// the open's absence for someone's undo.
	s.Outage = nil
	if s.State != v1alpha1.StateClosed {
		s.State = v1alpha1.StateClosed
		s.LastTransitionTime = &now
	}
	at := now.UTC().Format(time.RFC3339)
	for _, c := range []metav1.Condition{
		{Type: v1alpha1.ConditionCircuitOpen, Status: metav1.ConditionFalse, Reason: by.reason,
			Message: "restored by " + by.by + " at " + at + ": tripswitch holds no change on the webhook"},
		{Type: v1alpha1.ConditionReady, Status: metav1.ConditionUnknown, Reason: by.reason,
			Message: "the circuit was restored without the controller at " + at + "; whether tripswitch can open and close it again is the controller's to say when it next looks"},
	} {
		c.ObservedGeneration, c.LastTransitionTime = b.Generation, now
		meta.SetStatusCondition(&s.Conditions, c)
	}
}

package remediate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tripswitch-dev/tripswitch/internal/audit"
)

// maxConflicts is how often one object may change under a remediation
// before it is given up (each change is followed by a re-review).
const maxConflicts = 3

// ReapplyPatch is the JSON patch that re-applies a review's patch: a
// replace of metadata.resourceVersion with the reviewed one, which the API
// server turns into a precondition (409 Conflict if the object changed),
// then the review's operations, unchanged. A patch that is not a JSON array
// of RFC 6902 operations on fields, or one with an operation that could
// change the resourceVersion (on it, on all of metadata, or moving from it),
// is refused.
func ReapplyPatch(reviewPatch, resourceVersion string) ([]byte, error) {
	if resourceVersion == "" || !utf8.ValidString(resourceVersion) {
		return nil, errors.New("the review recorded no resourceVersion to make the patch conditional on")
	}
	var ops []map[string]any
	if err := json.Unmarshal([]byte(reviewPatch), &ops); err != nil {
		return nil, fmt.Errorf("the webhook's patch is not a JSON patch: %w", err)
	}
	if len(ops) == 0 {
		return nil, errors.New("the webhook's patch is empty")
	}
	for i, op := range ops {
		name, _ := op["op"].(string)
		path, _ := op["path"].(string)
		if !jsonPatchOps[name] || !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("the webhook's patch operation %d is not an operation on a field (op %q, path %q)", i, name, path)
		}
		from, hasFrom := op["from"].(string)
		if touchesPrecondition(path) || hasFrom && touchesPrecondition(from) {
			return nil, fmt.Errorf("the webhook's patch operation %d (%s %s) would change metadata.resourceVersion, the precondition", i, name, path)
		}
	}
	return json.Marshal(append([]map[string]any{precondition(resourceVersion)}, ops...))
}

// jsonPatchOps are RFC 6902's operations.
var jsonPatchOps = map[string]bool{"add": true, "remove": true, "replace": true, "move": true, "copy": true, "test": true}

// touchesPrecondition: an operation on this path (or moving from it) could
// change or remove metadata.resourceVersion.
func touchesPrecondition(path string) bool {
	return path == "" || path == "/metadata" || path == "/metadata/resourceVersion" || strings.HasPrefix(path, "/metadata/resourceVersion/")
}

func precondition(rv string) map[string]any {
	return map[string]any{"op": "replace", "path": "/metadata/resourceVersion", "value": rv}
}

// LabelPatch is the JSON patch that labels an object LabelKey=value under
// the same precondition as ReapplyPatch; nil when it already carries it.
func LabelPatch(labels map[string]string, value, resourceVersion string) ([]byte, error) {
	if resourceVersion == "" {
		return nil, errors.New("the review recorded no resourceVersion to make the label conditional on")
	}
	if labels[LabelKey] == value {
		return nil, nil
	}
	op := map[string]any{"op": "add", "path": "/metadata/labels/" + strings.ReplaceAll(LabelKey, "/", "~1"), "value": value}
	if labels == nil {
		op = map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{LabelKey: value}}
	}
	return json.Marshal([]map[string]any{precondition(resourceVersion), op})
}

// LabelValue is the label value naming a webhook: its name when that is a
// valid label value, else its first 54 characters and a hash of the whole.
func LabelValue(webhook string) string {
	if len(validation.IsValidLabelValue(webhook)) == 0 {
		return webhook
	}
	sum := sha256.Sum256([]byte(webhook))
	prefix := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			return r
		}
		return '-'
	}, webhook)
	if len(prefix) > 54 {
		prefix = prefix[:54]
	}
	prefix = strings.TrimLeft(strings.TrimRight(prefix, "-._"), "-._")
	if prefix == "" {
		return hex.EncodeToString(sum[:4])
	}
	return prefix + "-" + hex.EncodeToString(sum[:4])
}

// patchFor builds the item's patch from its finding; nil: nothing to do. A
// reapply ends with the operation that records the repair (RepairedKey),
// so the object carries it exactly when the repair was written.
func (r *Remediator) patchFor(it *Item) ([]byte, error) {
	f := it.finding
	if it.Action == Label {
		return LabelPatch(f.Object().GetLabels(), LabelValue(r.Webhook.Name), f.ResourceVersion)
	}
	patch, err := ReapplyPatch(f.Patch, f.ResourceVersion)
	if err != nil {
		return nil, err
	}
	rep := Repair{Window: r.window.From.Truncate(time.Second).UTC(), UID: f.Object().GetUID(), From: f.ResourceVersion, At: r.Now().Truncate(time.Second).UTC()}
	op, err := repairOp(f.Object(), f.Patch, r.webhookKey(), rep)
	if err != nil {
		return nil, err
	}
	var ops []json.RawMessage
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, err
	}
	last, err := json.Marshal(op)
	if err != nil {
		return nil, err
	}
	return json.Marshal(append(ops, last))
}

// want is the verdict an item's action needs.
func want(a Action) audit.Verdict {
	if a == Label {
		return audit.Objected
	}
	return audit.WouldMutate
}

// change sends the item's patch, dry run or not. A conflict re-reviews the
// object and tries again with what the webhook says of it now.
func (r *Remediator) change(ctx context.Context, it *Item, dryRun bool) error {
	f := it.finding
	verb := "patch"
	for attempt := 1; ; attempt++ {
		patch, err := r.patchFor(it)
		if err != nil {
			r.fail(it, dryRun, err.Error())
			return nil
		}
		if patch == nil {
			it.Outcome, it.Message = Current, "already labelled "+LabelKey+"="+LabelValue(r.Webhook.Name)
			return nil
		}
		it.Patch = string(patch)
		opts := metav1.PatchOptions{FieldManager: r.FieldManager}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		obj, err := r.Dynamic.Resource(f.GroupVersionResource()).Namespace(f.Namespace).Patch(ctx, f.Name, types.JSONPatchType, patch, opts)
		switch {
		case err == nil && it.Action == Reapply && !changes(f.Object(), obj):
			// The API server's answer, dry run or not, is the object as
			// stored: the webhook's patch (an add of what is there, a patch
			// pruned by the schema) leaves it as it was.
			it.Outcome, it.Message, it.Patch = Current, "the webhook's patch changes nothing on the object as the API server stores it: nothing to repair", ""
			return nil
		case err == nil:
			r.done(it, dryRun, obj.GetResourceVersion())
			return nil
		case apierrors.IsNotFound(err):
			it.Outcome, it.Message = Current, "deleted since its review"
			return nil
		case apierrors.IsConflict(err) && attempt < maxConflicts:
			if done, err := r.rereview(ctx, it); done || err != nil {
				return err
			}
		case apierrors.IsConflict(err):
			r.fail(it, dryRun, fmt.Sprintf("changed %d times while being remediated: %v", attempt, err))
			return nil
		case deniedBy(err, r.Webhook.Name):
			r.mark(it, err)
			return nil
		default:
			if err := stop(err, verb, f.Resource, f.Namespace); err != nil {
				return err
			}
			r.fail(it, dryRun, "the API server refused the patch: "+err.Error())
			return nil
		}
	}
}

// rereview asks the webhook about an object that changed since its audit.
// done: the item needs nothing more (its outcome is set).
func (r *Remediator) rereview(ctx context.Context, it *Item) (done bool, err error) {
	f := it.finding
	if r.Auditor == nil {
		it.Outcome, it.Message = Refused, "changed since its review, and no re-review is possible here"
		return true, nil
	}
	if err := r.Auditor.Rereview(ctx, r.Webhook, f); err != nil {
		if apierrors.IsNotFound(err) {
			it.Outcome, it.Message = Current, "deleted since its review"
			return true, nil
		}
		if err := stop(err, "get", f.Resource, f.Namespace); err != nil {
			return true, err
		}
		it.Outcome, it.Message = Failed, err.Error()
		return true, nil
	}
	it.Verdict, it.UID = f.Verdict, f.Object().GetUID()
	if f.Verdict == audit.WouldMutate && it.Action == Reapply && r.skipRepaired(it) {
		// Repaired meanwhile by another run (the controller's, an operator's).
		return true, nil
	}
	if f.Verdict != want(it.Action) {
		it.Outcome, it.Message, it.Patch = Current, fmt.Sprintf("changed since its review; re-reviewed: %s", f.Verdict), ""
		if f.Verdict == audit.NotChecked || f.Verdict == audit.NotReviewed {
			it.Outcome = Refused
		}
		return true, nil
	}
	return false, nil
}

// done records a change the API server accepted; rv is the object's
// resourceVersion after it.
func (r *Remediator) done(it *Item, dryRun bool, rv string) {
	if dryRun {
		if !r.Apply {
			it.Outcome = map[Action]Outcome{Reapply: WouldRemediate, Label: WouldLabel, Roll: WouldRoll}[it.Action]
		}
		return
	}
	it.ResourceVersion = rv
	switch it.Action {
	case Reapply:
		it.Outcome = Remediated
		r.event(it, "Normal", "Remediated", "re-applied the patch of webhook %s, which was skipped while its circuit was open (resourceVersion %s to %s)", r.Webhook.Name, it.finding.ResourceVersion, rv)
	case Label:
		it.Outcome = Labelled
		r.event(it, "Warning", "AdmittedWithout", "admitted while webhook %s was skipped; it objects now (%s): labelled %s", r.Webhook.Name, it.Message, LabelKey)
	}
}

// deniedBy reports whether err is the API server's answer that admission
// webhook name denied the request: a status of 400 or more whose message
// the API server begins with `admission webhook "<name>" denied the
// request` (k8s.io/apiserver's webhook errors.ToStatusErr). A webhook that
// failed, timed out, or another webhook's or policy's denial is not.
func deniedBy(err error, name string) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	s := status.Status()
	return s.Code >= 400 && strings.HasPrefix(s.Message, fmt.Sprintf("admission webhook %q denied the request", name))
}

// mark records an item whose update the recovered webhook denied: the
// webhook denies any update of the object, so no label and no re-applied
// patch can be written to it. It is marked where the webhook cannot block
// it: an event on the object (events are not what it reviews), the
// window's audit record and the report.
func (r *Remediator) mark(it *Item, denial error) {
	what, undone := "the repair", "not repaired"
	if it.Action == Label {
		what, undone = "the label "+LabelKey, "not labelled"
	}
	why := fmt.Sprintf("%s: %s is an update, and webhook %s reviews updates of this object too and denies them (%v)", undone, what, r.Webhook.Name, denial)
	it.Patch = ""
	if !r.Apply {
		it.Outcome, it.Message = WouldMark, why+"; --apply marks it instead with an AdmittedWithout event on it and in the window's audit record"
		return
	}
	// Denied in the dry run of an apply, the real update would be too: it
	// is not sent.
	it.Outcome, it.Message = Marked, why+"; marked instead with an AdmittedWithout event on it and in the window's audit record"
	note := "admitted while webhook %s was skipped; it objects now (%s), and it denies the label too, an update: fix or delete it"
	arg := it.finding.Message
	if it.Action == Reapply {
		note, arg = "admitted without webhook %s's mutation while its circuit was open; the webhook denies the update that would re-apply it (%s): recreate it through the webhook", denial.Error()
	}
	r.event(it, "Warning", "AdmittedWithout", note, r.Webhook.Name, arg)
}

func (r *Remediator) fail(it *Item, dryRun bool, msg string) {
	it.Outcome, it.Message = Failed, msg
	if dryRun {
		it.Message = "dry run: " + msg
	}
	if r.Apply {
		r.event(it, "Warning", "RemediationFailed", "could not repair what webhook %s skipped while its circuit was open: %s", r.Webhook.Name, it.Message)
	}
}

// event records an event on the item's object.
func (r *Remediator) event(it *Item, eventtype, reason, format string, args ...any) {
	if r.Recorder == nil || it.finding.Object() == nil {
		return
	}
	note := fmt.Sprintf(format, args...)
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	r.Recorder.Eventf(it.finding.Object(), r.Breaker, eventtype, reason, "Remediate", "%s", note)
}

package remediate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

// patchFor builds the item's patch from its finding; nil: nothing to do.
func (r *Remediator) patchFor(it *Item) ([]byte, error) {
	f := it.finding
	if it.Action == Label {
		return LabelPatch(f.Object().GetLabels(), LabelValue(r.Webhook.Name), f.ResourceVersion)
	}
	return ReapplyPatch(f.Patch, f.ResourceVersion)
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
		_, err = r.Dynamic.Resource(f.GroupVersionResource()).Namespace(f.Namespace).Patch(ctx, f.Name, types.JSONPatchType, patch, opts)
		switch {
		case err == nil:
			r.done(it, dryRun)
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
	it.Verdict = f.Verdict
	if f.Verdict != want(it.Action) {
		it.Outcome, it.Message, it.Patch = Current, fmt.Sprintf("changed since its review; re-reviewed: %s", f.Verdict), ""
		if f.Verdict == audit.NotChecked || f.Verdict == audit.NotReviewed {
			it.Outcome = Refused
		}
		return true, nil
	}
	return false, nil
}

func (r *Remediator) done(it *Item, dryRun bool) {
	if dryRun {
		if !r.Apply {
			it.Outcome = map[Action]Outcome{Reapply: WouldRemediate, Label: WouldLabel, Roll: WouldRoll}[it.Action]
		}
		return
	}
	switch it.Action {
	case Reapply:
		it.Outcome = Remediated
		r.event(it, "Normal", "Remediated", "re-applied the patch of webhook %s, which was skipped while its circuit was open", r.Webhook.Name)
	case Label:
		it.Outcome = Labelled
		r.event(it, "Warning", "AdmittedWithout", "admitted while webhook %s was skipped; it objects now (%s): labelled %s", r.Webhook.Name, it.Message, LabelKey)
	}
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

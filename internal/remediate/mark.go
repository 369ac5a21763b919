package remediate

import (
	"encoding/json"
	"fmt"
	"time"

	jsonpatchv4 "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/internal/jsonpatch"
)

// RepairedKey is the annotation a re-applied patch leaves on the object, in
// the same request as the repair, so that it exists exactly when the repair
// happened. Its value is a JSON object keyed by webhook
// ("configuration/webhook"), each a Repair. A run that finds the webhook's
// repair for this window (or a later one) does not repair the object again:
// a webhook that is not idempotent (it appends, counts, generates names)
// answers the repaired object with a new patch, and applying it would make
// the object what normal admission through the webhook never makes.
const RepairedKey = "tripswitch.dev/remediated"

// Repair is one webhook's repair of one object.
type Repair struct {
	// Window is when the repaired window opened (status.history[].openedAt).
	Window time.Time `json:"window"`
	// UID is the object's: the annotation copied onto another object (a
	// manifest exported and created again) is not that object's repair.
	UID types.UID `json:"uid"`
	// From is the resourceVersion that was reviewed and repaired.
	From string `json:"from"`
	// At is when the repair was written.
	At time.Time `json:"at"`
}

// repairs reads obj's RepairedKey; an unreadable value reads as none, and
// the next repair replaces it.
func repairs(obj *unstructured.Unstructured) map[string]Repair {
	out := map[string]Repair{}
	if v, ok := obj.GetAnnotations()[RepairedKey]; ok {
		if err := json.Unmarshal([]byte(v), &out); err != nil {
			return map[string]Repair{}
		}
	}
	return out
}

// repairedFor returns webhook's repair of obj if it covers the window that
// opened at from: the same object, repaired for this window or a later one
// (a later repair reviewed the object after this window closed).
func repairedFor(obj *unstructured.Unstructured, webhook string, from time.Time) (Repair, bool) {
	r, ok := repairs(obj)[webhook]
	return r, ok && r.UID == obj.GetUID() && !r.Window.Before(from.Truncate(time.Second))
}

// repairOp is the operation, sent after the review's, that records rep for
// webhook: RepairedKey as the review's operations leave obj, with rep set.
// The review's patch is applied to a copy with the library the API server
// applies JSON patches with, since it may add or replace
// metadata.annotations as a whole.
func repairOp(obj *unstructured.Unstructured, reviewPatch, webhook string, rep Repair) (jsonpatch.Op, error) {
	raw, err := obj.MarshalJSON()
	if err != nil {
		return jsonpatch.Op{}, fmt.Errorf("encode the object: %w", err)
	}
	p, err := jsonpatchv4.DecodePatch([]byte(reviewPatch))
	if err != nil {
		return jsonpatch.Op{}, fmt.Errorf("the webhook's patch is not a JSON patch: %w", err)
	}
	raw, err = p.Apply(raw)
	if err != nil {
		return jsonpatch.Op{}, fmt.Errorf("the webhook's patch does not apply to the object as reviewed: %w", err)
	}
	after := &unstructured.Unstructured{}
	if err := after.UnmarshalJSON(raw); err != nil {
		return jsonpatch.Op{}, fmt.Errorf("the object as the webhook's patch leaves it: %w", err)
	}
	all := repairs(after)
	all[webhook] = rep
	v, err := json.Marshal(all)
	if err != nil {
		return jsonpatch.Op{}, err
	}
	if after.GetAnnotations() == nil {
		return jsonpatch.Op{Op: "add", Path: "/metadata/annotations", Value: map[string]string{RepairedKey: string(v)}}, nil
	}
	return jsonpatch.Op{Op: "add", Path: "/metadata/annotations/" + jsonpatch.Pointer(RepairedKey), Value: string(v)}, nil
}

// changes reports whether after differs from before in more than what
// every write changes (resourceVersion, managedFields) and RepairedKey: a
// patch that changes nothing else repaired nothing.
func changes(before, after *unstructured.Unstructured) bool {
	strip := func(o *unstructured.Unstructured) map[string]any {
		c := o.DeepCopy()
		c.SetResourceVersion("")
		c.SetManagedFields(nil)
		if a := c.GetAnnotations(); a != nil {
			delete(a, RepairedKey)
			if len(a) == 0 {
				a = nil
			}
			c.SetAnnotations(a)
		}
		return c.Object
	}
	b, _ := json.Marshal(strip(before))
	a, _ := json.Marshal(strip(after))
	return string(a) != string(b)
}

// alreadyRepaired says why an object with a repair is left alone.
func alreadyRepaired(r Repair, from time.Time) string {
	when := "in this window"
	if r.Window.After(from.Truncate(time.Second)) {
		when = "for a later window (opened " + r.Window.UTC().Format(time.RFC3339) + ")"
	}
	return fmt.Sprintf("already repaired %s at %s (from resourceVersion %s; annotation %s): an object is repaired once per window, and the webhook would change it again (a webhook that is not idempotent does)",
		when, r.At.UTC().Format(time.RFC3339), r.From, RepairedKey)
}

// Package audit finds the objects a webhook would have reviewed while its
// circuit was open, and asks the recovered webhook about each of them.
//
// Restoring a webhook's policy does not fix what was admitted without it: an
// object created while a validating webhook was skipped may be one it
// rejects, and one created while a mutating webhook was skipped lacks its
// mutation. The audit lists such objects from the API server (read-only,
// paginated, rate-limited, capped) and re-reviews each with a dry-run
// AdmissionReview sent to the webhook itself.
//
// The evidence of "admitted in the window" is what the API server keeps:
// metadata.creationTimestamp (a CREATE) and the managedFields times of
// writes to the main resource (an UPDATE). Its limits: a manager's entry
// keeps only its latest write, so an object updated in the window and again
// by the same manager after it is missed; deleted objects are gone; times
// have one-second resolution, so the window is widened to whole seconds;
// an object whose managedFields were stripped shows only its creation.
package audit

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Window is when the circuit was open.
type Window struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Verdict is what the recovered webhook says of one object.
type Verdict string

// Verdicts.
const (
	// Objected: a validating webhook denies the object now.
	Objected Verdict = "Objected"
	// WouldMutate: a mutating webhook returns a patch for it now.
	WouldMutate Verdict = "WouldMutate"
	// NoObjection: the webhook allows it unchanged.
	NoObjection Verdict = "NoObjection"
	// NotChecked: the re-review failed (the webhook errored, timed out or
	// answered something unreadable); the object is not known to be clean.
	NotChecked Verdict = "NotChecked"
	// NotReviewed: the webhook declares side effects other than None or
	// NoneOnDryRun, so it is never sent a re-review.
	NotReviewed Verdict = "NotReviewed"
)

// Finding is one object admitted in the window that the webhook matches.
type Finding struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Resource   string `json:"resource"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	// Operation is CREATE (created in the window) or UPDATE.
	Operation string `json:"operation"`
	// At is the evidence's time; Evidence names it.
	At       time.Time `json:"at"`
	Evidence string    `json:"evidence"`
	Verdict  Verdict   `json:"verdict"`
	// Message is the webhook's denial message, or why it was not checked.
	Message string `json:"message,omitempty"`
	// Patch is the JSON patch a mutating webhook returned.
	Patch string `json:"patch,omitempty"`
	// ResourceVersion is the object's resourceVersion as it was reviewed:
	// the precondition of anything done to it on the strength of this
	// verdict.
	ResourceVersion string `json:"resourceVersion,omitempty"`

	obj *unstructured.Unstructured // as listed: re-reviewed without another read
	res gvr
}

// Object is the object as it was reviewed (nil on a decoded report).
func (f *Finding) Object() *unstructured.Unstructured { return f.obj }

// GroupVersionResource is the resource the object was listed through.
func (f *Finding) GroupVersionResource() schema.GroupVersionResource {
	return f.res.GroupVersionResource
}

// Report is one audit of one window.
type Report struct {
	Webhook  string    `json:"webhook"`
	Window   Window    `json:"window"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Resources are the group/resources the webhook's rules cover.
	Resources []string `json:"resources"`
	// Scanned is how many objects were listed; Found how many matched.
	Scanned int `json:"scanned"`
	Found   int `json:"found"`
	// Counts are the findings by verdict.
	Counts map[Verdict]int `json:"counts"`
	// Truncated: the cap was reached; later objects were not examined.
	Truncated bool `json:"truncated,omitempty"`
	// Notes say what limited the audit (a resource that could not be
	// listed, conditions that could not be evaluated, side effects).
	Notes    []string  `json:"notes,omitempty"`
	Findings []Finding `json:"findings"`
}

package remediate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// Action is what is done to one object.
type Action string

// Actions.
const (
	// Reapply: patch the object with the review's JSON patch.
	Reapply Action = "Reapply"
	// Roll: evict the Pod so that its owner recreates it.
	Roll Action = "Roll"
	// Label: mark an object a validating webhook objects to.
	Label Action = "Label"
	// List: report an object a validating webhook objects to, unchanged.
	List Action = "List"
	// Skip: nothing may be done (see the item's message).
	Skip Action = "Skip"
)

// Outcome is what became of one object.
type Outcome string

// Outcomes. The first seven are the counts in the window's audit status.
const (
	Remediated Outcome = "Remediated"
	Rolled     Outcome = "Rolled"
	Labelled   Outcome = "Labelled"
	// Marked: the recovered webhook denies any update of the object, so the
	// label or the re-applied patch, itself an update, cannot be written.
	// The object is marked where the webhook cannot block it: an
	// AdmittedWithout event on it, the window's audit record, the report.
	// A designed limit, not a failure.
	Marked Outcome = "Marked"
	// Refused: tripswitch would not act (a safety rule, a bare Pod, a
	// disruption budget that never allowed the eviction).
	Refused Outcome = "Refused"
	// Failed: the API server would not make the change; Message is its reason.
	Failed Outcome = "Failed"
	// Current: nothing left to do (already repaired in this window, a patch
	// that changes nothing, re-reviewed after a change and clean, already
	// labelled, deleted since).
	Current Outcome = "Current"
	// WouldRemediate, WouldRoll, WouldLabel: a dry run's answer, the API
	// server's dry run having accepted the change; WouldMark: the webhook
	// denied it in the dry run.
	WouldRemediate Outcome = "WouldRemediate"
	WouldRoll      Outcome = "WouldRoll"
	WouldLabel     Outcome = "WouldLabel"
	WouldMark      Outcome = "WouldMark"
	// Listed: an objected-to object reported without a label.
	Listed Outcome = "Listed"
	// NotDone: the run stopped before this object's turn.
	NotDone Outcome = "NotDone"
)

// LabelKey marks an object a validating webhook objects to; its value is the
// webhook's name.
const LabelKey = "tripswitch.dev/admitted-without"

// Item is one object of the audit and what became of it.
type Item struct {
	Kind      string        `json:"kind"`
	Resource  string        `json:"resource"`
	Namespace string        `json:"namespace,omitempty"`
	Name      string        `json:"name"`
	UID       types.UID     `json:"uid,omitempty"`
	Verdict   audit.Verdict `json:"verdict"`
	Action    Action        `json:"action"`
	Outcome   Outcome       `json:"outcome"`
	// Owner is a Pod's controller, "Kind/name", for a roll.
	Owner string `json:"owner,omitempty"`
	// Patch is the JSON patch sent (a reapply or a label), precondition included.
	Patch string `json:"patch,omitempty"`
	// ResourceVersion is the object's after the change, when it was changed.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Repaired is the webhook's repair of this window found on the object
	// (RepairedKey): why it is Current and not repaired again.
	Repaired *Repair `json:"repaired,omitempty"`
	// Message is the API server's or the webhook's reason, or why nothing was done.
	Message string `json:"message,omitempty"`

	finding *audit.Finding
	owner   types.UID
}

// Review is the review the item's reapply comes from: the webhook's JSON
// patch and the resourceVersion it was made for (the precondition). Empty
// on a decoded report, and for other actions.
func (it *Item) Review() (patch, resourceVersion string) {
	if it.finding == nil || it.Action != Reapply {
		return "", ""
	}
	return it.finding.Patch, it.finding.ResourceVersion
}

// Report is one remediation of one window.
type Report struct {
	Webhook string       `json:"webhook"`
	Window  audit.Window `json:"window"`
	// DryRun: nothing was changed; the outcomes are the API server's dry-run answers.
	DryRun   bool            `json:"dryRun"`
	Started  time.Time       `json:"started"`
	Finished time.Time       `json:"finished"`
	Counts   map[Outcome]int `json:"counts"`
	// Stopped says why the run ended early (an authorization error, the
	// breaker deleted), if it did.
	Stopped string `json:"stopped,omitempty"`
	Items   []Item `json:"items"`
}

// Recorder records events; client-go's events.EventRecorder is one.
type Recorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// Options say what a remediation may do.
type Options struct {
	// Apply makes the changes; false is a dry run (every change is still
	// sent to the API server, with dryRun=All).
	Apply bool
	// Roll evicts controller-owned Pods the webhook would mutate; false
	// reports them.
	Roll bool
	// Label labels objects a validating webhook objects to; false lists them.
	Label bool
	// MaxEvictions is how many Pods are evicted at once. Default 1.
	MaxEvictions int
	// EvictionBackoff is the first wait after a 429 (a disruption budget
	// allows no eviction now); it doubles up to MaxEvictionBackoff. Defaults
	// 1s and 30s.
	EvictionBackoff, MaxEvictionBackoff time.Duration
	// EvictionTimeout bounds how long one Pod's eviction is retried and how
	// long it may take to be gone; then it is Refused. Default 10m.
	EvictionTimeout time.Duration
}

// Remediator remediates one window. Its clients should be limited to the
// remediation's request budget (client-go's rate limiter on their config).
type Remediator struct {
	Dynamic dynamic.Interface
	Kube    kubernetes.Interface
	// Auditor re-reviews an object that changed after its audit.
	Auditor *audit.Auditor
	Webhook circuit.Webhook
	// Breaker is the breaker the window belongs to: the events' related
	// object, and where the summary event goes. May be nil.
	Breaker runtime.Object
	// Recorder records events on each object acted on and on the breaker; nil records none.
	Recorder Recorder
	// FieldManager names the writer of the patches. Default "tripswitch-remediate".
	FieldManager string
	// Check, if set, is asked before each change; an error stops the run
	// (the breaker deleted, leadership lost).
	Check func(context.Context) error
	Options
	// Now is the clock; default time.Now.
	Now func() time.Time

	window audit.Window // of the running remediation
}

// AuthorizationError is the first forbidden answer: the run stopped there.
type AuthorizationError struct {
	// Verb and Resource name the missing permission, Namespace its scope
	// ("" for cluster-scoped objects).
	Verb, Resource, Namespace string
	Err                       error
}

func (e *AuthorizationError) Error() string {
	where := "cluster-wide"
	if e.Namespace != "" {
		where = "in namespace " + e.Namespace
	}
	return fmt.Sprintf("stopped: the API server refused %s on %s %s (%v); grant it (Helm: --set remediation.enabled=true with the resource in remediation.resources; kustomize: the component config/remediation; docs/rbac.md) and run again",
		e.Verb, e.Resource, where, e.Err)
}

func (e *AuthorizationError) Unwrap() error { return e.Err }

func (r *Remediator) defaults() {
	if r.MaxEvictions <= 0 {
		r.MaxEvictions = 1
	}
	if r.EvictionBackoff <= 0 {
		r.EvictionBackoff = time.Second
	}
	if r.MaxEvictionBackoff <= 0 {
		r.MaxEvictionBackoff = 30 * time.Second
	}
	if r.EvictionTimeout <= 0 {
		r.EvictionTimeout = 10 * time.Minute
	}
	if r.FieldManager == "" {
		r.FieldManager = "tripswitch-remediate"
	}
	if r.Now == nil {
		r.Now = time.Now
	}
}

// errStop ends a run early without an authorization error.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }

// Run remediates the findings of an audit. The audit must be of a closed
// window, made by an Auditor whose findings carry their objects. The
// report is complete even when Run returns an error: an
// *AuthorizationError, or the Check's error, stopped the run there.
func (r *Remediator) Run(ctx context.Context, a *audit.Report) (*Report, error) {
	r.defaults()
	r.window = a.Window
	rep := &Report{Webhook: a.Webhook, Window: a.Window, DryRun: !r.Apply, Started: r.Now(), Counts: map[Outcome]int{}}
	for i := range a.Findings {
		if it, ok := r.plan(&a.Findings[i]); ok {
			rep.Items = append(rep.Items, it)
		}
	}
	err := r.execute(ctx, rep)
	for i := range rep.Items {
		if rep.Items[i].Outcome == "" {
			rep.Items[i].Outcome = NotDone
		}
		rep.Counts[rep.Items[i].Outcome]++
	}
	if err != nil {
		rep.Stopped = err.Error()
	}
	rep.Finished = r.Now()
	r.summarize(rep)
	return rep, err
}

// execute dry-runs every change, then (Apply) makes them: patches and
// labels first, evictions last.
func (r *Remediator) execute(ctx context.Context, rep *Report) error {
	for i := range rep.Items {
		if err := r.dryRun(ctx, &rep.Items[i]); err != nil {
			return err
		}
	}
	if !r.Apply {
		return nil
	}
	var rolls []*Item
	for i := range rep.Items {
		it := &rep.Items[i]
		switch {
		case it.Outcome != "":
		case it.Action == Roll:
			rolls = append(rolls, it)
		default:
			if err := r.check(ctx); err != nil {
				return err
			}
			if err := r.change(ctx, it, false); err != nil {
				return err
			}
		}
	}
	return r.roll(ctx, rolls)
}

func (r *Remediator) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return errStop{fmt.Errorf("stopped: %w", err)}
	}
	if r.Check == nil {
		return nil
	}
	if err := r.Check(ctx); err != nil {
		return errStop{fmt.Errorf("stopped: %w", err)}
	}
	return nil
}

// plan decides the action for one finding; false: nothing to report.
func (r *Remediator) plan(f *audit.Finding) (Item, bool) {
	it := Item{Kind: f.Kind, Resource: f.Resource, Namespace: f.Namespace, Name: f.Name, Verdict: f.Verdict, finding: f}
	if o := f.Object(); o != nil {
		it.UID = o.GetUID()
	}
	skip := func(msg string) (Item, bool) {
		it.Action, it.Outcome, it.Message = Skip, Refused, msg
		return it, true
	}
	switch f.Verdict {
	case audit.NoObjection:
		return it, false
	case audit.NotReviewed:
		return skip("not re-reviewed: the webhook declares side effects, so repairing it stays manual")
	case audit.NotChecked:
		return skip("the re-review failed (" + f.Message + "): nothing is done to an object not re-reviewed in this window")
	case audit.Objected:
		it.Message = f.Message
		if r.Label {
			it.Action = Label
		} else {
			it.Action, it.Outcome = List, Listed
		}
		return it, true
	case audit.WouldMutate:
	default:
		return skip(fmt.Sprintf("verdict %q: nothing is done", f.Verdict))
	}
	if f.Object() == nil {
		return skip("the audit holds no copy of the object to check the patch against")
	}
	if f.Resource != "pods" {
		it.Action = Reapply
		r.skipRepaired(&it)
		return it, true
	}
	owner, kind, ok, why := rollable(f.Object())
	if !ok {
		return skip(why)
	}
	it.Owner, it.owner = kind, owner
	if !r.Roll {
		return skip("a Pod's mutation cannot be patched into it: it is rolled (--roll, or spec.audit.remediate ReapplyAndRoll)")
	}
	it.Action = Roll
	return it, true
}

// webhookKey names the webhook in RepairedKey.
func (r *Remediator) webhookKey() string { return r.Webhook.Configuration + "/" + r.Webhook.Name }

// skipRepaired makes a reapply of an object the webhook's repair of this
// window is already on Current; true if it did.
func (r *Remediator) skipRepaired(it *Item) bool {
	rep, ok := repairedFor(it.finding.Object(), r.webhookKey(), r.window.From)
	if ok {
		it.Outcome, it.Message, it.Patch, it.Repaired = Current, alreadyRepaired(rep, r.window.From), "", &rep
	}
	return ok
}

// dryRun sends the item's change with dryRun=All and records a refusal.
func (r *Remediator) dryRun(ctx context.Context, it *Item) error {
	switch {
	case it.Outcome != "": // decided by the plan: already repaired
		return nil
	case it.Action == Reapply, it.Action == Label, it.Action == Roll:
	default:
		return nil
	}
	if it.Action == Roll {
		return r.evict(ctx, it, true)
	}
	return r.change(ctx, it, true)
}

// stop turns an authorization refusal into the run's end; other answers
// (an admission webhook's or policy's 403, a budget's negative allowance)
// are the object's failure, not the run's.
func stop(err error, verb, resource, namespace string) error {
	if apierrors.IsForbidden(err) && isRBACDenial(err) {
		return &AuthorizationError{Verb: verb, Resource: resource, Namespace: namespace, Err: err}
	}
	return nil
}

// isRBACDenial: the authorizer's 403 (`... is forbidden: User "u" cannot
// patch resource ...`), not admission's.
func isRBACDenial(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "is forbidden: User \"") && strings.Contains(msg, "\" cannot ")
}

// IsStop reports whether err ended a run early (an authorization error or
// the Check), as opposed to failing to start it.
func IsStop(err error) bool {
	var a *AuthorizationError
	var s errStop
	return errors.As(err, &a) || errors.As(err, &s)
}

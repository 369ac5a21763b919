package owners

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// Reasons of the Owned condition, from worst to best.
const (
	// ReasonUndoesOpen (Owned True): the owner puts back what the breaker's
	// open action changes; the breaker cannot hold the circuit open.
	ReasonUndoesOpen = "OwnerUndoesOpen"
	// ReasonMayUndoOpen (Owned True): the owner writes the entry with
	// Update; whether it puts back the open depends on what it writes.
	ReasonMayUndoOpen = "OwnerMayUndoOpen"
	// ReasonKeepsOpen (Owned True): the owner leaves what the open action
	// changes alone.
	ReasonKeepsOpen = "OwnerKeepsOpen"
	// ReasonCABundleOnly (Owned False): other controllers write only the
	// caBundle.
	ReasonCABundleOnly = "CABundleOnly"
	// ReasonNotOwned (Owned False): no other controller writes the entry.
	ReasonNotOwned = "NoOtherController"
)

// Verdict is what the configuration's other writers mean for one breaker.
type Verdict struct {
	// Owned: another controller writes the webhook entry beyond its caBundle.
	Owned bool
	// Reason and Message are the Owned condition's.
	Reason, Message string
	// Owner is the writer the verdict is about (the worst), nil when none.
	Owner *Writer
	// Kept: the verdict is the last one made (Judge's last), because
	// tripswitch's own write took a field it rests on.
	Kept bool
}

// Holds reports whether the breaker's open action survives the owner.
func (v Verdict) Holds() bool { return v.Reason != ReasonUndoesOpen && v.Reason != ReasonMayUndoOpen }

// Judge says what the writers of obj's webhook entry named webhook mean
// for a breaker that opens it with action (and runs half-open trials, which
// set failurePolicy Ignore for their sample, when trial). last is the
// breaker's Owned condition as last judged for the same spec, if any: once
// tripswitch's own Update of the failurePolicy (an open with Ignore, a
// trial, their close) has taken that field from the writer that owned it,
// managedFields no longer say who puts it back, and the last verdict
// stands, never one read from tripswitch's own entries.
func Judge(obj metav1.Object, webhook string, action v1alpha1.OpenAction, trial bool, last *metav1.Condition) Verdict {
	if last != nil && last.Reason != "" && Taken(obj, webhook)&FailurePolicy != 0 {
		return Verdict{Owned: last.Status == metav1.ConditionTrue, Reason: last.Reason, Message: last.Message, Kept: true}
	}
	created := obj.GetCreationTimestamp().Time
	owned := len(obj.GetOwnerReferences()) > 0
	var best Verdict
	var quiet []string // writers that are no owner, and why
	for _, w := range Writers(obj, webhook) {
		v, why := judgeOne(obj, webhook, w, created, owned, action, trial)
		if why != "" {
			quiet = append(quiet, why)
			continue
		}
		if best.Reason == "" || rank(v.Reason) < rank(best.Reason) {
			best = v
		}
	}
	switch {
	case best.Reason != "":
		return best
	case len(quiet) == 0:
		return Verdict{Reason: ReasonNotOwned, Message: "only tripswitch writes webhook " + webhook}
	}
	return Verdict{Reason: ReasonNotOwned, Message: "no other controller writes webhook " + webhook + ": " + strings.Join(quiet, "; ")}
}

// rank orders reasons from worst to best.
func rank(reason string) int {
	return slices.Index([]string{ReasonUndoesOpen, ReasonMayUndoOpen, ReasonKeepsOpen, ReasonCABundleOnly}, reason)
}

// judgeOne judges one writer of obj's webhook entry; why, when set, says
// why it is no owner.
func judgeOne(obj metav1.Object, webhook string, w Writer, created time.Time, ownerRef bool, action v1alpha1.OpenAction, trial bool) (Verdict, string) {
	p, isKnown := Known(w.Manager)
	who := "field manager " + w.Manager
	if isKnown && p.Kind != Tool {
		who = fmt.Sprintf("%s (field manager %s)", p.Name, w.Manager)
	}
	cameBack := w.Time.After(created)
	switch {
	case p.Kind == Tool:
		return Verdict{}, w.Manager + " is a person's tool and writes only when someone runs it"
	case w.Fields == CABundle:
		return Verdict{Reason: ReasonCABundleOnly, Owner: &w,
			Message: who + " writes only the caBundle of this webhook, which never undoes an open"}, ""
	case p.Kind == Unknown && !w.Applies() && !ownerRef && !cameBack, p.Kind == GitOps && !cameBack:
		return Verdict{}, w.Manager + " created the configuration and has not written it since"
	}
	puts, sure, unless := p.Puts, isKnown, ""
	if !isKnown || puts == (Reverts{}) {
		puts, sure, unless = merges(obj, webhook, w)
	}
	v := Verdict{Owned: true, Owner: &w}
	how := p.Writes
	if how == "" {
		how = fmt.Sprintf("writes this webhook's %s with %s", w.Fields, opName(w))
	}
	undone := puts.fields()&circuit.Changes(action, trial) != 0
	switch {
	case undone && sure:
		v.Reason = ReasonUndoesOpen
		v.Message = fmt.Sprintf("%s %s: it undoes %s at its next write, so tripswitch lets go (Disarmed, ExternalChange) and the webhook fails closed for the rest of the outage",
			who, how, undoneWhat(puts, action, trial))
	case undone:
		v.Reason = ReasonMayUndoOpen
		v.Message = fmt.Sprintf("%s %s: %s it undoes %s as soon as tripswitch opens, and tripswitch then lets go (Disarmed, ExternalChange) for the rest of the outage",
			who, how, unless, undoneWhat(puts, action, trial))
	default:
		v.Reason = ReasonKeepsOpen
		v.Message = fmt.Sprintf("%s %s: openAction %s holds, since it leaves what %s changes alone", who, how, action, action)
		if puts.Policy {
			v.Message += "; openAction Ignore would not (it puts the failurePolicy back)"
		}
	}
	switch {
	case p.FailOpen != "":
		v.Message += ". Its own fail-open setting: " + p.FailOpen
	case v.Reason != ReasonKeepsOpen && puts.Policy && !puts.Condition:
		v.Message += ". Use openAction Bypass: its matchCondition survives " + w.Manager + "'s writes"
	case v.Reason == ReasonMayUndoOpen:
		v.Message += ". If it does, fail the webhook open through " + w.Manager + "'s own settings: tripswitch cannot hold what its owner writes back"
	}
	return v, ""
}

// merges says what w's writes put back over an open, from how they merge:
// a server-side apply takes back the fields it applies (when it forces:
// without force its applies are refused while tripswitch holds the field),
// never another manager's entry of a keyed list (tripswitch's
// matchCondition); a client-side apply (a three-way strategic merge patch)
// sets what its last-applied manifest sets and keeps entries it never
// applied, so it puts back a failurePolicy only if the manifest sets one;
// an Update sends the whole object, so it may put back either. sure: the
// merge is known from managedFields; else unless says on what it depends.
func merges(obj metav1.Object, webhook string, w Writer) (puts Reverts, sure bool, unless string) {
	switch {
	case w.Applies():
		return Reverts{Policy: w.Fields&FailurePolicy != 0}, false,
			"applying with force (as controllers usually do; managedFields do not say) it takes back the failurePolicy it applies, so"
	case w.ClientSide:
		policy, ok := appliedPolicy(obj.GetAnnotations()[LastApplied], webhook)
		if !ok {
			return Reverts{Policy: w.Fields&FailurePolicy != 0}, false, "if its last-applied manifest sets the failurePolicy (it cannot be read)"
		}
		return Reverts{Policy: policy != "" && policy != string(admissionregistrationv1.Ignore)}, true, ""
	}
	return Reverts{Policy: w.Fields&FailurePolicy != 0, Condition: true}, false, "if it writes the whole entry"
}

// appliedPolicy is the failurePolicy a last-applied manifest sets on the
// webhook named webhook ("" when it sets none); ok is false when the
// manifest cannot be read.
func appliedPolicy(manifest, webhook string) (string, bool) {
	var m struct {
		Webhooks []struct {
			Name          string `json:"name"`
			FailurePolicy string `json:"failurePolicy"`
		} `json:"webhooks"`
	}
	if manifest == "" || json.Unmarshal([]byte(manifest), &m) != nil {
		return "", false
	}
	for _, h := range m.Webhooks {
		if h.Name == webhook {
			return h.FailurePolicy, true
		}
	}
	return "", true
}

func opName(w Writer) string {
	switch {
	case w.Applies():
		return "server-side apply"
	case w.ClientSide:
		return "client-side apply (a three-way strategic merge against its last-applied manifest)"
	}
	return "Update"
}

// undoneWhat says which change of tripswitch's an owner puts back.
func undoneWhat(puts Reverts, action v1alpha1.OpenAction, trial bool) string {
	if puts.fields()&circuit.Changes(action, false) == 0 && trial {
		return "the failurePolicy Ignore of each half-open trial (spec.halfOpen)"
	}
	return "openAction " + string(action)
}

// Blame names the writer that undid an open made at since: of the writers
// that wrote since then (managedFields keep seconds) and own more than the
// caBundle, the one that owns the failurePolicy when policy says that is
// what was put back, else the latest. A write that only removed fields
// (the matchCondition, the record) takes no field, so managedFields do not
// date it: then the likeliest writer is named as such, the latest one
// that owns more than the caBundle and is not a person's tool.
func Blame(writers []Writer, since time.Time, policy bool) string {
	since = since.Truncate(time.Second)
	var latest, likeliest *Writer
	for i, w := range writers {
		if w.Fields&^CABundle == 0 {
			continue
		}
		if !w.Time.Before(since) {
			if policy && w.Fields&FailurePolicy != 0 {
				return w.Name()
			}
			if latest == nil {
				latest = &writers[i]
			}
		}
		if p, _ := Known(w.Manager); likeliest == nil && p.Kind != Tool {
			likeliest = &writers[i]
		}
	}
	switch {
	case latest != nil:
		return latest.Name()
	case likeliest != nil:
		return "probably " + likeliest.Name() + " (a write that only removes fields leaves no trace in managedFields)"
	}
	return "a writer managedFields do not name"
}

// Name is a writer as a message names it: its project, if known, and its
// field manager.
func (w Writer) Name() string {
	if p, ok := Known(w.Manager); ok && p.Kind != Tool {
		return fmt.Sprintf("%s (field manager %s, %s)", p.Name, w.Manager, opName(w))
	}
	return fmt.Sprintf("field manager %s (%s)", w.Manager, opName(w))
}

package circuit

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Field is a field of a webhook entry that an open action changes.
type Field uint8

// Fields an open action changes.
const (
	// FieldFailurePolicy is the entry's failurePolicy.
	FieldFailurePolicy Field = 1 << iota
	// FieldMatchCondition is tripswitch's matchCondition in the entry.
	FieldMatchCondition
)

// Has reports whether f includes g.
func (f Field) Has(g Field) bool { return f&g != 0 }

// change is one field as an open left it: the field, whether it is still so
// on a webhook, what a message says of it when it is not, and the
// operations that give it back (tested to be still as tripswitch set it).
// A close gives back every change; a drop, those that still hold.
type change struct {
	field   Field
	holds   func(Webhook) bool
	gone    func(Webhook) string
	restore func(s State, rec v1alpha1.CircuitRecord) []operation
}

// action is one way tripswitch fails a webhook open: one row of the table
// below. It says what the open writes, what closing it restores, which
// fields it changes (what an owner must put back to undo it), what
// "intact" means (every change still holds), whether a webhook already
// fails open that way without tripswitch, and what it costs in writes to
// the configuration. Adding an action is adding a row; every part of
// tripswitch that asks about an action asks the table.
type action struct {
	name v1alpha1.OpenAction
	// trial: the row is a half-open trial on an open Bypass circuit.
	trial bool
	// fields are the fields it changes.
	fields Field
	// writes is what it costs: the open and the close, or a trial's start
	// and end.
	writes int
	// calls: the API server still calls the webhook while the circuit is
	// open this way, so its own calls can confirm a recovery (Bypass skips
	// them all; a trial sends a sample).
	calls bool
	// changes are what must still hold on the webhook for rec's open to be
	// intact, each with how it is given back.
	changes func(rec *v1alpha1.CircuitRecord) []change
	// marks fills in what rec says the open set; check says what a record
	// of it must say.
	marks func(rec *v1alpha1.CircuitRecord)
	check func(rec *v1alpha1.CircuitRecord) error
	// open returns the operations that open webhook i (w), with rec marked.
	open func(w Webhook, i int, rec *v1alpha1.CircuitRecord) ([]operation, error)
	// failsOpen reports whether w already fails open this way with no
	// record of tripswitch's, and already says so.
	failsOpen func(w Webhook) bool
	already   string
}

// actions is the table: Ignore, Bypass, and a trial on Bypass.
var actions = []action{
	{
		name: v1alpha1.OpenActionIgnore, fields: FieldFailurePolicy, writes: 2, calls: true,
		changes: func(rec *v1alpha1.CircuitRecord) []change { return []change{policyChange(rec.SetFailurePolicy)} },
		marks:   func(rec *v1alpha1.CircuitRecord) { rec.SetFailurePolicy = string(admissionregistrationv1.Ignore) },
		check: func(rec *v1alpha1.CircuitRecord) error {
			if rec.SetFailurePolicy == "" {
				return errors.New("action Ignore without setFailurePolicy")
			}
			return nil
		},
		open: func(w Webhook, i int, rec *v1alpha1.CircuitRecord) ([]operation, error) {
			var ops []operation
			if w.FailurePolicy != nil {
				ops = append(ops, operation{Op: "test", Path: webhookPath(i, "failurePolicy"), Value: string(*w.FailurePolicy)})
			}
			return append(ops, operation{Op: "add", Path: webhookPath(i, "failurePolicy"), Value: rec.SetFailurePolicy}), nil
		},
		failsOpen: func(w Webhook) bool {
			return w.FailurePolicy != nil && *w.FailurePolicy == admissionregistrationv1.Ignore
		},
		already: "the webhook's failurePolicy is already Ignore, set without tripswitch, so openAction Ignore can change nothing: " +
			"in an outage requests are admitted anyway, each after waiting up to the webhook's timeoutSeconds. " +
			"Set spec.openAction to Bypass to skip the webhook while it is down",
	},
	{
		name: v1alpha1.OpenActionBypass, fields: FieldMatchCondition, writes: 2,
		changes: func(rec *v1alpha1.CircuitRecord) []change {
			return []change{conditionChange(rec.MatchCondition, MatchConditionExpression)}
		},
		marks: func(rec *v1alpha1.CircuitRecord) { rec.MatchCondition = MatchConditionName },
		check: func(rec *v1alpha1.CircuitRecord) error {
			if rec.MatchCondition == "" {
				return errors.New("action Bypass without matchCondition")
			}
			return nil
		},
		open: func(w Webhook, i int, rec *v1alpha1.CircuitRecord) ([]operation, error) {
			if conditionIndex(w.MatchConditions, MatchConditionName) >= 0 {
				return nil, fmt.Errorf("%w: webhook %q already has a matchCondition named %s that tripswitch has no record of", ErrCannotBypass, w.Name, MatchConditionName)
			}
			if len(w.MatchConditions) >= maxMatchConditions {
				return nil, fmt.Errorf("%w: webhook %q already has the maximum of %d matchConditions", ErrCannotBypass, w.Name, maxMatchConditions)
			}
			cond := admissionregistrationv1.MatchCondition{Name: rec.MatchCondition, Expression: MatchConditionExpression}
			if len(w.MatchConditions) == 0 {
				rec.MatchConditionsWereUnset = true
				return []operation{{Op: "add", Path: webhookPath(i, "matchConditions"), Value: []admissionregistrationv1.MatchCondition{cond}}}, nil
			}
			return []operation{{Op: "add", Path: webhookPath(i, "matchConditions") + "/-", Value: cond}}, nil
		},
		failsOpen: func(w Webhook) bool {
			return conditionIndex(w.MatchConditions, MatchConditionName) >= 0
		},
		already: "the webhook already has matchCondition " + MatchConditionName + ", set without tripswitch's record, so openAction Bypass can change nothing; leaving it alone",
	},
	{
		// A trial: the Bypass matchCondition samples instead of skipping,
		// and the webhook's failurePolicy is Ignore for the sample. It
		// starts and ends as TrialPatch and EndTrialPatch say; a close
		// from a trial gives back both, and a drop whatever of them is
		// still as the trial set it (an owner that puts its failurePolicy
		// back leaves the sampled matchCondition, which without a record
		// nothing would ever remove).
		name: v1alpha1.OpenActionBypass, trial: true, fields: FieldMatchCondition | FieldFailurePolicy, writes: 2, calls: true,
		changes: func(rec *v1alpha1.CircuitRecord) []change {
			return []change{conditionChange(rec.MatchCondition, rec.Trial.Expression), policyChange(rec.Trial.SetFailurePolicy)}
		},
		marks: func(*v1alpha1.CircuitRecord) {},
		check: func(rec *v1alpha1.CircuitRecord) error {
			t := rec.Trial
			switch {
			case !IsSampleExpression(t.Expression):
				return errors.New("trial.expression is not an expression tripswitch writes")
			case t.SetFailurePolicy != string(admissionregistrationv1.Ignore):
				return fmt.Errorf("trial.setFailurePolicy %q is not Ignore", t.SetFailurePolicy)
			}
			return nil
		},
		failsOpen: func(Webhook) bool { return false },
	},
}

// actionOf is the row for an open action, in a trial or not; nil for an
// action the table does not have.
func actionOf(a v1alpha1.OpenAction, trial bool) *action {
	for i := range actions {
		if actions[i].name == a && actions[i].trial == trial {
			return &actions[i]
		}
	}
	return nil
}

// recordAction is the row that made rec.
func recordAction(rec *v1alpha1.CircuitRecord) *action {
	return actionOf(rec.Action, rec.Trial != nil)
}

// Changes are the fields of the webhook entry that an open with action a
// changes (and a half-open trial on it, when trial): what a writer must put
// back to undo the open. None for an action tripswitch does not know.
func Changes(a v1alpha1.OpenAction, trial bool) Field {
	f := Field(0)
	if row := actionOf(a, false); row != nil {
		f = row.fields
	}
	if trial {
		if row := actionOf(a, true); row != nil {
			f |= row.fields
		}
	}
	return f
}

// Cost is how many writes to the configuration an open with action a
// costs: its open and its close.
func Cost(a v1alpha1.OpenAction) int {
	if row := actionOf(a, false); row != nil {
		return row.writes
	}
	return 0
}

// FieldNames says fields as a message does.
func (f Field) String() string {
	var out []string
	if f.Has(FieldFailurePolicy) {
		out = append(out, "failurePolicy")
	}
	if f.Has(FieldMatchCondition) {
		out = append(out, "matchCondition "+MatchConditionName)
	}
	return strings.Join(out, " and ")
}

func policyChange(set string) change {
	return change{
		field: FieldFailurePolicy,
		restore: func(s State, rec v1alpha1.CircuitRecord) []operation {
			return restorePolicy(s.Index, set, rec.OriginalFailurePolicy)
		},
		holds: func(w Webhook) bool { return w.FailurePolicy != nil && string(*w.FailurePolicy) == set },
		gone: func(w Webhook) string {
			policy := "unset"
			if w.FailurePolicy != nil {
				policy = string(*w.FailurePolicy)
			}
			return "failurePolicy is " + policy + " again"
		},
	}
}

func conditionChange(name, expr string) change {
	return change{
		field: FieldMatchCondition,
		restore: func(s State, rec v1alpha1.CircuitRecord) []operation {
			ops := removeCondition(s, rec)
			j := conditionIndex(s.Webhook.MatchConditions, name)
			return append([]operation{{Op: "test", Path: webhookPath(s.Index, "matchConditions") + "/" + strconv.Itoa(j) + "/expression", Value: expr}}, ops...)
		},
		holds: func(w Webhook) bool {
			j := conditionIndex(w.MatchConditions, name)
			return j >= 0 && w.MatchConditions[j].Expression == expr
		},
		gone: func(w Webhook) string {
			if conditionIndex(w.MatchConditions, name) < 0 {
				return "matchCondition " + name + " is gone"
			}
			return "matchCondition " + name + "'s expression was changed"
		},
	}
}

// HasTrial reports whether open action a closes through half-open trials
// (a row for a trial on it).
func HasTrial(a v1alpha1.OpenAction) bool { return actionOf(a, true) != nil }

// Calls reports whether the API server still calls the webhook while rec's
// circuit is open, so that its own calls can confirm a recovery.
func Calls(rec *v1alpha1.CircuitRecord) bool {
	row := recordAction(rec)
	return row != nil && row.calls
}

// CanTrial reports whether a half-open trial can start on s's open circuit
// without writing over anyone: the trial sets the failurePolicy Ignore for
// its sample and gives back the original after, so someone who changed the
// failurePolicy while the circuit was open (which does not undo a Bypass)
// keeps it, and the circuit closes without a trial.
func (s State) CanTrial() bool {
	rec := s.Record
	if rec == nil || rec.Trial != nil || !HasTrial(rec.Action) || s.Index < 0 {
		return false
	}
	now, was := "", ""
	if fp := s.Webhook.FailurePolicy; fp != nil {
		now = string(*fp)
	}
	if rec.OriginalFailurePolicy != nil {
		was = *rec.OriginalFailurePolicy
	}
	return now == was
}

// AlreadyOpen says why open action a can change nothing on a webhook that
// already fails open its way without tripswitch's record.
func AlreadyOpen(a v1alpha1.OpenAction) string {
	if row := actionOf(a, false); row != nil {
		return row.already
	}
	return ""
}

// giveBack are the operations that give back the changes of rec's open
// that still hold on s's webhook: all of them for a close (the open
// intact), those someone else left alone for a drop.
func giveBack(s State, rec v1alpha1.CircuitRecord) []operation {
	var ops []operation
	for _, c := range recordAction(&rec).changes(&rec) {
		if c.holds(s.Webhook) {
			ops = append(ops, c.restore(s, rec)...)
		}
	}
	return ops
}

// undoneChanges are the parts of rec's open that no longer hold on w, and
// the fields they are.
func undoneChanges(rec *v1alpha1.CircuitRecord, w Webhook) ([]string, Field) {
	row := recordAction(rec)
	if row == nil {
		return []string{fmt.Sprintf("action %q is not one tripswitch writes", rec.Action)}, 0
	}
	var gone []string
	var fields Field
	for _, c := range row.changes(rec) {
		if !c.holds(w) {
			gone = append(gone, c.gone(w))
			fields |= c.field
		}
	}
	return gone, fields
}

func conditionIndex(conds []admissionregistrationv1.MatchCondition, name string) int {
	return slices.IndexFunc(conds, func(c admissionregistrationv1.MatchCondition) bool { return c.Name == name })
}

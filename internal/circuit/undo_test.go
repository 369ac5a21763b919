package circuit_test

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// Every shape of "someone undid the open" is decided by the one rule, and
// nothing else is: a change still in place, a record gone with a
// configuration that is gone or no longer has the webhook, or an open
// tripswitch does not hold.
func TestUndoneDecidesEveryShape(t *testing.T) {
	fail, ignore := ptr.To(admissionregistrationv1.Fail), ptr.To(admissionregistrationv1.Ignore)
	sample, _, err := circuit.SampleExpression(6)
	if err != nil {
		t.Fatal(err)
	}
	at := metav1.Unix(1_800_000_000, 0)
	ignoreRec := &v1alpha1.CircuitRecord{Webhook: "w", Action: v1alpha1.OpenActionIgnore, SetFailurePolicy: "Ignore", OpenedAt: at}
	bypassRec := &v1alpha1.CircuitRecord{Webhook: "w", Action: v1alpha1.OpenActionBypass, MatchCondition: circuit.MatchConditionName, OpenedAt: at}
	trialRec := bypassRec.DeepCopy()
	trialRec.Trial = &v1alpha1.TrialRecord{Expression: sample, SetFailurePolicy: "Ignore"}
	cond := func(expr string) []admissionregistrationv1.MatchCondition {
		return []admissionregistrationv1.MatchCondition{{Name: "owner.example.com/theirs", Expression: "true"}, {Name: circuit.MatchConditionName, Expression: expr}}
	}
	hook := func(fp *admissionregistrationv1.FailurePolicyType, conds []admissionregistrationv1.MatchCondition) circuit.Webhook {
		return circuit.Webhook{Name: "w", FailurePolicy: fp, MatchConditions: conds}
	}
	heldIgnore := &circuit.Held{Action: v1alpha1.OpenActionIgnore, OpenedAt: at, UID: "cfg"}
	heldBypass := &circuit.Held{Action: v1alpha1.OpenActionBypass, OpenedAt: at, UID: "cfg"}
	for _, tc := range []struct {
		name       string
		held       *circuit.Held
		uid        string
		state      circuit.State
		wantShape  circuit.Shape
		wantGone   string
		wantFields circuit.Field
	}{
		{name: "Ignore in place", state: circuit.State{Index: 0, Webhook: hook(ignore, nil), Record: ignoreRec}, uid: "cfg"},
		{name: "Bypass in place", state: circuit.State{Index: 0, Webhook: hook(fail, cond("false")), Record: bypassRec}, uid: "cfg"},
		{name: "a trial in place", state: circuit.State{Index: 0, Webhook: hook(ignore, cond(sample)), Record: trialRec}, uid: "cfg"},
		{name: "Ignore put back under the record", state: circuit.State{Index: 0, Webhook: hook(fail, nil), Record: ignoreRec}, uid: "cfg",
			wantShape: circuit.ShapeValueChanged, wantGone: "failurePolicy is Fail again", wantFields: circuit.FieldFailurePolicy},
		{name: "Ignore unset under the record", state: circuit.State{Index: 0, Webhook: hook(nil, nil), Record: ignoreRec}, uid: "cfg",
			wantShape: circuit.ShapeValueChanged, wantGone: "failurePolicy is unset again", wantFields: circuit.FieldFailurePolicy},
		{name: "tripswitch's matchCondition removed", state: circuit.State{Index: 0, Webhook: hook(fail, cond("false")[:1]), Record: bypassRec}, uid: "cfg",
			wantShape: circuit.ShapeValueChanged, wantGone: "matchCondition " + circuit.MatchConditionName + " is gone", wantFields: circuit.FieldMatchCondition},
		{name: "tripswitch's matchCondition rewritten", state: circuit.State{Index: 0, Webhook: hook(fail, cond("true")), Record: bypassRec}, uid: "cfg",
			wantShape: circuit.ShapeValueChanged, wantGone: "matchCondition " + circuit.MatchConditionName + "'s expression was changed", wantFields: circuit.FieldMatchCondition},
		{name: "a trial's Ignore put back", state: circuit.State{Index: 0, Webhook: hook(fail, cond(sample)), Record: trialRec}, uid: "cfg",
			wantShape: circuit.ShapeValueChanged, wantGone: "failurePolicy is Fail again", wantFields: circuit.FieldFailurePolicy},
		{name: "a trial's sample taken away", state: circuit.State{Index: 0, Webhook: hook(ignore, cond("false")), Record: trialRec}, uid: "cfg",
			wantShape: circuit.ShapeValueChanged, wantGone: "matchCondition " + circuit.MatchConditionName + "'s expression was changed", wantFields: circuit.FieldMatchCondition},
		{name: "the record removed, the change left", held: heldIgnore, state: circuit.State{Index: 0, Webhook: hook(ignore, nil)}, uid: "cfg",
			wantShape: circuit.ShapeRecordRemoved, wantGone: "the record annotation is gone, the change left in place"},
		{name: "both written over", held: heldIgnore, state: circuit.State{Index: 0, Webhook: hook(fail, nil)}, uid: "cfg",
			wantShape: circuit.ShapeWrittenOver, wantGone: "failurePolicy is Fail again, the record annotation is gone", wantFields: circuit.FieldFailurePolicy},
		{name: "a Bypass written over", held: heldBypass, state: circuit.State{Index: 0, Webhook: hook(fail, cond("false")[:1])}, uid: "cfg",
			wantShape: circuit.ShapeWrittenOver, wantGone: "matchCondition " + circuit.MatchConditionName + " is gone, the record annotation is gone", wantFields: circuit.FieldMatchCondition},
		{name: "the configuration deleted and created again", held: heldBypass, state: circuit.State{Index: 0, Webhook: hook(fail, nil)}, uid: "new",
			wantShape: circuit.ShapeRecreated, wantGone: "the configuration was deleted and created again (uid new, was cfg), without the record", wantFields: circuit.FieldMatchCondition},
		{name: "the configuration gone is no undo (yet)", held: heldIgnore, state: circuit.State{Index: -1}},
		{name: "the webhook gone from it is no undo", held: heldIgnore, state: circuit.State{Index: -1}, uid: "cfg"},
		{name: "an open tripswitch does not hold is nobody's to undo", state: circuit.State{Index: 0, Webhook: hook(fail, nil)}, uid: "cfg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, ok := circuit.Undone(tc.held, typesUID(tc.uid), tc.state)
			if ok != (tc.wantShape != "") || u.Shape != tc.wantShape || u.Gone != tc.wantGone || u.Fields != tc.wantFields {
				t.Fatalf("Undone = %+v, %v; want shape %q, gone %q, fields %v", u, ok, tc.wantShape, tc.wantGone, tc.wantFields)
			}
			if ok && u.RecordKept != (tc.state.Record != nil) {
				t.Fatalf("RecordKept = %v with record %v", u.RecordKept, tc.state.Record != nil)
			}
			if ok && u.Record == nil {
				t.Fatal("an undo without the record of what was undone")
			}
		})
	}
}

// The table of open actions says which fields each changes: what an owner
// must put back to undo it, and what it costs.
func TestActionsTable(t *testing.T) {
	for _, tc := range []struct {
		action v1alpha1.OpenAction
		trial  bool
		want   circuit.Field
	}{
		{v1alpha1.OpenActionIgnore, false, circuit.FieldFailurePolicy},
		{v1alpha1.OpenActionBypass, false, circuit.FieldMatchCondition},
		{v1alpha1.OpenActionBypass, true, circuit.FieldMatchCondition | circuit.FieldFailurePolicy},
		{"Unknown", false, 0},
	} {
		if got := circuit.Changes(tc.action, tc.trial); got != tc.want {
			t.Errorf("Changes(%s, trial %v) = %v, want %v", tc.action, tc.trial, got, tc.want)
		}
	}
	for _, a := range []v1alpha1.OpenAction{v1alpha1.OpenActionIgnore, v1alpha1.OpenActionBypass} {
		if circuit.Cost(a) != 2 {
			t.Errorf("Cost(%s) = %d, want 2 (open and close)", a, circuit.Cost(a))
		}
	}
}

func typesUID(s string) types.UID { return types.UID(s) }

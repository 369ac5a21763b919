package policy

import (
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/owners"
)

var opened = metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 10, 0, time.UTC))

// kyvernoRewrote: the owner wrote the configuration back from its template
// a second after tripswitch opened it.
var kyvernoRewrote = []owners.Writer{{Manager: "kyverno", Operation: metav1.ManagedFieldsOperationUpdate,
	Time: opened.Add(time.Second), Fields: owners.FailurePolicy | owners.MatchConditions | owners.Other}}

func mirrored(rec *v1alpha1.CircuitRecord) *v1alpha1.CircuitRecord {
	r := *rec
	r.OpenedAt = opened
	return &r
}

// holding is the outage window of an open of rec's that tripswitch made
// on configuration cfgUID, counted before it was sent, and still holds;
// held is that open as Input.Held has it.
func holding(rec *v1alpha1.CircuitRecord, cfgUID types.UID) (*v1alpha1.OutageWindow, *circuit.Held) {
	at := opened
	w := &v1alpha1.OutageWindow{StartedAt: at, Evidence: v1alpha1.EvidenceProbes, ConfigurationUID: cfgUID, Action: rec.Action, OpenedAt: &at,
		Held: true, Opens: 1, Writes: 1, Budget: 2}
	return w, &circuit.Held{Record: mirrored(rec), Action: rec.Action, OpenedAt: at, UID: cfgUID}
}

// An owner that writes the whole configuration back takes the record and
// the change away together; one that deletes and recreates it takes the
// configuration away with them: either is an external change, named, and
// the breaker does not open again for the outage (it would be undone
// again).
func TestDecideOnAnOwnersRewrite(t *testing.T) {
	rewritten := circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Fail)}
	ignoreWindow, ignoreHeld := holding(ignoreRecord("b"), "cfg-uid")
	bypassWindow, bypassHeld := holding(bypassRecord(), "cfg-uid")
	closedWindow := ignoreWindow.DeepCopy()
	closedWindow.Held = false
	for _, tc := range []struct {
		name        string
		in          Input
		wantWrite   Write
		wantReason  string
		wantDisarm  bool
		wantRelease bool
		wantSays    []string
	}{
		{name: "an Ignore written over during the outage disarms without a write",
			in:        Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: down, Window: ignoreWindow, Held: ignoreHeld, Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonExternalChange, wantDisarm: true,
			wantSays: []string{"Kyverno (field manager kyverno, Update) undid tripswitch's Ignore: failurePolicy is Fail again, the record annotation is gone"}},
		{name: "a Bypass written over the same way",
			in:        Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionBypass, State: rewritten, Health: down, Window: bypassWindow, Held: bypassHeld, Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonExternalChange, wantDisarm: true,
			wantSays: []string{"undid tripswitch's Bypass: matchCondition " + circuit.MatchConditionName + " is gone"}},
		{name: "after recovery it only says so",
			in:        Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: up, Window: ignoreWindow, Held: ignoreHeld, Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonExternalChange},
		{name: "ForceOpen does not fight the owner either",
			in:        Input{Mode: v1alpha1.ModeForceOpen, State: rewritten, Health: up, Window: ignoreWindow, Held: ignoreHeld, Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonExternalChange, wantDisarm: true},
		{name: "a breaker being deleted has nothing left to restore",
			in:        Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: down, Deleting: true, Window: ignoreWindow, Held: ignoreHeld, Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonExternalChange, wantDisarm: true, wantRelease: true},
		{name: "a writer managedFields do not date is named as the likeliest",
			in: Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: down, Window: bypassWindow, Held: bypassHeld,
				Writers: []owners.Writer{{Manager: "kyverno", Operation: metav1.ManagedFieldsOperationUpdate, Time: opened.Add(-time.Hour), Fields: owners.Other}}},
			wantWrite: WriteNone, wantReason: ReasonExternalChange, wantDisarm: true, wantSays: []string{"probably Kyverno (field manager kyverno, Update)"}},
		{name: "a configuration deleted and created again while the open was held is an undo",
			in:        Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: down, ConfigUID: "recreated-uid", Window: ignoreWindow, Held: ignoreHeld, Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonExternalChange, wantDisarm: true,
			wantSays: []string{"undid tripswitch's Ignore: the configuration was deleted and created again (uid recreated-uid, was cfg-uid)"}},
		{name: "a circuit tripswitch closed in this outage does not open again in it: one open an outage",
			in:        Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: down, Window: closedWindow, Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonWriteBudgetExhausted, wantDisarm: true, wantSays: []string{"an open is made once an outage", "Kyverno (field manager kyverno, Update)"}},
		{name: "an operator's edit of the spec is a new instruction: its writes are counted afresh",
			in:        Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: down, Window: closedWindow, Generation: 2, Writers: kyvernoRewrote},
			wantWrite: WriteOpen, wantReason: ReasonWebhookUnhealthy},
		{name: "without a circuit tripswitch opened, a failing webhook opens",
			in:        Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: down, Writers: kyvernoRewrote},
			wantWrite: WriteOpen, wantReason: ReasonWebhookUnhealthy},
		{name: "a record removed with the change left in place is still RecordRemoved",
			in:        Input{Mode: v1alpha1.ModeAuto, State: adminIgnore, Health: down, Window: ignoreWindow, Held: ignoreHeld, Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonRecordRemoved, wantDisarm: true},
		{name: "a change altered under the record names its writer",
			in:        Input{Mode: v1alpha1.ModeAuto, State: circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Fail), Record: mirrored(ignoreRecord("b"))}, Health: down, Writers: kyvernoRewrote},
			wantWrite: WriteDrop, wantReason: ReasonExternalChange, wantDisarm: true,
			wantSays: []string{"Kyverno (field manager kyverno, Update) undid tripswitch's Ignore: failurePolicy is Fail again"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.BreakerUID, tc.in.TargetFound = uid, true
			if tc.in.ConfigUID == "" {
				tc.in.ConfigUID = "cfg-uid"
			}
			if tc.in.Action == "" {
				tc.in.Action = v1alpha1.OpenActionIgnore
			}
			d := Decide(tc.in)
			if d.Write != tc.wantWrite || d.Reason != tc.wantReason || (d.Disarm != "") != tc.wantDisarm || d.ReleaseFinalizer != tc.wantRelease {
				t.Fatalf("got %s/%s disarm %q release %v; want %s/%s disarm %v release %v: %s",
					d.Write, d.Reason, d.Disarm, d.ReleaseFinalizer, tc.wantWrite, tc.wantReason, tc.wantDisarm, tc.wantRelease, d.Message)
			}
			for _, want := range tc.wantSays {
				if !strings.Contains(d.Message, want) || (tc.wantDisarm && !strings.Contains(d.Disarm, want)) {
					t.Errorf("message %q / disarm %q lack %q", d.Message, d.Disarm, want)
				}
			}
		})
	}
}

// The open tripswitch holds is its outage window's, with the record the
// status mirrors of it on the same configuration; a window whose open was
// given back holds none; a record with no window in the status implies one.
func TestNewInputHeldOpen(t *testing.T) {
	rec := *mirrored(ignoreRecord("b"))
	window, _ := holding(&rec, "cfg-uid")
	b := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: uid, Generation: 3},
		Spec:   v1alpha1.WebhookCircuitBreakerSpec{Target: v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "cfg", WebhookName: "w.tripswitch.test"}},
		Status: v1alpha1.WebhookCircuitBreakerStatus{TargetUID: "cfg-uid", Record: &rec, Outage: window}}
	cfg := func(uid types.UID) *circuit.Configuration {
		return &circuit.Configuration{Object: &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{UID: uid}}}
	}
	spec := b.Spec.Resolve()
	in := NewInput(b, spec, Observed{Config: cfg("cfg-uid")})
	if h := in.Held; h == nil || h.Record == nil || !h.Record.OpenedAt.Equal(&opened) || h.UID != "cfg-uid" || in.ConfigUID != "cfg-uid" {
		t.Fatalf("held %+v (config %s); want the window's open with the status's record", in.Held, in.ConfigUID)
	}
	if in := NewInput(b, spec, Observed{Config: cfg("recreated")}); in.Held == nil || in.Held.UID != "cfg-uid" || in.ConfigUID != "recreated" {
		t.Fatalf("held %+v on a recreated configuration; want the open of the one it was written to", in.Held)
	}
	given := b.DeepCopy()
	given.Status.Outage.Held = false
	if in := NewInput(given, spec, Observed{Config: cfg("cfg-uid")}); in.Held != nil {
		t.Fatalf("held %+v after the open was given back", in.Held)
	}
	none := b.DeepCopy()
	none.Status.Outage = nil
	in = NewInput(none, spec, Observed{Config: cfg("cfg-uid"), State: circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Ignore), Record: &rec}})
	if w := in.Window; w == nil || w.Opens != 1 || !w.Held || w.Generation != 3 || in.Held == nil {
		t.Fatalf("window %+v, held %+v; want one inferred from the record", in.Window, in.Held)
	}
}

// Owned follows the configuration's writers and never touches Ready; the
// window a rewrite took away closes as closed externally, as any whose
// record was gone when tripswitch looked.
func TestStatusSaysWhoOwnsTheTarget(t *testing.T) {
	b := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: uid, Generation: 1},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{Target: v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "cfg", WebhookName: "w.tripswitch.test"},
			OpenAction: v1alpha1.OpenActionBypass},
		Status: v1alpha1.WebhookCircuitBreakerStatus{TargetUID: "cfg-uid", Record: mirrored(bypassRecord())}}
	b.Status.OpenWindowFor(b.Status.Record)
	obj := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{UID: "cfg-uid", ManagedFields: []metav1.ManagedFieldsEntry{{
		Manager: "kyverno", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: opened.Add(time.Second)}, FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(`{"f:webhooks":{"k:{\"name\":\"w.tripswitch.test\"}":{".":{},"f:failurePolicy":{},"f:name":{},"f:rules":{}}}}`),
	}}}}
	rewritten := circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Fail)}
	window, held := holding(bypassRecord(), "cfg-uid")
	in := Input{TargetFound: true, Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionBypass, BreakerUID: uid, State: rewritten, Health: down,
		ConfigUID: "cfg-uid", Window: window, Held: held, Writers: owners.Writers(obj, "w.tripswitch.test")}
	d := Decide(in)
	s := NextStatus(b, Outcome{Spec: b.Spec.Resolve(), Input: in, Decision: d, Observed: Observed{Config: &circuit.Configuration{Object: obj}, State: rewritten}, After: rewritten, Now: opened})
	owned := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionOwned)
	if owned == nil || owned.Status != metav1.ConditionTrue || owned.Reason != owners.ReasonUndoesOpen || !strings.Contains(owned.Message, "--forceFailurePolicyIgnore") {
		t.Fatalf("Owned = %+v", owned)
	}
	if s.State != v1alpha1.StateDisarmed || s.Record != nil || s.DisarmedReason == "" {
		t.Fatalf("state %s, record %v, disarmed %q", s.State, s.Record, s.DisarmedReason)
	}
	if h := s.History; len(h) != 1 || h[0].ClosedAt == nil || h[0].CloseReason != ReasonClosedExternally {
		t.Fatalf("history %+v, want the window closed as %s", h, ReasonClosedExternally)
	}
	events := ReportEvents(b, d, s)
	var names []string
	for _, e := range events {
		names = append(names, e.Reason)
	}
	if !strings.Contains(strings.Join(names, ","), owners.ReasonUndoesOpen) {
		t.Fatalf("events %v, want one %s", names, owners.ReasonUndoesOpen)
	}
	// Said once: a status that already says it brings no second event.
	b.Status = s
	for _, e := range ReportEvents(b, Decision{Reason: ReasonDisarmed}, s) {
		if e.Reason == owners.ReasonUndoesOpen {
			t.Fatal("Owned's warning repeated")
		}
	}
}

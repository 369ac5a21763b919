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

// An owner that writes the whole configuration back takes the record and
// the change away together: that is an external change, named, and the
// breaker does not open again for the outage (it would be undone again).
func TestDecideOnAnOwnersRewrite(t *testing.T) {
	rewritten := circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Fail)}
	for _, tc := range []struct {
		name        string
		in          Input
		wantWrite   Write
		wantReason  string
		wantDisarm  bool
		wantRelease bool
		wantSays    []string
		// stranger: this process never knew the circuit open (it started
		// after the record was gone); every other row's process did.
		stranger bool
	}{
		{name: "an Ignore written over during the outage disarms without a write",
			in:        Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: down, Mirror: mirrored(ignoreRecord("b")), Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonExternalChange, wantDisarm: true,
			wantSays: []string{"Kyverno (field manager kyverno, Update) undid tripswitch's Ignore: failurePolicy is Fail again, the record annotation is gone"}},
		{name: "a Bypass written over the same way",
			in:        Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionBypass, State: rewritten, Health: down, Mirror: mirrored(bypassRecord()), Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonExternalChange, wantDisarm: true,
			wantSays: []string{"undid tripswitch's Bypass: matchCondition " + circuit.MatchConditionName + " is gone"}},
		{name: "after recovery it only says so",
			in:        Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: up, Mirror: mirrored(ignoreRecord("b")), Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonExternalChange},
		{name: "ForceOpen does not fight the owner either",
			in:        Input{Mode: v1alpha1.ModeForceOpen, State: rewritten, Health: up, Mirror: mirrored(ignoreRecord("b")), Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonExternalChange, wantDisarm: true},
		{name: "a breaker being deleted has nothing left to restore",
			in:        Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: down, Deleting: true, Mirror: mirrored(ignoreRecord("b")), Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonExternalChange, wantDisarm: true, wantRelease: true},
		{name: "a writer managedFields do not date is named as the likeliest",
			in: Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: down, Mirror: mirrored(bypassRecord()),
				Writers: []owners.Writer{{Manager: "kyverno", Operation: metav1.ManagedFieldsOperationUpdate, Time: opened.Add(-time.Hour), Fields: owners.Other}}},
			wantWrite: WriteNone, wantReason: ReasonExternalChange, wantDisarm: true, wantSays: []string{"probably Kyverno (field manager kyverno, Update)"}},
		{name: "a circuit this process closed is not an owner's doing: it opens again if it must",
			in:        Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: down, Mirror: mirrored(ignoreRecord("b")), ClosedMine: true, Writers: kyvernoRewrote},
			wantWrite: WriteOpen, wantReason: ReasonWebhookUnhealthy},
		{name: "a process that never knew the circuit open may be looking at its predecessor's close cut short by a crash: it opens again if it must",
			in:        Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionBypass, State: rewritten, Health: down, Mirror: mirrored(bypassRecord()), Writers: kyvernoRewrote},
			stranger:  true,
			wantWrite: WriteOpen, wantReason: ReasonWebhookUnhealthy},
		{name: "without a circuit tripswitch opened, a failing webhook opens",
			in:        Input{Mode: v1alpha1.ModeAuto, State: rewritten, Health: down, Writers: kyvernoRewrote},
			wantWrite: WriteOpen, wantReason: ReasonWebhookUnhealthy},
		{name: "a record removed with the change left in place is still RecordRemoved",
			in:        Input{Mode: v1alpha1.ModeAuto, State: adminIgnore, Health: down, Mirror: mirrored(ignoreRecord("b")), Writers: kyvernoRewrote},
			wantWrite: WriteNone, wantReason: ReasonRecordRemoved, wantDisarm: true},
		{name: "a change altered under the record names its writer",
			in:        Input{Mode: v1alpha1.ModeAuto, State: circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Fail), Record: mirrored(ignoreRecord("b"))}, Health: down, Writers: kyvernoRewrote},
			wantWrite: WriteDrop, wantReason: ReasonExternalChange, wantDisarm: true,
			wantSays: []string{"Kyverno (field manager kyverno, Update) undid tripswitch's Ignore: failurePolicy is Fail again"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.BreakerUID, tc.in.TargetFound = uid, true
			tc.in.KnewOpen = tc.in.Mirror != nil && !tc.stranger
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

// The record this process opened stands in for the status until the
// status shows it, on the same configuration only.
func TestNewInputRemembersItsOwnOpen(t *testing.T) {
	b := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: uid},
		Spec:   v1alpha1.WebhookCircuitBreakerSpec{Target: v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "cfg", WebhookName: "w.tripswitch.test"}},
		Status: v1alpha1.WebhookCircuitBreakerStatus{TargetUID: "cfg-uid"}}
	cfg := func(uid types.UID) *circuit.Configuration {
		return &circuit.Configuration{Object: &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{UID: uid}}}
	}
	spec := b.Spec.Resolve()
	rec := *mirrored(ignoreRecord("b"))
	in := NewInput(b, spec, Observed{Config: cfg("cfg-uid"), Opened: &Opened{Record: rec, UID: "cfg-uid"}})
	if in.Mirror == nil || !in.Mirror.OpenedAt.Equal(&opened) || in.ClosedMine || in.KnewOpen {
		t.Fatalf("mirror %+v, closed mine %v, knew open %v; want the open remembered, not known first-hand", in.Mirror, in.ClosedMine, in.KnewOpen)
	}
	if in := NewInput(b, spec, Observed{Config: cfg("cfg-uid"), Opened: &Opened{Record: rec, UID: "cfg-uid"}, KnewOpen: opened}); !in.KnewOpen {
		t.Fatal("the window this process knew open is not known")
	}
	if in := NewInput(b, spec, Observed{Config: cfg("cfg-uid"), Opened: &Opened{Record: rec, UID: "cfg-uid"}, KnewOpen: metav1.NewTime(opened.Add(-time.Hour))}); in.KnewOpen {
		t.Fatal("an earlier window this process knew stands for this one")
	}
	if in := NewInput(b, spec, Observed{Config: cfg("recreated"), Opened: &Opened{Record: rec, UID: "cfg-uid"}}); in.Mirror != nil {
		t.Fatalf("an open of the configuration before it was recreated stands in: %+v", in.Mirror)
	}
	in = NewInput(b, spec, Observed{Config: cfg("cfg-uid"), Opened: &Opened{Record: rec, UID: "cfg-uid"}, Closed: &ClosedNote{OpenedAt: opened}})
	if !in.ClosedMine {
		t.Fatal("a circuit this process closed is not known as closed by it")
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
	in := Input{TargetFound: true, Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionBypass, BreakerUID: uid, State: rewritten, Health: down,
		Mirror: b.Status.Record, KnewOpen: true, Writers: owners.Writers(obj, "w.tripswitch.test")}
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

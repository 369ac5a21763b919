package policy

import (
	"errors"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/budget"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/halfopen"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

const uid = "breaker-uid"

var (
	down    = Health{Verdict: probe.VerdictUnhealthy, Failures: 3}
	up      = Health{Verdict: probe.VerdictHealthy, Successes: 5}
	pending = Health{Verdict: probe.VerdictPending, Failures: 2}
	unknown = Health{Verdict: probe.VerdictPending} // Unknown probes reset both counts
)

func webhookWith(policy admissionregistrationv1.FailurePolicyType, conds ...string) circuit.Webhook {
	w := circuit.Webhook{Name: "w.tripswitch.test", FailurePolicy: ptr.To(policy)}
	for _, c := range conds {
		w.MatchConditions = append(w.MatchConditions, admissionregistrationv1.MatchCondition{Name: c, Expression: "false"})
	}
	return w
}

func ignoreRecord(owner string) *v1alpha1.CircuitRecord {
	return &v1alpha1.CircuitRecord{Webhook: "w.tripswitch.test", BreakerUID: "breaker-uid", Breaker: owner, Action: v1alpha1.OpenActionIgnore, SetFailurePolicy: "Ignore", OriginalFailurePolicy: ptr.To("Fail")}
}

func bypassRecord() *v1alpha1.CircuitRecord {
	return &v1alpha1.CircuitRecord{Webhook: "w.tripswitch.test", BreakerUID: uid, Action: v1alpha1.OpenActionBypass, MatchCondition: circuit.MatchConditionName}
}

// closedFail is a healthy, untouched Fail webhook; openIgnore is one tripswitch opened with Ignore.
var (
	closedFail   = circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Fail)}
	openIgnore   = circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Ignore), Record: ignoreRecord("b")}
	openBypass   = circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Fail, circuit.MatchConditionName), Record: bypassRecord()}
	adminIgnore  = circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Ignore)}
	adminClosed  = circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Fail), Record: ignoreRecord("b")}
	corrupt      = circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Ignore), RecordErr: errors.New("corrupt circuit record: not JSON")}
	othersRecord = circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Ignore), Record: &v1alpha1.CircuitRecord{Webhook: "w.tripswitch.test", BreakerUID: "someone-else", Action: v1alpha1.OpenActionIgnore, SetFailurePolicy: "Ignore"}}
)

func TestDecide(t *testing.T) {
	cases := []struct {
		name        string
		in          Input
		wantWrite   Write
		wantReason  string
		wantDisarm  bool
		wantRearm   bool
		wantRelease bool
	}{
		{name: "a healthy closed webhook is left alone", in: Input{Mode: v1alpha1.ModeAuto, State: closedFail, Health: up}, wantReason: ReasonNoChange},
		{name: "a failing webhook opens after the threshold", in: Input{Mode: v1alpha1.ModeAuto, State: closedFail, Health: down}, wantWrite: WriteOpen, wantReason: ReasonWebhookUnhealthy},
		{name: "a webhook below the failure threshold stays closed", in: Input{Mode: v1alpha1.ModeAuto, State: closedFail, Health: pending}, wantReason: ReasonAwaitingProbes},
		{name: "the API server signal opens before the probes do", in: Input{Mode: v1alpha1.ModeAuto, State: closedFail, Health: pending, APIServerFailing: true}, wantWrite: WriteOpen, wantReason: ReasonAPIServerFailing},
		{name: "the API server signal opens even with healthy probes", in: Input{Mode: v1alpha1.ModeAuto, State: closedFail, Health: up, APIServerFailing: true}, wantWrite: WriteOpen, wantReason: ReasonAPIServerFailing},
		{name: "healthy probes do not close while the API server still sees failures", in: Input{Mode: v1alpha1.ModeAuto, State: openIgnore, Health: up, APIServerFailing: true}, wantReason: ReasonStillOpen},
		{name: "the API server signal alone never closes", in: Input{Mode: v1alpha1.ModeAuto, State: openIgnore, Health: pending}, wantReason: ReasonStillOpen},
		{name: "the API server signal cannot open a webhook that cannot be probed", in: Input{Mode: v1alpha1.ModeAuto, State: closedFail, ProbeUnknown: true, APIServerFailing: true}, wantReason: ReasonProbeUnsupported},
		{name: "a disarm holds against the API server signal", in: Input{Mode: v1alpha1.ModeAuto, State: closedFail, Health: pending, APIServerFailing: true, Disarmed: true}, wantReason: ReasonDisarmed},
		{name: "unknown health never opens", in: Input{Mode: v1alpha1.ModeAuto, State: closedFail, Health: unknown}, wantReason: ReasonAwaitingProbes},
		{name: "unknown health never closes an open circuit", in: Input{Mode: v1alpha1.ModeAuto, State: openIgnore, Health: unknown}, wantReason: ReasonStillOpen},
		{name: "an open circuit stays open while the webhook is down", in: Input{Mode: v1alpha1.ModeAuto, State: openIgnore, Health: down}, wantReason: ReasonStillOpen},
		{name: "an open circuit closes after the success threshold", in: Input{Mode: v1alpha1.ModeAuto, State: openIgnore, Health: up}, wantWrite: WriteClose, wantReason: ReasonWebhookRecovered},
		{name: "a bypassed webhook closes after the success threshold", in: Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionBypass, State: openBypass, Health: up}, wantWrite: WriteClose, wantReason: ReasonWebhookRecovered},
		{name: "an administrator's Ignore is not taken over", in: Input{Mode: v1alpha1.ModeAuto, State: adminIgnore, Health: down}, wantReason: ReasonAlreadyFailOpen},
		{name: "an administrator's Ignore does not stop a Bypass", in: Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionBypass, State: adminIgnore, Health: down}, wantWrite: WriteOpen, wantReason: ReasonWebhookUnhealthy},
		{name: "an administrator's Fail while open drops the record and disarms", in: Input{Mode: v1alpha1.ModeAuto, State: adminClosed, Health: down}, wantWrite: WriteDrop, wantReason: ReasonExternalChange, wantDisarm: true},
		{name: "an administrator's Fail after recovery drops the record without disarming", in: Input{Mode: v1alpha1.ModeAuto, State: adminClosed, Health: up}, wantWrite: WriteDrop, wantReason: ReasonExternalChange},
		{name: "a disarmed breaker does not open", in: Input{Mode: v1alpha1.ModeAuto, State: closedFail, Health: down, Disarmed: true}, wantReason: ReasonDisarmed},
		{name: "a healthy webhook re-arms a disarmed breaker", in: Input{Mode: v1alpha1.ModeAuto, State: closedFail, Health: up, Disarmed: true}, wantReason: ReasonNoChange, wantRearm: true},
		{name: "a removed record with the value left in place is not restored", in: Input{Mode: v1alpha1.ModeAuto, State: adminIgnore, ConfigUID: "cfg-uid", Held: &circuit.Held{Action: v1alpha1.OpenActionIgnore, UID: "cfg-uid"}, Health: up}, wantReason: ReasonRecordRemoved},
		{name: "a corrupt record is never acted on", in: Input{Mode: v1alpha1.ModeAuto, State: corrupt, Health: up}, wantReason: ReasonCorruptRecord},
		{name: "another breaker's record is never acted on", in: Input{Mode: v1alpha1.ModeAuto, State: othersRecord, Health: up}, wantReason: ReasonRecordOfOther},
		{name: "a missing target is reported", in: Input{Mode: v1alpha1.ModeAuto, State: circuit.State{Index: -1}, Health: down}, wantReason: ReasonTargetNotFound},
		{name: "ForceOpen opens a healthy webhook", in: Input{Mode: v1alpha1.ModeForceOpen, State: closedFail, Health: up}, wantWrite: WriteOpen, wantReason: ReasonForceOpen},
		{name: "ForceOpen keeps an open circuit open when healthy", in: Input{Mode: v1alpha1.ModeForceOpen, State: openIgnore, Health: up}, wantReason: ReasonStillOpen},
		{name: "ForceClosed closes during an outage and disarms", in: Input{Mode: v1alpha1.ModeForceClosed, State: openIgnore, Health: down}, wantWrite: WriteClose, wantReason: ReasonForceClosed, wantDisarm: true},
		{name: "ForceClosed on a healthy webhook re-arms", in: Input{Mode: v1alpha1.ModeForceClosed, State: closedFail, Health: up, Disarmed: true}, wantReason: ReasonForceClosed, wantRearm: true},
		{name: "Observe never writes, even when down", in: Input{Mode: v1alpha1.ModeObserve, State: closedFail, Health: down}, wantReason: ReasonObserving},
		{name: "Observe releases a circuit it holds, so no mode leaves a webhook open forever", in: Input{Mode: v1alpha1.ModeObserve, State: openIgnore, Health: down}, wantWrite: WriteClose, wantReason: ReasonObserveReleases},
		{name: "Observe with nothing open writes nothing", in: Input{Mode: v1alpha1.ModeObserve, State: closedFail, Health: down}, wantReason: ReasonObserving},
		{name: "Observe reports an external change without dropping", in: Input{Mode: v1alpha1.ModeObserve, State: adminClosed, Health: up}, wantReason: ReasonExternalChange},
		{name: "a changed action closes first", in: Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionBypass, State: openIgnore, Health: down}, wantWrite: WriteClose, wantReason: ReasonOpenActionChanged},
		{name: "deleting an open breaker restores", in: Input{Mode: v1alpha1.ModeAuto, State: openIgnore, Health: down, Deleting: true}, wantWrite: WriteClose, wantReason: ReasonBreakerDeleted},
		{name: "deleting a closed breaker releases the finalizer", in: Input{Mode: v1alpha1.ModeAuto, State: closedFail, Health: down, Deleting: true}, wantReason: ReasonFinalizerReleased, wantRelease: true},
		{name: "deleting a breaker whose target is gone releases the finalizer", in: Input{Mode: v1alpha1.ModeAuto, State: circuit.State{Index: -1}, Deleting: true}, wantReason: ReasonTargetGone, wantRelease: true},
		{name: "a webhook that cannot be probed blocks the breaker and writes nothing", in: Input{Mode: v1alpha1.ModeAuto, State: closedFail, Health: unknown, ProbeUnknown: true}, wantReason: ReasonProbeUnsupported},
		{name: "an open circuit whose webhook cannot be probed stays open", in: Input{Mode: v1alpha1.ModeAuto, State: openIgnore, Health: unknown, ProbeUnknown: true}, wantReason: ReasonProbeUnsupported},
		{name: "ForceClosed closes even when the webhook cannot be probed", in: Input{Mode: v1alpha1.ModeForceClosed, State: openIgnore, Health: unknown, ProbeUnknown: true}, wantWrite: WriteClose, wantReason: ReasonForceClosed},
		{name: "ForceOpen respects a disarm: never fight a human", in: Input{Mode: v1alpha1.ModeForceOpen, State: closedFail, Health: down, Disarmed: true}, wantReason: ReasonDisarmed},
		{name: "an external change under ForceOpen disarms even with a healthy webhook", in: Input{Mode: v1alpha1.ModeForceOpen, State: adminClosed, Health: up}, wantWrite: WriteDrop, wantReason: ReasonExternalChange, wantDisarm: true},
		{name: "deleting an Observe breaker still restores what it opened", in: Input{Mode: v1alpha1.ModeObserve, State: openIgnore, Deleting: true}, wantWrite: WriteClose, wantReason: ReasonBreakerDeleted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.BreakerUID = uid
			in.TargetFound = in.State.Index >= 0
			if in.Action == "" {
				in.Action = v1alpha1.OpenActionIgnore
			}
			d := Decide(in)
			if d.Blocked != (tc.wantReason == ReasonProbeUnsupported || tc.wantReason == ReasonTargetNotFound || tc.wantReason == ReasonCorruptRecord || tc.wantReason == ReasonRecordOfOther) {
				t.Errorf("Blocked = %v for reason %s", d.Blocked, d.Reason)
			}
			if d.Write == WriteOpen && d.Action != in.Action {
				t.Errorf("opens with action %q, want %q", d.Action, in.Action)
			}
			if d.Write != tc.wantWrite || d.Reason != tc.wantReason || (d.Disarm != "") != tc.wantDisarm || d.Rearm != tc.wantRearm || d.ReleaseFinalizer != tc.wantRelease {
				t.Errorf("Decide = %+v\nwant write %q reason %s disarm %v rearm %v release %v", d, tc.wantWrite, tc.wantReason, tc.wantDisarm, tc.wantRearm, tc.wantRelease)
			}
		})
	}
}

// verdictOf is the monitor's verdict for thresholds 3 and 5.
func verdictOf(failures, successes int32) probe.Verdict {
	switch {
	case failures >= 3:
		return probe.VerdictUnhealthy
	case successes >= 5:
		return probe.VerdictHealthy
	}
	return probe.VerdictPending
}

// FuzzDecide checks the safety rules over arbitrary inputs.
func FuzzDecide(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint8(0), int32(3), int32(0), false, false, false, false, uint8(0))
	f.Add(uint8(1), uint8(1), uint8(2), int32(0), int32(9), true, true, false, false, uint8(1))
	f.Add(uint8(0), uint8(0), uint8(1), int32(0), int32(9), false, false, false, true, uint8(2))
	f.Fuzz(func(t *testing.T, mode, action, state uint8, failures, successes int32, deleting, disarmed, probeUnknown, apiFailing bool, window uint8) {
		modes := []v1alpha1.Mode{v1alpha1.ModeAuto, v1alpha1.ModeForceOpen, v1alpha1.ModeForceClosed, v1alpha1.ModeObserve}
		actions := []v1alpha1.OpenAction{v1alpha1.OpenActionIgnore, v1alpha1.OpenActionBypass}
		states := []circuit.State{closedFail, openIgnore, openBypass, adminIgnore, adminClosed, corrupt, othersRecord, {Index: -1}}
		in := Input{
			Mode: modes[int(mode)%len(modes)], Action: actions[int(action)%len(actions)], BreakerUID: uid,
			Deleting: deleting, State: states[int(state)%len(states)], Disarmed: disarmed, ProbeUnknown: probeUnknown,
			APIServerFailing: apiFailing, APIServerReason: "scripted",
			Health: Health{Verdict: verdictOf(failures, successes), Failures: failures, Successes: successes},
		}
		in.TargetFound = in.State.Index >= 0
		in.ConfigUID = "cfg-uid"
		// The outage window: none; an open made and held (on this
		// configuration or one since recreated); an open made and given
		// back; from an earlier generation; begun on the API server's calls.
		at := metav1.Unix(1_800_000_000, 0)
		switch window % 6 {
		case 1, 2:
			in.Window = &v1alpha1.OutageWindow{Evidence: v1alpha1.EvidenceProbes, Opens: 1, Writes: 1, Held: true, Action: in.Action, OpenedAt: &at, ConfigurationUID: "cfg-uid"}
			if window%6 == 2 {
				in.Window.ConfigurationUID = "before-recreate"
			}
			in.Held = &circuit.Held{Action: in.Action, OpenedAt: at, UID: in.Window.ConfigurationUID}
		case 3:
			in.Window = &v1alpha1.OutageWindow{Evidence: v1alpha1.EvidenceProbes, Opens: 1, Writes: 2}
		case 4:
			in.Window = &v1alpha1.OutageWindow{Evidence: v1alpha1.EvidenceProbes, Opens: 1, Writes: 2, Generation: 7}
		case 5:
			in.Window = &v1alpha1.OutageWindow{Evidence: v1alpha1.EvidenceAPIServer, Opens: 1, Writes: 2}
			in.SignalOn = true
		}
		d := Decide(in)
		owned := in.State.Record != nil && in.State.Record.BreakerUID == uid && in.State.RecordErr == nil
		if d.Write == WriteOpen && budget.Allow(in.Window, in.Generation, budget.Open) != nil {
			t.Fatalf("opened past the outage window's budget: %+v", in)
		}
		if d.Rearm && !in.Recovered() {
			t.Fatalf("re-armed before the evidence that began the outage said the webhook is healthy: %+v", in)
		}
		if d.Write == WriteOpen && in.Held != nil && in.State.Record == nil {
			t.Fatalf("opened again over an open it holds and someone undid: %+v", in)
		}
		switch {
		case d.Write != WriteNone && (!in.TargetFound || in.State.RecordErr != nil || (in.State.Record != nil && !owned)):
			t.Fatalf("wrote %s to a target it must not touch: %+v", d.Write, in)
		case d.Write == WriteOpen && (in.Disarmed || in.Deleting || in.Mode == v1alpha1.ModeObserve || in.Mode == v1alpha1.ModeForceClosed):
			t.Fatalf("opened while it must not: %+v", in)
		case d.Write == WriteOpen && in.Mode == v1alpha1.ModeAuto && in.ProbeUnknown:
			t.Fatalf("Auto opened a webhook it cannot probe: %+v", in)
		case d.Write == WriteOpen && in.Mode == v1alpha1.ModeAuto && in.Health.Verdict != probe.VerdictUnhealthy && !in.APIServerFailing:
			t.Fatalf("Auto opened with neither signal tripped: %+v", in)
		case d.Write == WriteClose && !in.State.Intact():
			t.Fatalf("closed over a value it does not own: %+v", in)
		case d.Write == WriteClose && in.Mode == v1alpha1.ModeAuto && !in.Deleting && in.State.Record.Action == in.Action && (in.Health.Verdict != probe.VerdictHealthy || in.APIServerFailing):
			t.Fatalf("Auto closed without healthy probes and a clear API server signal: %+v", in)
		case (d.Write == WriteOpen || d.Write == WriteDrop) && in.Mode == v1alpha1.ModeObserve:
			t.Fatalf("Observe wrote %s; it may only release what it holds", d.Write)
		case d.Write == WriteOpen && d.Action != in.Action:
			t.Fatalf("decided to open with %q, the spec says %q", d.Action, in.Action)
		case d.ReleaseFinalizer && owned && in.State.Intact():
			t.Fatalf("released the finalizer with the circuit still open: %+v", in)
		}
	})
}

// TestDecideTrial: an open Bypass circuit that closes through a trial
// writes what the trial's verdict says and closes on nothing else; an
// administrator's edit during a trial is an external change like any other;
// ForceOpen ends a running trial.
func TestDecideTrial(t *testing.T) {
	expr, _, err := circuit.SampleExpression(6)
	if err != nil {
		t.Fatal(err)
	}
	trialRec := bypassRecord()
	trialRec.Trial = &v1alpha1.TrialRecord{Expression: expr, SamplePercent: "6.25%", SetFailurePolicy: "Ignore"}
	inTrial := circuit.State{Index: 0, Webhook: webhookWith(admissionregistrationv1.Ignore, circuit.MatchConditionName), Record: trialRec}
	inTrial.Webhook.MatchConditions[0].Expression = expr
	edited := inTrial
	edited.Webhook = webhookWith(admissionregistrationv1.Fail, circuit.MatchConditionName)
	edited.Webhook.MatchConditions[0].Expression = expr
	verdict := func(s halfopen.Step) *halfopen.Verdict {
		return &halfopen.Verdict{Step: s, Reason: "Trial" + string(s)}
	}
	for _, tc := range []struct {
		name       string
		in         Input
		wantWrite  Write
		wantReason string
	}{
		{"healthy, trial due", Input{State: openBypass, Health: up, Trial: verdict(halfopen.Start)}, WriteTrial, "TrialStart"},
		{"healthy, waiting: never closes on the probes", Input{State: openBypass, Health: up, Trial: verdict(halfopen.Wait)}, WriteNone, "TrialWait"},
		{"trial running", Input{State: inTrial, Health: up, Trial: verdict(halfopen.Run)}, WriteNone, "TrialRun"},
		{"trial failed", Input{State: inTrial, Health: down, Trial: verdict(halfopen.Fail)}, WriteEndTrial, "TrialFail"},
		{"trial passed", Input{State: inTrial, Health: up, Trial: verdict(halfopen.Pass)}, WriteClose, "TrialPass"},
		{"no traffic", Input{State: inTrial, Health: up, Trial: verdict(halfopen.NoTraffic)}, WriteClose, "TrialNoTraffic"},
		{"an administrator set Fail during the trial", Input{State: edited, Health: up, Trial: verdict(halfopen.Run)}, WriteDrop, ReasonExternalChange},
		{"ForceOpen ends the trial", Input{Mode: v1alpha1.ModeForceOpen, State: inTrial, Health: up}, WriteEndTrial, ReasonForceOpen},
		{"deleting closes from the trial", Input{Deleting: true, State: inTrial, Health: up, Trial: verdict(halfopen.Run)}, WriteClose, ReasonBreakerDeleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if in.Mode == "" {
				in.Mode = v1alpha1.ModeAuto
			}
			in.Action, in.BreakerUID, in.TargetFound = v1alpha1.OpenActionBypass, uid, true
			d := Decide(in)
			if d.Write != tc.wantWrite || d.Reason != tc.wantReason {
				t.Errorf("Decide = %s/%s (%s), want %s/%s", d.Write, d.Reason, d.Message, tc.wantWrite, tc.wantReason)
			}
		})
	}
}

// Someone set the webhook's failurePolicy while its Bypass circuit was
// open (no undo: Bypass changes the matchCondition). A trial would set
// Ignore over their value and give back the record's original after: it
// does not run, and the circuit closes on healthy probes, leaving their
// failurePolicy. Before this, every trial's patch was refused (its test of
// the original failurePolicy failed) and the circuit stayed open for good
// (found by test/adversary).
func TestNoTrialOverSomeonesFailurePolicy(t *testing.T) {
	at := metav1.Unix(1_800_000_000, 0)
	rec := bypassRecord()
	rec.OriginalFailurePolicy, rec.OpenedAt = ptr.To("Fail"), at
	ws := v1alpha1.WebhookCircuitBreakerSpec{OpenAction: v1alpha1.OpenActionBypass,
		APIServerSignal: &v1alpha1.APIServerSignalSpec{Enabled: true}, HalfOpen: &v1alpha1.HalfOpenSpec{}}
	spec := ws.Resolve()
	healthy := probe.Observation{Verdict: probe.VerdictHealthy, ConsecutiveSuccesses: 5, HealthySince: at.Time}
	for _, tc := range []struct {
		name      string
		policy    admissionregistrationv1.FailurePolicyType
		wantTrial bool
		wantWrite Write
	}{
		{"failurePolicy as the open found it: a trial", admissionregistrationv1.Fail, true, WriteTrial},
		{"failurePolicy changed to Ignore meanwhile: no trial, the probes close it", admissionregistrationv1.Ignore, false, WriteClose},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := circuit.State{Index: 0, Webhook: webhookWith(tc.policy, circuit.MatchConditionName), Record: rec}
			obs := Observed{State: st, Health: healthy}
			v := TrialVerdict(spec, obs, at.Add(time.Hour))
			if (v != nil) != tc.wantTrial {
				t.Fatalf("trial verdict %+v, want one %v", v, tc.wantTrial)
			}
			in := Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionBypass, BreakerUID: uid, TargetFound: true, State: st, Health: up, Trial: v}
			if d := Decide(in); d.Write != tc.wantWrite {
				t.Fatalf("Decide = %s (%s), want %s", d.Write, d.Message, tc.wantWrite)
			}
		})
	}
}

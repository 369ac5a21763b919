package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/halfopen"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestComputeStatus: what an operator reads at a glance (state, Ready and
// its reason) follows from the decision's fields, whatever its reason string.
func TestComputeStatus(t *testing.T) {
	cfgUID := types.UID("cfg-uid")
	cases := []struct {
		name       string
		in         Input
		d          Decision
		after      circuit.State
		writeErr   error
		disarmed   string // the breaker's status before
		wantState  v1alpha1.CircuitState
		wantReady  metav1.ConditionStatus
		wantReason string
	}{
		{name: "a closed, probed webhook is armed", in: Input{TargetFound: true}, d: Decision{Reason: ReasonNoChange}, after: closedFail,
			wantState: v1alpha1.StateClosed, wantReady: metav1.ConditionTrue, wantReason: ReasonArmed},
		{name: "a circuit tripswitch holds is Open and Ready", in: Input{TargetFound: true}, d: Decision{Write: WriteOpen, Reason: ReasonWebhookUnhealthy}, after: openIgnore,
			wantState: v1alpha1.StateOpen, wantReady: metav1.ConditionTrue, wantReason: ReasonCircuitOpen},
		{name: "a webhook that cannot be probed is Unknown and not Ready", in: Input{TargetFound: true, ProbeUnknown: true, ProbeReason: "caBundle holds no PEM"}, d: Decision{Reason: ReasonProbeUnsupported, Blocked: true, Message: "cannot probe"}, after: closedFail,
			wantState: v1alpha1.StateUnknown, wantReady: metav1.ConditionFalse, wantReason: ReasonProbeUnsupported},
		{name: "an open circuit that cannot be probed is Open but not Ready", in: Input{TargetFound: true, ProbeUnknown: true}, d: Decision{Reason: ReasonProbeUnsupported, Blocked: true}, after: openIgnore,
			wantState: v1alpha1.StateOpen, wantReady: metav1.ConditionFalse, wantReason: ReasonProbeUnsupported},
		{name: "a missing target is Unknown and not Ready", in: Input{}, d: Decision{Reason: ReasonTargetNotFound, Blocked: true}, after: circuit.State{Index: -1},
			wantState: v1alpha1.StateUnknown, wantReady: metav1.ConditionFalse, wantReason: ReasonTargetNotFound},
		{name: "a blocking decision with a reason no one listed is still not Ready", in: Input{TargetFound: true}, d: Decision{Reason: "SomeFutureRefusal", Blocked: true}, after: closedFail,
			wantState: v1alpha1.StateUnknown, wantReady: metav1.ConditionFalse, wantReason: "SomeFutureRefusal"},
		{name: "a disarm shows Disarmed and not Ready", in: Input{TargetFound: true}, d: Decision{Write: WriteDrop, Reason: ReasonExternalChange, ExternalChange: true, Disarm: "an operator changed it"}, after: closedFail,
			wantState: v1alpha1.StateDisarmed, wantReady: metav1.ConditionFalse, wantReason: ReasonDisarmed},
		{name: "a disarm from before stays until re-armed", in: Input{TargetFound: true}, d: Decision{Reason: ReasonDisarmed}, after: closedFail, disarmed: "forced closed",
			wantState: v1alpha1.StateDisarmed, wantReady: metav1.ConditionFalse, wantReason: ReasonDisarmed},
		{name: "a re-arm clears it", in: Input{TargetFound: true}, d: Decision{Reason: ReasonNoChange, Rearm: true}, after: closedFail, disarmed: "forced closed",
			wantState: v1alpha1.StateClosed, wantReady: metav1.ConditionTrue, wantReason: ReasonArmed},
		{name: "a failed write is not Ready", in: Input{TargetFound: true}, d: Decision{Write: WriteOpen, Reason: ReasonWebhookUnhealthy}, after: closedFail, writeErr: errors.New("patch: connection refused"),
			wantState: v1alpha1.StateClosed, wantReady: metav1.ConditionFalse, wantReason: ReasonWriteFailed},
		{name: "Bypass that cannot be applied is not Ready", in: Input{TargetFound: true}, d: Decision{Write: WriteOpen, Reason: ReasonWebhookUnhealthy}, after: closedFail, writeErr: fmt.Errorf("open: %w", circuit.ErrCannotBypass),
			wantState: v1alpha1.StateClosed, wantReady: metav1.ConditionFalse, wantReason: ReasonCannotBypass},
		{name: "a refusal that leaves it able to act is Ready with its reason", in: Input{TargetFound: true}, d: Decision{Reason: ReasonAlreadyFailOpen, Refused: true, Message: "already fails open"}, after: adminIgnore,
			wantState: v1alpha1.StateClosed, wantReady: metav1.ConditionTrue, wantReason: ReasonAlreadyFailOpen},
		{name: "Observe is Ready and says so", in: Input{TargetFound: true, Mode: v1alpha1.ModeObserve}, d: Decision{Reason: ReasonObserving}, after: closedFail,
			wantState: v1alpha1.StateClosed, wantReady: metav1.ConditionTrue, wantReason: ReasonObserving},
		{name: "another breaker's record is not ours: Unknown", in: Input{TargetFound: true}, d: Decision{Reason: ReasonRecordOfOther, Blocked: true}, after: othersRecord,
			wantState: v1alpha1.StateUnknown, wantReady: metav1.ConditionFalse, wantReason: ReasonRecordOfOther},
	}
	now := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := &v1alpha1.WebhookCircuitBreaker{
				ObjectMeta: metav1.ObjectMeta{Name: "b", UID: uid, Generation: 2},
				Spec: v1alpha1.WebhookCircuitBreakerSpec{Target: v1alpha1.Target{
					Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "sidecar-injector", WebhookName: "w.tripswitch.test",
				}},
				Status: v1alpha1.WebhookCircuitBreakerStatus{TargetUID: cfgUID, DisarmedReason: tc.disarmed},
			}
			obs := Observed{State: tc.after}
			if tc.in.TargetFound {
				obs.Config = &circuit.Configuration{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: cfgUID}}}
			}
			if tc.in.ProbeUnknown {
				obs.Health.Last = probe.Result{Status: probe.Unknown, Reason: tc.in.ProbeReason}
			}
			s := NextStatus(b, Outcome{Input: tc.in, Decision: tc.d, Observed: obs, After: tc.after, WriteErr: tc.writeErr, Now: now})
			ready := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady)
			if s.State != tc.wantState || ready == nil || ready.Status != tc.wantReady || ready.Reason != tc.wantReason {
				t.Fatalf("state %s, Ready %+v; want %s, %s %s", s.State, ready, tc.wantState, tc.wantReady, tc.wantReason)
			}
			if s.Target != "sidecar-injector/w.tripswitch.test" {
				t.Fatalf("target column %q", s.Target)
			}
			probeCond := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionProbeUnsupported)
			if (probeCond.Status == metav1.ConditionTrue) != tc.in.ProbeUnknown {
				t.Fatalf("ProbeUnsupported %+v with ProbeUnknown %v", probeCond, tc.in.ProbeUnknown)
			}
			// A missing target has nothing to probe; it never "can be probed".
			if !tc.in.TargetFound && (probeCond.Reason != ReasonTargetNotFound || strings.Contains(probeCond.Message, "can be probed")) {
				t.Fatalf("missing target: ProbeUnsupported %+v", probeCond)
			}
		})
	}
}

// TestDetailOnly: a status that differs only in the probe's counts (its
// verdict unchanged, or falling back to Pending) or in the Preflight
// message (its verdict standing) is detail; anything a reader acts on is
// not.
func TestDetailOnly(t *testing.T) {
	preflight := func(st metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: v1alpha1.ConditionPreflight, Status: st, Reason: reason, Message: msg}
	}
	base := v1alpha1.WebhookCircuitBreakerStatus{
		State: v1alpha1.StateClosed,
		Probe: v1alpha1.ProbeStatus{ConsecutiveSuccesses: 5, LastResult: "Healthy", LastReason: "HTTP 200"},
		Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonArmed},
			preflight(metav1.ConditionFalse, "ChainExceedsDeadline", "the 916 webhooks that can match the same requests can take 15m16s"),
		},
	}
	b := &v1alpha1.WebhookCircuitBreaker{Spec: v1alpha1.WebhookCircuitBreakerSpec{Probe: v1alpha1.ProbeSpec{FailureThreshold: 3, SuccessThreshold: 5}}, Status: base}
	change := func(f func(*v1alpha1.WebhookCircuitBreakerStatus)) v1alpha1.WebhookCircuitBreakerStatus {
		s := *base.DeepCopy()
		f(&s)
		return s
	}
	for _, c := range []struct {
		name string
		next v1alpha1.WebhookCircuitBreakerStatus
		want bool
	}{
		{"nothing changed: nothing to write at all", base, false},
		{"the Preflight totals moved", change(func(s *v1alpha1.WebhookCircuitBreakerStatus) {
			s.Conditions[1].Message = "the 1000 webhooks that can match the same requests can take 16m40s"
		}), true},
		{"Preflight turned True", change(func(s *v1alpha1.WebhookCircuitBreakerStatus) {
			s.Conditions[1] = preflight(metav1.ConditionTrue, "WithinDeadline", "within")
		}), false},
		{"one failed probe of a healthy webhook", change(func(s *v1alpha1.WebhookCircuitBreakerStatus) {
			s.Probe = v1alpha1.ProbeStatus{ConsecutiveFailures: 1, LastResult: "Unhealthy", LastReason: "timeout after 250ms"}
		}), true},
		{"the failures reach their threshold", change(func(s *v1alpha1.WebhookCircuitBreakerStatus) {
			s.Probe = v1alpha1.ProbeStatus{ConsecutiveFailures: 3, LastResult: "Unhealthy", LastReason: "timeout after 250ms"}
		}), false},
		{"the counts and the Preflight totals together", change(func(s *v1alpha1.WebhookCircuitBreakerStatus) {
			s.Probe.LastReason = "HTTP 204"
			s.Conditions[1].Message = "other totals"
		}), true},
		{"the endpoint counts of a partial outage", change(func(s *v1alpha1.WebhookCircuitBreakerStatus) {
			s.Probe.HealthyEndpoints, s.Probe.Endpoints = new(int32(1)), new(int32(2))
		}), false},
		{"a condition changed", change(func(s *v1alpha1.WebhookCircuitBreakerStatus) {
			s.Conditions[0].Status, s.Conditions[0].Reason = metav1.ConditionFalse, ReasonWriteFailed
		}), false},
		{"the state changed", change(func(s *v1alpha1.WebhookCircuitBreakerStatus) { s.State = v1alpha1.StateOpen }), false},
	} {
		if got := DetailOnly(b, c.next, b.Spec.Resolve().Probe); got != c.want {
			t.Errorf("%s: DetailOnly %v, want %v", c.name, got, c.want)
		}
	}
	// The first status of a new breaker is never detail.
	if DetailOnly(&v1alpha1.WebhookCircuitBreaker{}, base, v1alpha1.ProbeSpec{}.Resolve()) {
		t.Error("a new breaker's first status is detail")
	}
}

// TestFirstReportWait: a new breaker whose webhook is found and probed,
// with nothing else to say, waits for its probes' first verdict, up to
// (max threshold + 2) intervals after it was first seen; anything a reader
// needs to know is written at once.
func TestFirstReportWait(t *testing.T) {
	created := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC) // first seen
	newBreaker := func() *v1alpha1.WebhookCircuitBreaker {
		return &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{UID: "b-uid"},
			Spec: v1alpha1.WebhookCircuitBreakerSpec{Probe: v1alpha1.ProbeSpec{
				Interval: &metav1.Duration{Duration: time.Second}, FailureThreshold: 3, SuccessThreshold: 5}}}
	}
	pending := probe.Observation{Verdict: probe.VerdictPending, ConsecutiveSuccesses: 2, Last: probe.Result{Status: probe.Healthy}}
	routine := func() Outcome {
		return Outcome{Input: Input{TargetFound: true}, Decision: Decision{Reason: ReasonNoChange}, Observed: Observed{Health: pending}, After: closedFail}
	}
	deadline := 7 * time.Second // (max(3, 5) + 2) × 1s
	for _, c := range []struct {
		name   string
		b      func(*v1alpha1.WebhookCircuitBreaker)
		o      func(*Outcome)
		now    time.Duration // after creation
		waitOK bool
	}{
		{name: "probes not decided yet: waits", now: 2 * time.Second, waitOK: true},
		{name: "past the deadline: written", now: deadline},
		{name: "slow probes wait at most 30 s", b: func(b *v1alpha1.WebhookCircuitBreaker) {
			b.Spec.Probe.Interval = &metav1.Duration{Duration: 30 * time.Second}
		}, now: MaxFirstReportWait},
		{name: "the probes decided Healthy", o: func(o *Outcome) { o.Observed.Health.Verdict = probe.VerdictHealthy }, now: time.Second},
		{name: "the probes decided Unhealthy", o: func(o *Outcome) { o.Observed.Health.Verdict = probe.VerdictUnhealthy }, now: time.Second},
		{name: "the webhook cannot be probed", o: func(o *Outcome) { o.Observed.Health.Last.Status = probe.Unknown }, now: time.Second},
		{name: "the target is missing", o: func(o *Outcome) { o.Input.TargetFound = false }, now: time.Second},
		{name: "not approved", o: func(o *Outcome) { o.Observed.NotApproved = "add it to the role" }, now: time.Second},
		{name: "a blocked decision", o: func(o *Outcome) { o.Decision.Blocked = true }, now: time.Second},
		{name: "a write", o: func(o *Outcome) { o.Decision.Write = WriteOpen }, now: time.Second},
		{name: "a failed write", o: func(o *Outcome) { o.WriteErr = errors.New("boom") }, now: time.Second},
		{name: "a record of its own (adopted after a restart)", o: func(o *Outcome) {
			o.After = circuit.State{Index: 0, Record: &v1alpha1.CircuitRecord{BreakerUID: "b-uid"}}
		}, now: time.Second},
		{name: "a fallback policy to report", o: func(o *Outcome) { o.Floor = &FloorReport{} }, now: time.Second},
		{name: "an API server signal to report", o: func(o *Outcome) { o.Observed.Signal = &apisignal.Status{} }, now: time.Second},
		{name: "its status was written before", b: func(b *v1alpha1.WebhookCircuitBreaker) { b.Status.State = v1alpha1.StateClosed }, now: time.Second},
		{name: "being deleted", b: func(b *v1alpha1.WebhookCircuitBreaker) { b.DeletionTimestamp = &metav1.Time{Time: created} }, now: time.Second},
	} {
		b, o := newBreaker(), routine()
		if c.b != nil {
			c.b(b)
		}
		if c.o != nil {
			c.o(&o)
		}
		o.Spec = b.Spec.Resolve()
		got := FirstReportWait(b, o, created, created.Add(c.now))
		switch {
		case c.waitOK && got != deadline-c.now:
			t.Errorf("%s: waits %v, want %v (until the deadline)", c.name, got, deadline-c.now)
		case !c.waitOK && got != 0:
			t.Errorf("%s: waits %v, want the status written now", c.name, got)
		}
	}
}

// TestFailedCallsHoldTheOutageUntilTheyPass: a window the probes began, in
// which the API server's calls were then seen failing (the signal, or a
// failed half-open trial), is marked so, and healthy probes alone no
// longer end it: the fault may have moved from /healthz to the reviews
// (seen by test/adversary: a reset, then reviews alone failing; the
// probes ended the outage, and the signal opened it again over an undo).
// The API server's calls passing end it; without the signal, the probes.
func TestFailedCallsHoldTheOutageUntilTheyPass(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 6, 6, 45, 0, 0, time.UTC))
	b := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: uid, Generation: 1},
		Status: v1alpha1.WebhookCircuitBreakerStatus{TargetUID: "cfg-uid",
			Outage: &v1alpha1.OutageWindow{StartedAt: at, Evidence: v1alpha1.EvidenceProbes, Opens: 1, Writes: 2, Budget: 4, Generation: 1}}}
	marked := func(in Input, d Decision) bool {
		in.TargetFound = true
		s := NextStatus(b, Outcome{Input: in, Decision: d, Observed: Observed{State: closedFail}, After: closedFail, Now: at})
		return s.Outage != nil && s.Outage.CallsFailed
	}
	if !marked(Input{APIServerFailing: true, SignalOn: true, Window: b.Status.Outage, Disarmed: true}, Decision{Reason: ReasonDisarmed}) {
		t.Fatal("the signal failing in a probes' window did not mark it")
	}
	if !marked(Input{SignalOn: true, Window: b.Status.Outage}, Decision{Write: WriteEndTrial, Trial: &halfopen.Verdict{Step: halfopen.Fail}}) {
		t.Fatal("a failed trial did not mark the window")
	}
	if marked(Input{SignalOn: true, Window: b.Status.Outage, Disarmed: true}, Decision{Reason: ReasonDisarmed}) {
		t.Fatal("marked with no failed call seen")
	}

	healthy := Health{Verdict: probe.VerdictHealthy}
	failed := &v1alpha1.OutageWindow{Evidence: v1alpha1.EvidenceProbes, CallsFailed: true}
	plain := &v1alpha1.OutageWindow{Evidence: v1alpha1.EvidenceProbes}
	for _, tc := range []struct {
		name string
		in   Input
		want bool
	}{
		{"probes' window, probes healthy, signal too few calls", Input{Window: plain, Health: healthy, SignalOn: true}, true},
		{"probes' window, probes healthy, failed calls too few to judge", Input{Window: plain, Health: healthy, SignalOn: true, APIServerFailedCalls: true}, false},
		{"probes' window, probes healthy, failed calls outnumbered by passing ones", Input{Window: plain, Health: healthy, SignalOn: true, APIServerFailedCalls: true, APIServerHealthy: true}, true},
		{"probes' window, probes healthy, failed calls, the signal blind", Input{Window: plain, Health: healthy, APIServerFailedCalls: true}, true},
		{"calls failed, probes healthy, signal too few calls", Input{Window: failed, Health: healthy, SignalOn: true}, false},
		{"calls failed, probes healthy, calls pass", Input{Window: failed, Health: healthy, SignalOn: true, APIServerHealthy: true}, true},
		{"calls failed, probes failing, calls pass", Input{Window: failed, Health: Health{Verdict: probe.VerdictUnhealthy}, SignalOn: true, APIServerHealthy: true}, false},
		{"calls failed, the signal turned off: the probes", Input{Window: failed, Health: healthy}, true},
	} {
		if got := tc.in.Recovered(); got != tc.want {
			t.Errorf("%s: Recovered() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

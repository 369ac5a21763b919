package policy

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/budget"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/halfopen"
	"github.com/tripswitch-dev/tripswitch/internal/owners"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// ours is the record the write left on the webhook, if it is this breaker's.
func (o Outcome) ours(b *v1alpha1.WebhookCircuitBreaker) *v1alpha1.CircuitRecord {
	if r := o.After.Record; r != nil && r.BreakerUID == b.UID {
		return r
	}
	return nil
}

// NextStatus derives the next status from what was read, decided and
// written. The webhook's record is the truth; the status only mirrors it.
func NextStatus(b *v1alpha1.WebhookCircuitBreaker, o Outcome) v1alpha1.WebhookCircuitBreakerStatus {
	s := *b.Status.DeepCopy()
	s.ObservedGeneration = b.Generation
	s.Target = b.Spec.Target.ConfigurationName + "/" + b.Spec.Target.WebhookName
	if o.Observed.NotApproved != "" {
		// Unreadable, not gone: what the status last mirrored stays, since
		// the change may still be on the webhook.
		return notApprovedStatus(s, b, o)
	}
	ours := o.ours(b)
	mirrorRecord(&s, o, ours)
	setOutage(&s, b, o, ours)
	setState(&s, b, o, ours)
	setConditions(&s, b, o, ours)
	setFloor(&s, b, o)
	setMaxOpen(&s, b, o, ours)
	setOpenRefused(&s, b, o)
	setPreflight(&s, b, o)
	setOwned(&s, b, o)
	return s
}

// setOwned sets Owned from the configuration's other writers
// (owners.Judge); without the webhook it stays as last judged. It never
// touches Ready.
func setOwned(s *v1alpha1.WebhookCircuitBreakerStatus, b *v1alpha1.WebhookCircuitBreaker, o Outcome) {
	if !o.Input.TargetFound || o.Observed.Config == nil {
		return
	}
	v := owners.Judge(o.Observed.Config.Object, b.Spec.Target.WebhookName, o.Spec.Action, o.Spec.HalfOpen != nil, LastOwned(b))
	if v.Kept {
		return // as last judged: tripswitch's own write took the field it rests on
	}
	setter(s, b, o)(v1alpha1.ConditionOwned, v.Owned, v.Reason, v.Message)
}

// LastOwned is b's Owned condition as last judged for its current spec,
// nil when there is none (owners.Judge keeps it while tripswitch's own
// write holds a field the judgement rests on).
func LastOwned(b *v1alpha1.WebhookCircuitBreaker) *metav1.Condition {
	c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionOwned)
	if c == nil || c.ObservedGeneration != b.Generation {
		return nil
	}
	return c
}

// setPreflight sets Preflight from the chain's verdict; without one (the
// webhook was not found) it stays as last judged. It never touches Ready.
func setPreflight(s *v1alpha1.WebhookCircuitBreakerStatus, b *v1alpha1.WebhookCircuitBreaker, o Outcome) {
	v := o.Observed.Chain
	if v == nil {
		return
	}
	c := v.Condition(b.Generation)
	c.LastTransitionTime = o.Now
	meta.SetStatusCondition(&s.Conditions, c)
}

// notApprovedStatus is the status of a breaker whose target tripswitch may
// not read: Unknown, not Ready, and what to change.
func notApprovedStatus(s v1alpha1.WebhookCircuitBreakerStatus, b *v1alpha1.WebhookCircuitBreaker, o Outcome) v1alpha1.WebhookCircuitBreakerStatus {
	if s.State != v1alpha1.StateUnknown {
		s.State = v1alpha1.StateUnknown
		s.LastTransitionTime = &o.Now
	}
	for _, c := range []metav1.Condition{
		{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonNotApproved, Message: o.Decision.Message},
		{Type: v1alpha1.ConditionTargetFound, Status: metav1.ConditionFalse, Reason: ReasonNotApproved, Message: o.Observed.NotApproved},
	} {
		c.ObservedGeneration, c.LastTransitionTime = b.Generation, o.Now
		meta.SetStatusCondition(&s.Conditions, c)
	}
	return s
}

// mirrorRecord makes the status's record and history follow the record on
// the webhook. The record lives and dies with the configuration: one that
// is gone, or was recreated (new UID), carries no record of ours.
func mirrorRecord(s *v1alpha1.WebhookCircuitBreakerStatus, o Outcome, ours *v1alpha1.CircuitRecord) {
	switch {
	case o.Observed.Config == nil:
		updateHistory(s, s.Record, nil, ReasonTargetGone, o.Now)
		s.Record = nil
	case o.Observed.Config.Object.GetUID() != s.TargetUID:
		updateHistory(s, s.Record, nil, ReasonTargetRecreated, o.Now)
		s.Record = nil
		s.TargetUID = o.Observed.Config.Object.GetUID()
	}
	if o.Input.TargetFound && o.After.RecordErr == nil {
		updateHistory(s, s.Record, ours, closeReason(s.Record, o.Input.State.Record, o.Decision, o.ClosedBy), closedAt(s.Record, o))
		s.Record = ours
	}
}

// setOutage keeps the outage window (its counts are written before each
// write, by the controller): a disarm with no window begins one; an undo,
// or a write past the budget, is marked on it; it ends, and its budget
// with it, once the breaker holds nothing and the evidence that began it
// says the webhook is healthy again (a half-open trial's real calls
// passing is such evidence), or with a re-arm.
func setOutage(s *v1alpha1.WebhookCircuitBreakerStatus, b *v1alpha1.WebhookCircuitBreaker, o Outcome, ours *v1alpha1.CircuitRecord) {
	in, d := o.Input, o.Decision
	// The window as the decision saw it (inferred from the record, or
	// without an open never applied), unless a write counted since.
	if wrote := d.Write != WriteNone && o.WriteErr == nil; !wrote && in.Window != nil && (ours != nil || s.Outage != nil) &&
		!equality.Semantic.DeepEqual(s.Outage, in.Window) {
		s.Outage = in.Window.DeepCopy()
	}
	if d.Disarm != "" && s.Outage == nil {
		s.Outage = budget.Start(nil, budget.Begin{At: o.Now, Evidence: d.Evidence, UID: in.ConfigUID})
		s.Outage.Generation = b.Generation
	}
	if w := s.Outage; w != nil {
		if d.ExternalChange && o.WriteErr == nil {
			w.Held = false
		}
		if d.Exhausted {
			w.Exhausted = true
		}
		if in.APIServerFailing || d.Trial != nil && d.Trial.Step == halfopen.Fail {
			w.CallsFailed = true
		}
	}
	passed := d.Write == WriteClose && d.Trial != nil && d.Trial.Step == halfopen.Pass && o.WriteErr == nil
	if RearmRequested(b) || ours == nil && d.Disarm == "" && (in.Recovered() || passed) {
		s.Outage = nil
	}
}

// closedAt is when the window of the record the status mirrored closed:
// when this process closed it, if it did and the status shows it only now
// (a companion's close, or a deferred status write); else now.
func closedAt(mirrored *v1alpha1.CircuitRecord, o Outcome) metav1.Time {
	if n := o.ClosedBy; mirrored != nil && n != nil && mirrored.OpenedAt.Equal(&n.OpenedAt) && !n.At.IsZero() {
		return n.At
	}
	return o.Now
}

// setState sets what an operator reads at a glance, and the numbers behind
// it: the state, the disarm, the probe's counts and the API server signal.
func setState(s *v1alpha1.WebhookCircuitBreakerStatus, b *v1alpha1.WebhookCircuitBreaker, o Outcome, ours *v1alpha1.CircuitRecord) {
	s.APIServer = nil
	if sig := o.Observed.Signal; sig != nil {
		s.APIServer = &v1alpha1.APIServerSignalStatus{Failing: sig.Failing, FailureRatePercent: int32(sig.FailureRate),
			Calls: sig.Calls, Failures: sig.Failures, Message: sig.Message}
		if !sig.At.IsZero() {
			at := metav1.NewTime(sig.At.Truncate(time.Second))
			s.APIServer.ObservedAt = &at
		}
	}
	if RearmRequested(b) {
		s.ObservedRearm = b.Annotations[RearmAnnotation]
		s.DisarmedReason = ""
	}
	switch {
	case o.Decision.Disarm != "":
		s.DisarmedReason = o.Decision.Disarm
	case o.Decision.Rearm:
		s.DisarmedReason = ""
	}
	// Open while tripswitch holds a change; Unknown when it cannot tell or
	// cannot act on its target; Disarmed when it will not open for this
	// outage; Closed otherwise.
	state := v1alpha1.StateClosed
	switch {
	case ours != nil:
		state = v1alpha1.StateOpen
	case o.Decision.Blocked:
		state = v1alpha1.StateUnknown
	case s.DisarmedReason != "":
		state = v1alpha1.StateDisarmed
	}
	if state != s.State {
		// When it happened, if this status write comes later (a deferred
		// write, or a companion's circuit written in another's patch).
		at := o.Now
		switch {
		case state == v1alpha1.StateOpen:
			at = ours.OpenedAt
		case s.State == v1alpha1.StateOpen:
			at = closedAt(b.Status.Record, o)
		}
		s.State = state
		s.LastTransitionTime = &at
	}
	s.Trial = trialStatus(o, ours)
	h := o.Observed.Health
	s.Probe = v1alpha1.ProbeStatus{
		ConsecutiveFailures:  h.ConsecutiveFailures,
		ConsecutiveSuccesses: h.ConsecutiveSuccesses,
		LastResult:           string(h.Last.Status),
		LastReason:           h.Last.Reason,
	}
	if b.Spec.Probe.Endpoints && h.Last.Status != "" {
		s.Probe.HealthyEndpoints = new(int32(h.Last.Healthy))
		s.Probe.Endpoints = new(int32(h.Last.Total))
	}
}

// setConditions sets the conditions from the outcome and the state.
func setConditions(s *v1alpha1.WebhookCircuitBreakerStatus, b *v1alpha1.WebhookCircuitBreaker, o Outcome, ours *v1alpha1.CircuitRecord) {
	in, d := o.Input, o.Decision
	set := setter(s, b, o)
	switch {
	case in.TargetFound:
		set(v1alpha1.ConditionTargetFound, true, ReasonConfigurationFound, "webhook "+b.Spec.Target.WebhookName+" found in "+b.Spec.Target.ConfigurationName)
	default:
		set(v1alpha1.ConditionTargetFound, false, ReasonTargetNotFound, notFoundMessage(b, o.Observed))
	}
	switch {
	case ours != nil && ours.Trial != nil:
		set(v1alpha1.ConditionCircuitOpen, true, halfopen.ReasonRunning, fmt.Sprintf("%s since %s: %s; a trial lets %s of requests reach the webhook under failurePolicy Ignore since %s",
			ours.Action, ours.OpenedAt.UTC().Format(time.RFC3339), ours.Reason, ours.Trial.SamplePercent, ours.Trial.StartedAt.UTC().Format(time.RFC3339)))
	case ours != nil:
		set(v1alpha1.ConditionCircuitOpen, true, ReasonCircuitOpen, string(ours.Action)+" since "+ours.OpenedAt.UTC().Format(time.RFC3339)+": "+ours.Reason)
	default:
		set(v1alpha1.ConditionCircuitOpen, false, ReasonCircuitClosed, "tripswitch holds no change on the webhook")
	}
	if d.ExternalChange {
		set(v1alpha1.ConditionExternalChange, true, d.Reason, d.Message)
	} else if s.DisarmedReason == "" {
		set(v1alpha1.ConditionExternalChange, false, ReasonNoExternalChange, "no external change during an open circuit")
	}
	switch {
	case !in.TargetFound:
		set(v1alpha1.ConditionProbeUnsupported, false, ReasonTargetNotFound, "the webhook was not found: there is nothing to probe")
	case in.ProbeUnknown:
		set(v1alpha1.ConditionProbeUnsupported, true, ReasonProbeUnsupported, in.ProbeReason)
	default:
		set(v1alpha1.ConditionProbeUnsupported, false, ReasonProbeSupported, "the webhook can be probed")
	}
	setHealth(s, o, set)
	setReady(s, o, ours, set)
}

// setter sets one condition of s, True when ok.
func setter(s *v1alpha1.WebhookCircuitBreakerStatus, b *v1alpha1.WebhookCircuitBreaker, o Outcome) func(typ string, ok bool, reason, msg string) {
	return func(typ string, ok bool, reason, msg string) {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: b.Generation, LastTransitionTime: o.Now})
	}
}

// setHealth sets the conditions on the evidence: the API server signal,
// late probes, a starved controller.
func setHealth(s *v1alpha1.WebhookCircuitBreakerStatus, o Outcome, set func(typ string, ok bool, reason, msg string)) {
	switch sig := o.Observed.Signal; {
	case sig == nil:
		meta.RemoveStatusCondition(&s.Conditions, v1alpha1.ConditionAPIServerSignal)
	case sig.Unreadable:
		set(v1alpha1.ConditionAPIServerSignal, false, ReasonSignalUnreadable, sig.Message+"; until then only the probes can open this circuit")
	case o.Observed.Ambiguous != "":
		set(v1alpha1.ConditionAPIServerSignal, false, ReasonSignalAmbiguous, o.Observed.Ambiguous)
	default:
		set(v1alpha1.ConditionAPIServerSignal, true, ReasonSignalReading, "reading the API server's counts of calls to the webhook")
	}
	if o.Observed.Health.Late {
		set(v1alpha1.ConditionProbesLate, true, ReasonProbesLate, "probes start more than half an interval late: the controller has more breakers than its CPU can probe on time; "+
			"every breaker's probes are stretched alike and circuits still open and close, later (give it more CPU, longer probe intervals, or fewer breakers)")
	} else {
		set(v1alpha1.ConditionProbesLate, false, ReasonProbesOnTime, "probes keep their interval")
	}
	switch {
	case o.Observed.Health.Starved:
		set(v1alpha1.ConditionControllerStarved, true, ReasonControllerStarved, "probe timeouts the controller could not confirm are not counted: it could not run "+
			"(CPU-throttled by its limit, paused, or waiting for a CPU on a busy node) long enough to have seen an answer. Explicit failures "+
			"(refused, reset, TLS errors, HTTP 5xx) and the API server signal count as always; a slow or hung webhook opens later. "+
			"Give the controller more CPU (a higher request or limit) or fewer breakers; last: "+o.Observed.Health.Last.Reason)
	case meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionControllerStarved) != nil:
		set(v1alpha1.ConditionControllerStarved, false, ReasonControllerRuns, "probe timeouts count again: the controller has run through every probe for a minute")
	}
}

// setReady sets Ready: whether tripswitch can act on the webhook, and why not.
func setReady(s *v1alpha1.WebhookCircuitBreakerStatus, o Outcome, ours *v1alpha1.CircuitRecord, set func(typ string, ok bool, reason, msg string)) {
	in, d := o.Input, o.Decision
	switch {
	case o.WriteErr != nil:
		reason := ReasonWriteFailed
		if d.Write == WriteOpen && errors.Is(o.WriteErr, circuit.ErrCannotBypass) {
			reason = ReasonCannotBypass
		}
		set(v1alpha1.ConditionReady, false, reason, o.WriteErr.Error())
	case d.Blocked:
		set(v1alpha1.ConditionReady, false, d.Reason, d.Message)
	case s.DisarmedReason != "" && ours == nil:
		reason := ReasonDisarmed
		if s.Outage != nil && s.Outage.Exhausted {
			reason = ReasonWriteBudgetExhausted
		}
		set(v1alpha1.ConditionReady, false, reason, "tripswitch will not open this circuit for this outage: "+s.DisarmedReason+"; it re-arms when the webhook is healthy again, or with the "+RearmAnnotation+" annotation")
	case ours != nil:
		set(v1alpha1.ConditionReady, true, ReasonCircuitOpen, "tripswitch holds the circuit open and will close it when the webhook recovers")
	case d.Refused:
		set(v1alpha1.ConditionReady, true, d.Reason, d.Message)
	case in.Mode == v1alpha1.ModeObserve:
		set(v1alpha1.ConditionReady, true, ReasonObserving, "mode is Observe: probing and reporting, never writing")
	default:
		set(v1alpha1.ConditionReady, true, ReasonArmed, "tripswitch can open and close this webhook's circuit")
	}
}

// closeReason is why the window of the record the status mirrored closed:
// this reconcile's reason, unless the record was already gone (or replaced)
// when it read the configuration — closed outside this reconcile, as by a
// break-glass restore while the controller was away; this reconcile's
// decision says nothing about that. A record this process closed in another
// breaker's patch closes with the reason it was closed for.
func closeReason(mirrored, read *v1alpha1.CircuitRecord, d Decision, closedBy *ClosedNote) string {
	if mirrored != nil && read == nil && closedBy != nil && mirrored.OpenedAt.Equal(&closedBy.OpenedAt) {
		return closedBy.Reason // closed in another breaker's patch, for this breaker's own reason
	}
	if mirrored != nil && d.Reason != ReasonRecordRemoved && (read == nil || !read.OpenedAt.Equal(&mirrored.OpenedAt)) {
		return ReasonClosedExternally
	}
	return d.Reason
}

// updateHistory opens a window when a record appears and closes the last one
// when it goes, so history follows the record even across missed updates.
func updateHistory(s *v1alpha1.WebhookCircuitBreakerStatus, before, after *v1alpha1.CircuitRecord, reason string, now metav1.Time) {
	if before != nil && (after == nil || !after.OpenedAt.Equal(&before.OpenedAt)) {
		s.CloseLast(now, reason)
	}
	if after != nil && (before == nil || !after.OpenedAt.Equal(&before.OpenedAt)) {
		s.OpenWindowFor(after)
	}
}

func notFoundMessage(b *v1alpha1.WebhookCircuitBreaker, obs Observed) string {
	t := b.Spec.Target
	if obs.Config == nil {
		return string(t.Kind) + " " + t.ConfigurationName + " not found"
	}
	return "webhook " + t.WebhookName + " not found in " + string(t.Kind) + " " + t.ConfigurationName
}

// DetailOnly reports whether next differs from b's status only in detail
// no reader acts on: the probe's counts and last result while its verdict
// (counts against the thresholds) is unchanged or falls back to Pending
// (the endpoint counts of a partial outage are not detail),
// and the Preflight condition's message while its status and reason stand
// (the chain's totals move with every configuration the controller
// watches). A write of detail alone can wait: such detail is written with
// the next change, and on its own only now and then (the reconciler's
// choice), so that a thousand breakers created together, or an outage's
// first failed probes, do not cost a status write each. p is the
// breaker's resolved probe spec, whose thresholds the counts are judged
// against.
func DetailOnly(b *v1alpha1.WebhookCircuitBreaker, next v1alpha1.WebhookCircuitBreakerStatus, p v1alpha1.ResolvedProbe) bool {
	cur := b.Status
	if equality.Semantic.DeepEqual(next, cur) {
		return false
	}
	verdict := func(s v1alpha1.ProbeStatus) probe.Verdict {
		return probe.VerdictOf(s.ConsecutiveFailures, s.ConsecutiveSuccesses, p.FailureThreshold, p.SuccessThreshold)
	}
	if v := verdict(next.Probe); v != probe.VerdictPending && v != verdict(cur.Probe) {
		return false
	}
	next = *next.DeepCopy()
	next.Probe.ConsecutiveFailures, next.Probe.ConsecutiveSuccesses = cur.Probe.ConsecutiveFailures, cur.Probe.ConsecutiveSuccesses
	next.Probe.LastResult, next.Probe.LastReason = cur.Probe.LastResult, cur.Probe.LastReason
	old, now := meta.FindStatusCondition(cur.Conditions, v1alpha1.ConditionPreflight), meta.FindStatusCondition(next.Conditions, v1alpha1.ConditionPreflight)
	if old != nil && now != nil && old.Status == now.Status && old.Reason == now.Reason {
		now.Message = old.Message
	}
	return equality.Semantic.DeepEqual(next, cur)
}

// FirstReportWait is how much longer a new breaker's first status waits
// for its probes' first verdict, 0 when it is written now. A breaker whose
// status was never written, whose webhook is found and can be probed, and
// about which nothing else is to be said (no write, nothing blocked or
// refused, no record, no fallback policy, no API server signal, not being
// deleted) says nothing
// a reader needs until its probes decide: the reconcile that verdict
// queues writes the status once, with the verdict. A thousand breakers
// created together would otherwise write each status twice, a moment
// apart. The wait ends (max(failureThreshold, successThreshold) + 2)
// intervals after seen, when this process first saw the breaker (not its
// creation, which the API server's clock stamped), and at most
// MaxFirstReportWait after it, verdict or not: what the status says of
// the chain (Preflight) or of a controller too busy to probe on time
// (ProbesLate, ControllerStarved) waits no longer than that.
func FirstReportWait(b *v1alpha1.WebhookCircuitBreaker, o Outcome, seen, now time.Time) time.Duration {
	d, h := o.Decision, o.Observed.Health
	switch {
	case b.Status.State != "" || !b.DeletionTimestamp.IsZero() || o.Observed.NotApproved != "" || !o.Input.TargetFound || o.Observed.Signal != nil,
		d.Write != WriteNone || d.Blocked || d.Refused || d.Disarm != "" || d.Rearm || d.ExternalChange,
		o.WriteErr != nil || o.ours(b) != nil || o.Floor != nil,
		h.Verdict == probe.VerdictHealthy || h.Verdict == probe.VerdictUnhealthy || h.Last.Status == probe.Unknown:
		return 0
	}
	p := o.Spec.Probe
	until := seen.Add(min(time.Duration(max(p.FailureThreshold, p.SuccessThreshold)+2)*p.Interval, MaxFirstReportWait))
	return max(until.Sub(now), 0)
}

// MaxFirstReportWait bounds how long a new breaker's first status waits
// for its probes' verdict (see FirstReportWait).
const MaxFirstReportWait = 30 * time.Second

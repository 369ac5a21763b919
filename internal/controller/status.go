package controller

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// Condition types.
const (
	ConditionReady            = "Ready"
	ConditionCircuitOpen      = "CircuitOpen"
	ConditionTargetFound      = "TargetFound"
	ConditionExternalChange   = "ExternalChange"
	ConditionProbeUnsupported = "ProbeUnsupported"
	// ConditionProbesLate is True while probes cannot keep their interval:
	// the controller has more breakers than its CPU can probe on time.
	ConditionProbesLate = "ProbesLate"
	// ConditionAPIServerSignal is True while the API server signal reads the
	// API server's metrics, False when it cannot (the signal is degraded:
	// only the probes can open the circuit); absent without the signal.
	ConditionAPIServerSignal = "APIServerSignal"
)

// maxHistory bounds status.history (the CRD enforces the same).
const maxHistory = 20

// Probe defaults; the CRD applies the same ones.
const (
	defaultInterval         = time.Second
	defaultTimeout          = 250 * time.Millisecond
	defaultFailureThreshold = 3
	defaultSuccessThreshold = 5
	defaultHealthPath       = "/healthz"
)

// resolvedProbe is a ProbeSpec with every default applied.
type resolvedProbe struct {
	Interval, Timeout                  time.Duration
	FailureThreshold, SuccessThreshold int32
	Kind                               v1alpha1.ProbeKind
	HealthPath                         string
}

// withDefaults applies defaults the API server normally applies, so a breaker
// stored before a default existed still behaves.
func withDefaults(p v1alpha1.ProbeSpec) resolvedProbe {
	r := resolvedProbe{defaultInterval, defaultTimeout, defaultFailureThreshold, defaultSuccessThreshold, v1alpha1.ProbeHTTPGet, defaultHealthPath}
	if p.Interval != nil && p.Interval.Duration > 0 {
		r.Interval = p.Interval.Duration
	}
	if p.Timeout != nil && p.Timeout.Duration > 0 {
		r.Timeout = p.Timeout.Duration
	}
	if p.FailureThreshold > 0 {
		r.FailureThreshold = p.FailureThreshold
	}
	if p.SuccessThreshold > 0 {
		r.SuccessThreshold = p.SuccessThreshold
	}
	if p.Kind != "" {
		r.Kind = p.Kind
	}
	if p.HealthPath != "" {
		r.HealthPath = p.HealthPath
	}
	return r
}

func probeSettings(b *v1alpha1.WebhookCircuitBreaker, w circuit.Webhook) probe.Settings {
	p := withDefaults(b.Spec.Probe)
	return probe.Settings{
		Target: probe.Target{
			ClientConfig: w.ClientConfig, Kind: p.Kind, HealthPath: p.HealthPath,
			Timeout: p.Timeout, ReviewVersions: w.ReviewVersions,
		},
		Interval: p.Interval, FailureThreshold: p.FailureThreshold, SuccessThreshold: p.SuccessThreshold,
	}
}

// notApprovedStatus is the status of a breaker whose target tripswitch may
// not read: Unknown, not Ready, and what to change.
func notApprovedStatus(s v1alpha1.WebhookCircuitBreakerStatus, b *v1alpha1.WebhookCircuitBreaker, d Decision, obs observed, now metav1.Time) v1alpha1.WebhookCircuitBreakerStatus {
	if s.State != v1alpha1.StateUnknown {
		s.State = v1alpha1.StateUnknown
		s.LastTransitionTime = &now
	}
	s.Target = b.Spec.Target.ConfigurationName + "/" + b.Spec.Target.WebhookName
	for _, c := range []metav1.Condition{
		{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonNotApproved, Message: d.Message},
		{Type: ConditionTargetFound, Status: metav1.ConditionFalse, Reason: ReasonNotApproved, Message: obs.notApproved},
	} {
		c.ObservedGeneration, c.LastTransitionTime = b.Generation, now
		meta.SetStatusCondition(&s.Conditions, c)
	}
	return s
}

// computeStatus derives the next status from what was read, decided and
// written. The webhook's record is the truth; the status only mirrors it.
func computeStatus(b *v1alpha1.WebhookCircuitBreaker, in Input, d Decision, obs observed, after circuit.State, writeErr error, now metav1.Time) v1alpha1.WebhookCircuitBreakerStatus {
	s := *b.Status.DeepCopy()
	s.ObservedGeneration = b.Generation
	gen := b.Generation

	ours := after.Record
	if ours != nil && ours.BreakerUID != b.UID {
		ours = nil
	}
	// The record lives and dies with the configuration: one that is gone, or
	// was recreated (new UID), carries no record of ours.
	switch {
	case obs.notApproved != "":
		// Unreadable, not gone: what the status last mirrored stays, since
		// the change may still be on the webhook.
		return notApprovedStatus(s, b, d, obs, now)
	case obs.cfg == nil:
		s.History = updateHistory(s.History, s.Record, nil, ReasonTargetGone, now)
		s.Record = nil
	case obs.cfg.Object.GetUID() != s.TargetUID:
		s.History = updateHistory(s.History, s.Record, nil, ReasonTargetRecreated, now)
		s.Record = nil
		s.TargetUID = obs.cfg.Object.GetUID()
	}
	if in.TargetFound && after.RecordErr == nil {
		s.History = updateHistory(s.History, s.Record, ours, closeReason(s.Record, in.State.Record, d), now)
		s.Record = ours
	}

	s.APIServer = nil
	if sig := obs.signal; sig != nil {
		s.APIServer = &v1alpha1.APIServerSignalStatus{Failing: sig.Failing, FailureRatePercent: int32(sig.FailureRate),
			Calls: sig.Calls, Failures: sig.Failures, Message: sig.Message}
		if !sig.At.IsZero() {
			at := metav1.NewTime(sig.At.Truncate(time.Second))
			s.APIServer.ObservedAt = &at
		}
	}
	if rearmRequested(b) {
		s.ObservedRearm = b.Annotations[RearmAnnotation]
		s.DisarmedReason = ""
	}
	switch {
	case d.Disarm != "":
		s.DisarmedReason = d.Disarm
	case d.Rearm:
		s.DisarmedReason = ""
	}

	// The state an operator reads at a glance: Open while tripswitch holds a
	// change; Unknown when it cannot tell or cannot act on its target;
	// Disarmed when it will not open for this outage; Closed otherwise.
	state := v1alpha1.StateClosed
	switch {
	case ours != nil:
		state = v1alpha1.StateOpen
	case d.Blocked:
		state = v1alpha1.StateUnknown
	case s.DisarmedReason != "":
		state = v1alpha1.StateDisarmed
	}
	if state != s.State {
		s.State = state
		s.LastTransitionTime = &now
	}
	s.Target = b.Spec.Target.ConfigurationName + "/" + b.Spec.Target.WebhookName

	s.Probe = v1alpha1.ProbeStatus{
		ConsecutiveFailures:  obs.health.ConsecutiveFailures,
		ConsecutiveSuccesses: obs.health.ConsecutiveSuccesses,
		LastResult:           string(obs.health.Last.Status),
		LastReason:           obs.health.Last.Reason,
	}
	if b.Spec.Probe.Endpoints && obs.health.Last.Status != "" {
		s.Probe.HealthyEndpoints = new(int32(obs.health.Last.Healthy))
		s.Probe.Endpoints = new(int32(obs.health.Last.Total))
	}

	set := func(typ string, ok bool, reason, msg string) {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen, LastTransitionTime: now})
	}
	switch {
	case in.TargetFound:
		set(ConditionTargetFound, true, ReasonConfigurationFound, "webhook "+b.Spec.Target.WebhookName+" found in "+b.Spec.Target.ConfigurationName)
	default:
		set(ConditionTargetFound, false, ReasonTargetNotFound, notFoundMessage(b, obs))
	}
	if ours != nil {
		set(ConditionCircuitOpen, true, ReasonCircuitOpen, string(ours.Action)+" since "+ours.OpenedAt.UTC().Format(time.RFC3339)+": "+ours.Reason)
	} else {
		set(ConditionCircuitOpen, false, ReasonCircuitClosed, "tripswitch holds no change on the webhook")
	}
	if d.ExternalChange {
		set(ConditionExternalChange, true, d.Reason, d.Message)
	} else if s.DisarmedReason == "" {
		set(ConditionExternalChange, false, ReasonNoExternalChange, "no external change during an open circuit")
	}
	switch sig := obs.signal; {
	case sig == nil:
		meta.RemoveStatusCondition(&s.Conditions, ConditionAPIServerSignal)
	case sig.Unreadable:
		set(ConditionAPIServerSignal, false, ReasonSignalUnreadable, sig.Message+"; until then only the probes can open this circuit")
	case obs.ambiguous != "":
		set(ConditionAPIServerSignal, false, ReasonSignalAmbiguous, obs.ambiguous)
	default:
		set(ConditionAPIServerSignal, true, ReasonSignalReading, "reading the API server's counts of calls to the webhook")
	}
	if obs.health.Late {
		set(ConditionProbesLate, true, ReasonProbesLate, "probes start more than half an interval late: the controller has more breakers than its CPU can probe on time; "+
			"every breaker's probes are stretched alike and circuits still open and close, later (give it more CPU, longer probe intervals, or fewer breakers)")
	} else {
		set(ConditionProbesLate, false, ReasonProbesOnTime, "probes keep their interval")
	}
	switch {
	case !in.TargetFound:
		set(ConditionProbeUnsupported, false, ReasonTargetNotFound, "the webhook was not found: there is nothing to probe")
	case in.ProbeUnknown:
		set(ConditionProbeUnsupported, true, ReasonProbeUnsupported, in.ProbeReason)
	default:
		set(ConditionProbeUnsupported, false, ReasonProbeSupported, "the webhook can be probed")
	}
	switch {
	case writeErr != nil:
		reason := ReasonWriteFailed
		if d.Write == WriteOpen && isCannotBypass(writeErr) {
			reason = ReasonCannotBypass
		}
		set(ConditionReady, false, reason, writeErr.Error())
	case d.Blocked:
		set(ConditionReady, false, d.Reason, d.Message)
	case s.DisarmedReason != "" && ours == nil:
		set(ConditionReady, false, ReasonDisarmed, "tripswitch will not open this circuit for this outage: "+s.DisarmedReason+"; it re-arms when the webhook is healthy again, or with the "+RearmAnnotation+" annotation")
	case ours != nil:
		set(ConditionReady, true, ReasonCircuitOpen, "tripswitch holds the circuit open and will close it when the webhook recovers")
	case d.Refused:
		set(ConditionReady, true, d.Reason, d.Message)
	case in.Mode == v1alpha1.ModeObserve:
		set(ConditionReady, true, ReasonObserving, "mode is Observe: probing and reporting, never writing")
	default:
		set(ConditionReady, true, ReasonArmed, "tripswitch can open and close this webhook's circuit")
	}
	return s
}

// closeReason is why the window of the record the status mirrored closed:
// this reconcile's reason, unless the record was already gone (or replaced)
// when it read the configuration — closed outside this reconcile, as by a
// break-glass restore while the controller was away; this reconcile's
// decision says nothing about that.
func closeReason(mirrored, read *v1alpha1.CircuitRecord, d Decision) string {
	if mirrored != nil && d.Reason != ReasonRecordRemoved && (read == nil || !read.OpenedAt.Equal(&mirrored.OpenedAt)) {
		return ReasonClosedExternally
	}
	return d.Reason
}

// updateHistory opens a window when a record appears and closes the last one
// when it goes, so history follows the record even across missed updates.
func updateHistory(h []v1alpha1.OpenWindow, before, after *v1alpha1.CircuitRecord, reason string, now metav1.Time) []v1alpha1.OpenWindow {
	if before != nil && (after == nil || !after.OpenedAt.Equal(&before.OpenedAt)) {
		if n := len(h); n > 0 && h[n-1].ClosedAt == nil {
			h[n-1].ClosedAt = &now
			h[n-1].CloseReason = reason
		}
	}
	if after != nil && (before == nil || !after.OpenedAt.Equal(&before.OpenedAt)) {
		h = append(h, v1alpha1.OpenWindow{OpenedAt: after.OpenedAt, Action: after.Action, Reason: after.Reason})
	}
	if len(h) > maxHistory {
		h = h[len(h)-maxHistory:]
	}
	return h
}

func notFoundMessage(b *v1alpha1.WebhookCircuitBreaker, obs observed) string {
	t := b.Spec.Target
	if obs.cfg == nil {
		return string(t.Kind) + " " + t.ConfigurationName + " not found"
	}
	return "webhook " + t.WebhookName + " not found in " + string(t.Kind) + " " + t.ConfigurationName
}

package policy

import (
	"time"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/halfopen"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TrialVerdict judges the half-open trial of an open circuit (spec.halfOpen,
// internal/halfopen) at now: nil when closing needs no trial (any action but
// Bypass, Bypass without the signal, a mode other than Auto) or can have
// none (someone changed the failurePolicy while the circuit was open, and a
// trial would write over it: circuit.State.CanTrial), unless a trial is
// recorded: one left running when the spec changed still ends by its own
// rules.
func TrialVerdict(spec v1alpha1.ResolvedSpec, obs Observed, now time.Time) *halfopen.Verdict {
	rec := obs.State.Record
	if rec == nil || !circuit.HasTrial(rec.Action) || spec.Mode != v1alpha1.ModeAuto || rec.Trial == nil && !obs.State.CanTrial() {
		return nil
	}
	hs := spec.HalfOpen
	if hs == nil {
		if rec.Trial == nil {
			return nil
		}
		hs = (*v1alpha1.HalfOpenSpec)(nil).Resolve()
	}
	in := halfopen.Input{Now: now, Spec: *hs, Record: rec, ProbeFailed: obs.Health.Verdict == probe.VerdictUnhealthy, Calls: obs.TrialCalls}
	if obs.Health.Verdict == probe.VerdictHealthy && !obs.Health.HealthySince.IsZero() {
		in.HealthyFor = now.Sub(obs.Health.HealthySince)
	}
	if spec.Signal != nil {
		in.MinimumCalls = spec.Signal.MinimumCalls
	}
	v := halfopen.Judge(in)
	return &v
}

// trialStatus is status.trial for an open circuit that closes through a
// trial.
func trialStatus(o Outcome, ours *v1alpha1.CircuitRecord) *v1alpha1.TrialStatus {
	if ours == nil || o.Input.Trial == nil && ours.Trial == nil {
		return nil
	}
	st := &v1alpha1.TrialStatus{Phase: "Waiting", FailedTrials: ours.FailedTrials, NextTrialAt: ours.NextTrialAt}
	if v := o.Input.Trial; v != nil {
		st.Message = v.Message
	}
	if o.Decision.Trial != nil && o.Decision.Write != WriteNone {
		st.Message = o.Decision.Message
	}
	if t := ours.Trial; t != nil {
		st.Phase, st.SamplePercent = "Running", t.SamplePercent
		st.StartedAt = t.StartedAt.DeepCopy()
		if r := o.Input.State.Record; r != nil && r.Trial != nil && r.Trial.StartedAt.Equal(&t.StartedAt) {
			st.Calls, st.Failures = o.Observed.TrialCalls.Calls, o.Observed.TrialCalls.Failures
		}
	}
	return st
}

// TrialCalls are a running trial's calls as the signal st counts them (from
// the trial's start; on: the signal is on and tracks the breaker);
// ambiguous, when set, says another webhook shares the series, so the calls
// are not this trial's.
func TrialCalls(on bool, st apisignal.Status, ambiguous string) halfopen.Calls {
	if !on {
		return halfopen.Calls{Unreadable: true, Message: "the API server signal is off"}
	}
	c := halfopen.Calls{Calls: st.Calls, Failures: st.Failures, Failing: st.Failing, Unreadable: st.Unreadable, Message: st.Message}
	if ambiguous != "" {
		c.Unreadable, c.Message = true, ambiguous
	}
	return c
}

// Recheck is how long after now to look at a breaker again: at its trial's
// next due time, or at its RecheckIn (maxOpenDuration, a cluster limit), when
// that is sooner than resync (nothing else wakes a
// breaker whose probes and signal stay the same).
func Recheck(d Decision, now time.Time, resync time.Duration) time.Duration {
	if d.RecheckIn > 0 {
		resync = min(resync, d.RecheckIn+10*time.Millisecond)
	}
	if d.Trial == nil || d.Trial.Next.IsZero() || d.Write != WriteNone {
		return resync
	}
	return min(max(d.Trial.Next.Sub(now), 100*time.Millisecond)+10*time.Millisecond, resync)
}

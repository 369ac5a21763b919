package controller

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/halfopen"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// The half-open trial (spec.halfOpen, internal/halfopen) as the reconciler
// wires it: the verdict from what observe read, its two writes, and what the
// status and the requeue take from it.

// trialVerdict judges the trial of b's open circuit; nil when closing needs
// no trial (any action but Bypass, Bypass without the signal, a mode other
// than Auto), unless a trial is recorded: one left running when the spec
// changed still ends by its own rules.
func (r *Reconciler) trialVerdict(spec v1alpha1.ResolvedSpec, obs observed) *halfopen.Verdict {
	rec := obs.state.Record
	if rec == nil || rec.Action != v1alpha1.OpenActionBypass || spec.Mode != v1alpha1.ModeAuto {
		return nil
	}
	hs := spec.HalfOpen
	if hs == nil {
		if rec.Trial == nil {
			return nil
		}
		hs = (*v1alpha1.HalfOpenSpec)(nil).Resolve()
	}
	in := halfopen.Input{Now: r.Clock.Now(), Spec: *hs, Record: rec, ProbeFailed: obs.health.Verdict == probe.VerdictUnhealthy}
	if obs.health.Verdict == probe.VerdictHealthy && !obs.health.HealthySince.IsZero() {
		in.HealthyFor = r.Clock.Since(obs.health.HealthySince)
	}
	if spec.Signal != nil {
		in.MinimumCalls = spec.Signal.MinimumCalls
	}
	in.Calls = obs.trialCalls
	v := halfopen.Judge(in)
	return &v
}

// trialCalls are the API server's calls to the webhook since the trial
// began, as of the signal's last read.
func (r *Reconciler) trialCalls(name string, obs observed) halfopen.Calls {
	if obs.signal == nil {
		return halfopen.Calls{Unreadable: true, Message: "the API server signal is off"}
	}
	st, ok := r.Signals.Current(name)
	if !ok {
		st = *obs.signal
	}
	c := halfopen.Calls{Calls: st.Calls, Failures: st.Failures, Failing: st.Failing, Unreadable: st.Unreadable, Message: st.Message}
	if obs.ambiguous != "" {
		// Another configuration's webhook of the same name shares the
		// series: its calls are not this trial's.
		c.Unreadable, c.Message = true, obs.ambiguous
	}
	return c
}

// writeTrial starts or ends b's trial: one write of the configuration.
func (r *Reconciler) writeTrial(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, obs observed, d Decision) error {
	rec := obs.state.Record
	if rec == nil {
		return fmt.Errorf("%s webhook %s: no record", d.Write, b.Spec.Target.WebhookName)
	}
	w := circuit.Writer{Client: r.Client}
	now := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
	if d.Write == WriteTrial {
		percent := int32(v1alpha1.DefaultHalfOpenSamplePercent)
		if h := b.Spec.Resolve().HalfOpen; h != nil {
			percent = h.SamplePercent
		}
		_, err := w.StartTrial(ctx, obs.cfg, *rec, percent, now)
		return err
	}
	next := now
	if d.Trial != nil && !d.Trial.Next.IsZero() {
		next = metav1.NewTime(d.Trial.Next.Truncate(time.Second))
	}
	_, err := w.EndTrial(ctx, obs.cfg, *rec, next)
	return err
}

// trialReported counts and announces a trial's step once its write landed.
func (r *Reconciler) trialReported(b *v1alpha1.WebhookCircuitBreaker, d Decision) {
	webhook := b.Spec.Target.WebhookName
	switch {
	case d.Write == WriteTrial:
		r.Metrics.trial(b.Name, "started")
		r.event(b, "Normal", halfopen.ReasonTrialStarted, "Trial", "webhook %s: %s", webhook, d.Message)
	case d.Write == WriteEndTrial:
		r.Metrics.trial(b.Name, "failed")
		r.event(b, "Warning", halfopen.ReasonFailed, "Trial", "%s: webhook %s: %s", d.Reason, webhook, d.Message)
	case d.Write == WriteClose && d.Trial != nil && d.Trial.Step == halfopen.Pass:
		r.Metrics.trial(b.Name, "passed")
	case d.Write == WriteClose && d.Trial != nil && d.Trial.Step == halfopen.NoTraffic:
		r.Metrics.trial(b.Name, "no_traffic")
	}
}

// trialRecheck is when to look at b again: at the trial's next due time
// when that is sooner than the routine resync (nothing else wakes a breaker
// whose probes and signal stay the same).
func (r *Reconciler) trialRecheck(d Decision, resync time.Duration) time.Duration {
	if d.Trial == nil || d.Trial.Next.IsZero() || d.Write != WriteNone {
		return resync
	}
	return min(max(d.Trial.Next.Sub(r.Clock.Now()), 100*time.Millisecond)+10*time.Millisecond, resync)
}

// trialStatus is status.trial for an open circuit that closes through a
// trial.
func trialStatus(o outcome, ours *v1alpha1.CircuitRecord) *v1alpha1.TrialStatus {
	if ours == nil || o.in.Trial == nil && ours.Trial == nil {
		return nil
	}
	st := &v1alpha1.TrialStatus{Phase: "Waiting", FailedTrials: ours.FailedTrials, NextTrialAt: ours.NextTrialAt}
	if v := o.in.Trial; v != nil {
		st.Message = v.Message
	}
	if o.d.Trial != nil && o.d.Write != WriteNone {
		st.Message = o.d.Message
	}
	if t := ours.Trial; t != nil {
		st.Phase, st.SamplePercent = "Running", t.SamplePercent
		st.StartedAt = t.StartedAt.DeepCopy()
		if o.in.State.InTrial() && o.in.State.Record.Trial.StartedAt.Equal(&t.StartedAt) {
			st.Calls, st.Failures = o.obs.trialCalls.Calls, o.obs.trialCalls.Failures
		}
	}
	return st
}

package controller

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/halfopen"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
)

// The half-open trial (spec.halfOpen) as the reconciler wires it: the
// trial's calls from the signal, its two writes, what it reports and when
// it wants to be looked at again. The verdict is policy.TrialVerdict.

// trialCalls are the API server's calls to the webhook since the trial
// began, as of the signal's last read.
func (r *Reconciler) trialCalls(name string, obs policy.Observed) halfopen.Calls {
	if obs.Signal == nil {
		return halfopen.Calls{Unreadable: true, Message: "the API server signal is off"}
	}
	st, ok := r.Signals.Current(name)
	if !ok {
		st = *obs.Signal
	}
	c := halfopen.Calls{Calls: st.Calls, Failures: st.Failures, Failing: st.Failing, Unreadable: st.Unreadable, Message: st.Message}
	if obs.Ambiguous != "" {
		// Another configuration's webhook of the same name shares the
		// series: its calls are not this trial's.
		c.Unreadable, c.Message = true, obs.Ambiguous
	}
	return c
}

// writeTrial starts or ends the trial of own's circuit: one write of cfg.
func (r *Reconciler) writeTrial(ctx context.Context, own companion, cfg *circuit.Configuration, write policy.Write) error {
	rec := own.state.Record
	if rec == nil {
		return fmt.Errorf("%s webhook %s: no record", write, own.b.Spec.Target.WebhookName)
	}
	w := circuit.Writer{Client: r.Client}
	now := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
	if write == policy.WriteTrial {
		percent := int32(v1alpha1.DefaultHalfOpenSamplePercent)
		if h := own.b.Spec.Resolve().HalfOpen; h != nil {
			percent = h.SamplePercent
		}
		_, err := w.StartTrial(ctx, cfg, *rec, percent, now)
		return err
	}
	next := now
	if t := own.d.Trial; t != nil && !t.Next.IsZero() {
		next = metav1.NewTime(t.Next.Truncate(time.Second))
	}
	_, err := w.EndTrial(ctx, cfg, *rec, next)
	return err
}

// trialReported counts and announces a trial's step once its write landed.
func (r *Reconciler) trialReported(c companion, write policy.Write) {
	webhook, d := c.b.Spec.Target.WebhookName, c.d
	switch {
	case write == policy.WriteTrial:
		r.Metrics.Trial(c.b.Name, "started")
		r.event(c.b, "Normal", halfopen.ReasonTrialStarted, "Trial", "webhook %s: %s", webhook, d.Message)
	case write == policy.WriteEndTrial:
		r.Metrics.Trial(c.b.Name, "failed")
		r.event(c.b, "Warning", halfopen.ReasonFailed, "Trial", "%s: webhook %s: %s", d.Reason, webhook, d.Message)
	case write == policy.WriteClose && d.Trial != nil && d.Trial.Step == halfopen.Pass:
		r.Metrics.Trial(c.b.Name, "passed")
	case write == policy.WriteClose && d.Trial != nil && d.Trial.Step == halfopen.NoTraffic:
		r.Metrics.Trial(c.b.Name, "no_traffic")
	}
}

// trialRecheck is when to look at a breaker again: at its trial's next due
// time when that is sooner than the routine resync (nothing else wakes a
// breaker whose probes and signal stay the same).
func (r *Reconciler) trialRecheck(d policy.Decision, resync time.Duration) time.Duration {
	if d.Trial == nil || d.Trial.Next.IsZero() || d.Write != policy.WriteNone {
		return resync
	}
	return min(max(d.Trial.Next.Sub(r.Clock.Now()), 100*time.Millisecond)+10*time.Millisecond, resync)
}

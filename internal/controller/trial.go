package controller

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/halfopen"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
)

// writeTrial starts or ends the half-open trial of own's circuit
// (spec.halfOpen): one write of cfg.
func (r *Reconciler) writeTrial(ctx context.Context, w circuit.Writer, own companion, cfg *circuit.Configuration, write policy.Write) error {
	rec, v := own.state.Record, own.d.Trial
	if rec == nil || v == nil && write == policy.WriteTrial {
		return fmt.Errorf("%s webhook %s: no record or no trial", write, own.b.Spec.Target.WebhookName)
	}
	now := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
	if write == policy.WriteTrial {
		_, err := w.StartTrial(ctx, cfg, *rec, v.SamplePercent, now)
		return err
	}
	next := now // ended by a mode change: no wait
	if v != nil && !v.Next.IsZero() {
		next = metav1.NewTime(v.Next.Truncate(time.Second))
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

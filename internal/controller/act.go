package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/auditrun"
	"github.com/tripswitch-dev/tripswitch/internal/budget"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/schedule"
)

// act performs the decision's one write (with its companions', in the same
// patch), reports the status it implies, and says when to look again.
func (r *Reconciler) act(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, s step) (ctrl.Result, error) {
	d := s.d
	if d.Disarm != "" && d.Write != policy.WriteNone && b.Status.DisarmedReason != d.Disarm {
		// Remember the disarm before acting on the configuration: once the
		// record is dropped, only the status says that a human overrode
		// tripswitch during this outage, and a controller killed between
		// the two writes must not re-open the webhook over them.
		if err := r.persistDisarm(ctx, b, d.Disarm); err != nil {
			return r.retry(ctx, "breaker changed while its disarm was written; retrying", err)
		}
	}
	var others []companion
	if (d.Write == policy.WriteOpen && !r.Limit.On()) || d.Write == policy.WriteClose {
		others = r.companions(ctx, b, s.obs, d.Write)
	}
	after, fl, writeErr := r.writeWithFloor(ctx, b, spec, s, others)
	if errors.Is(writeErr, budget.ErrExhausted) {
		// The one path that writes refused what the decision asked for:
		// past the outage window's budget. The breaker disarms.
		d = policy.Refused(d, writeErr, s.in.Writers)
		s.d, writeErr = d, nil
		if err := r.persistDisarm(ctx, b, d.Disarm); err != nil {
			return r.retry(ctx, "breaker changed while its disarm was written; retrying", err)
		}
	}
	if d.Exhausted && (b.Status.Outage == nil || !b.Status.Outage.Exhausted) {
		r.Metrics.BudgetExhausted(b.Name)
	}
	if writeErr != nil && circuit.IsStale(writeErr) {
		r.Metrics.Conflict(b.Name)
		return r.retry(ctx, "webhook configuration changed since it was read; re-reading and deciding again", writeErr)
	}
	o := policy.Outcome{Spec: spec, Input: s.in, Decision: d, Observed: s.obs, After: after, WriteErr: writeErr,
		Now: metav1.NewTime(r.Clock.Now().Truncate(time.Second)), ClosedBy: r.memory.get(b.Name).closed, Floor: fl}
	rep, err := r.report(ctx, b, o)
	if err != nil {
		return r.retry(ctx, "breaker changed while its status was written; retrying", err)
	}
	if rep.deferred {
		// Decisions are waiting: this status goes after them.
		return ctrl.Result{RequeueAfter: schedule.ReportDelay, Priority: new(schedule.PriorityReport)}, nil
	}
	if writeErr != nil && !errors.Is(writeErr, circuit.ErrCannotBypass) {
		return ctrl.Result{}, writeErr
	}
	res, err := r.finish(ctx, b, spec, o)
	if rep.firstWait > 0 {
		res.RequeueAfter = min(res.RequeueAfter, rep.firstWait+10*time.Millisecond)
	}
	return res, err
}

// finish asks for the audits due, releases the finalizer when the decision
// allows it, and says when to look again.
func (r *Reconciler) finish(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, o policy.Outcome) (ctrl.Result, error) {
	if auditrun.Due(b, spec.Audit) {
		r.Audits.Request(b.Name)
	}
	if o.Decision.ReleaseFinalizer && o.WriteErr == nil {
		r.event(b, "Normal", policy.ReasonFinalizerReleased, "Delete", o.Decision.Message)
		if err := r.patchFinalizer(ctx, b, false); err != nil {
			return r.retry(ctx, "breaker changed while its finalizer was released; retrying", err)
		}
		r.forget(b.Name)
		return ctrl.Result{}, nil
	}
	// Looks again later are routine (priority 0), whatever brought this one.
	if o.Observed.Config == nil || !b.DeletionTimestamp.IsZero() {
		// Nothing is probed, so nothing else triggers a look at the target.
		return ctrl.Result{RequeueAfter: spec.Probe.Interval, Priority: new(0)}, nil
	}
	return ctrl.Result{RequeueAfter: policy.Recheck(o.Decision, r.Clock.Now(), resync), Priority: new(0)}, nil
}

// companion is a breaker whose circuit a patch writes: the one reconciled,
// or another breaker of the same configuration whose circuit opens (or
// closes) in the same patch.
type companion struct {
	b     *v1alpha1.WebhookCircuitBreaker
	d     policy.Decision
	state circuit.State // its webhook as read
}

// companions are the other breakers of b's configuration that make the same
// write now (policy.MayJoin, policy.Joins), read fresh when the cache lags
// behind this process's last write to them.
func (r *Reconciler) companions(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, obs policy.Observed, write policy.Write) []companion {
	t := b.Spec.Target
	if obs.Config == nil {
		return nil
	}
	var out []companion
	for _, name := range r.Targets.Users(t.Kind, t.ConfigurationName) {
		if name == b.Name {
			continue
		}
		o := &v1alpha1.WebhookCircuitBreaker{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, o); err != nil {
			continue
		}
		if lag, _ := r.lagging(o); lag {
			if err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, o); err != nil {
				continue
			}
		}
		if c, ok := r.companion(ctx, t, o, obs.Config, write); ok {
			out = append(out, c)
		}
	}
	return out
}

// companion decides whether o joins the patch of cfg that makes write.
func (r *Reconciler) companion(ctx context.Context, t v1alpha1.Target, o *v1alpha1.WebhookCircuitBreaker, cfg *circuit.Configuration, write policy.Write) (companion, bool) {
	if !policy.MayJoin(t, o) {
		return companion{}, false
	}
	webhook := o.Spec.Target.WebhookName
	obs := policy.Observed{Config: cfg, State: circuit.Inspect(cfg, webhook)}
	if obs.State.Index < 0 {
		return companion{}, false
	}
	var err error
	if obs.Conflict, err = r.conflictWinner(ctx, o); err != nil || obs.Conflict != "" {
		return companion{}, false // conflicted: never opened, in its own patch or another's
	}
	var ok bool
	if obs.Health, ok = r.Health.Observe(o.Name); !ok {
		return companion{}, false
	}
	d, ok := policy.Joins(write, o, obs)
	if !ok {
		return companion{}, false
	}
	if write == policy.WriteOpen {
		_, _, err = circuit.OpenPatch(cfg, webhook, v1alpha1.CircuitRecord{Breaker: o.Name, BreakerUID: o.UID, Action: d.Action})
	} else {
		_, err = circuit.ClosePatch(cfg, webhook, obs.State.Record)
	}
	return companion{b: o, d: d, state: obs.State}, err == nil
}

// write performs the decision's one write and returns the state it left.
// An open or a close also writes the companions' circuits, in the same
// patch; each is then reported as the breaker's own.
func (r *Reconciler) write(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, obs policy.Observed, d policy.Decision, others []companion) (circuit.State, error) {
	if d.Write == policy.WriteNone {
		return obs.State, nil
	}
	all := append([]companion{{b: b, d: d, state: obs.State}}, others...)
	if err := r.patch(ctx, obs.Config, d.Write, all); err != nil {
		return obs.State, err
	}
	r.configs.Wrote(b.Spec.Target.ConfigurationKey(), obs.Config.Object.GetResourceVersion())
	now := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
	for i, c := range all {
		in := ""
		if i > 0 {
			in = b.Name
		}
		r.wroteCircuit(ctx, c, d.Write, now, in)
	}
	return circuit.Inspect(obs.Config, b.Spec.Target.WebhookName), nil
}

// patch writes each circuit of all (the first the breaker's own) in one
// patch of cfg, counted first against each one's write budget.
func (r *Reconciler) patch(ctx context.Context, cfg *circuit.Configuration, write policy.Write, all []companion) error {
	w := circuit.Writer{Client: r.Client, Budget: r.ledger(cfg, all)}
	own := all[0]
	webhook := own.b.Spec.Target.WebhookName
	var recs []v1alpha1.CircuitRecord
	switch write {
	case policy.WriteOpen:
		at := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
		for _, c := range all {
			recs = append(recs, v1alpha1.CircuitRecord{Webhook: c.b.Spec.Target.WebhookName, Breaker: c.b.Name, BreakerUID: c.b.UID,
				Action: c.d.Action, OpenedAt: at, Reason: c.d.Message})
		}
		_, err := w.OpenAll(ctx, cfg, recs)
		return err
	case policy.WriteClose:
		if own.state.Record == nil {
			return fmt.Errorf("close webhook %s: no record", webhook)
		}
		for _, c := range all {
			rec := *c.state.Record
			rec.Webhook = c.b.Spec.Target.WebhookName
			recs = append(recs, rec)
		}
		return w.CloseAll(ctx, cfg, recs)
	case policy.WriteDrop:
		return w.Drop(ctx, cfg, webhook)
	case policy.WriteTrial, policy.WriteEndTrial:
		return r.writeTrial(ctx, w, own, cfg, write)
	}
	return nil
}

// wroteCircuit reports the write of c's circuit: metrics, the close's note,
// the log and the event; in names the breaker whose patch wrote it, if
// another.
func (r *Reconciler) wroteCircuit(ctx context.Context, c companion, write policy.Write, now metav1.Time, in string) {
	var openFor time.Duration
	if (write == policy.WriteClose || write == policy.WriteDrop) && c.state.Record != nil {
		openFor = r.Clock.Since(c.state.Record.OpenedAt.Time)
	}
	r.Metrics.Transition(c.b.Name, write, c.d.Reason, openFor)
	r.trialReported(c, write)
	if write == policy.WriteClose {
		r.closedBy(c.b.Name, policy.ClosedNote{OpenedAt: c.state.Record.OpenedAt, Reason: c.d.Reason, At: now})
	}
	webhook, inPatch := c.b.Spec.Target.WebhookName, ""
	if in == "" {
		log.FromContext(ctx).Info("wrote webhook configuration", "write", write, "reason", c.d.Reason, "message", c.d.Message)
	} else {
		inPatch = fmt.Sprintf(" (in %s's patch)", in)
		log.FromContext(ctx).Info("wrote a companion's circuit in the same patch", "write", write, "companion", c.b.Name,
			"companionWebhook", webhook, "reason", c.d.Reason, "message", c.d.Message)
	}
	switch write {
	case policy.WriteOpen:
		// Requests are now admitted without this webhook: a Warning.
		r.event(c.b, "Warning", "CircuitOpened", "Open", "%s: set %s on webhook %s%s: %s", c.d.Reason, c.d.Action, webhook, inPatch, c.d.Message)
	case policy.WriteClose:
		r.event(c.b, "Normal", "CircuitClosed", "Close", "%s: restored webhook %s%s: %s", c.d.Reason, webhook, inPatch, c.d.Message)
	}
	if in != "" {
		r.Requeue(c.b.Name) // its status mirrors what it now has
	}
}

func (r *Reconciler) event(b *v1alpha1.WebhookCircuitBreaker, typ, reason, action, note string, args ...any) {
	r.Recorder.Eventf(b, nil, typ, reason, action, note, args...)
}

// patchFinalizer adds or removes the finalizer with an optimistic lock, so a
// concurrent spec change makes it retry rather than be overwritten.
func (r *Reconciler) patchFinalizer(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, add bool) error {
	base := b.DeepCopy()
	before := b.ResourceVersion
	if add {
		controllerutil.AddFinalizer(b, Finalizer)
	} else {
		controllerutil.RemoveFinalizer(b, Finalizer)
	}
	if err := r.Client.Patch(ctx, b, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("update finalizer of breaker %s: %w", b.Name, err)
	}
	r.wrote(b, before)
	return nil
}

// persistDisarm writes the disarm alone to b's status, with an optimistic
// lock; the report that follows the write writes the rest.
func (r *Reconciler) persistDisarm(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, reason string) error {
	base := b.DeepCopy()
	before := b.ResourceVersion
	b.Status.DisarmedReason = reason
	if err := r.Client.Status().Patch(ctx, b, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("write the disarm of breaker %s: %w", b.Name, err)
	}
	r.wrote(b, before)
	return nil
}

// statusHeld says why a status was not written: deferred while decisions
// wait (see deferReport), or a new breaker's first status waiting for its
// probes' verdict (policy.FirstReportWait) for at most firstWait.
type statusHeld struct {
	deferred  bool
	firstWait time.Duration
}

// report writes the status if it changed, with its events
// (policy.ReportEvents), unless it waits (policy.FirstReportWait,
// policy.DetailOnly with the memory's detailWaits, deferReport).
func (r *Reconciler) report(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, o policy.Outcome) (statusHeld, error) {
	status := policy.NextStatus(b, o)
	if w := b.Status.Outage; w != nil && status.Outage == nil {
		// The outage is over: the API server's calls failed in it until
		// now, and a read after this one would count them afresh.
		r.Signals.Forget(b.Name, w.StartedAt.Time)
	}
	r.Metrics.SetStatus(b.Name, status)
	r.Decisions.SetOpen(b.Name, status.State == v1alpha1.StateOpen)
	now := r.Clock.Now()
	if wait := policy.FirstReportWait(b, o, r.memory.firstSeen(b.Name, now), now); wait > 0 {
		return statusHeld{firstWait: wait}, nil
	}
	// Nothing to write, or detail alone that waits for a change: nothing
	// to defer either.
	skip := equality.Semantic.DeepEqual(status, b.Status) || (policy.DetailOnly(b, status, o.Spec.Probe) && r.memory.detailWaits(b.Name, now))
	if skip {
		r.Decisions.Reported(b.Name)
	} else if r.deferReport(b, o, status) {
		r.Metrics.DeferredReport()
		return statusHeld{deferred: true}, nil
	}
	for _, e := range policy.ReportEvents(b, o.Decision, status) {
		r.event(b, e.Type, e.Reason, e.Action, "%s", e.Message)
	}
	if skip {
		r.forgetClosed(b.Name, status)
		return statusHeld{}, nil
	}
	before := b.ResourceVersion
	b.Status = status
	if err := r.Client.Status().Update(ctx, b); err != nil {
		return statusHeld{}, fmt.Errorf("update status of breaker %s: %w", b.Name, err)
	}
	r.wrote(b, before)
	r.memory.update(b.Name, func(m *memory) { m.reported = now })
	r.forgetClosed(b.Name, status)
	return statusHeld{}, nil
}

// deferReport reports whether b's status write waits because more breakers
// are queued for decisions than the workers serve at once: in a storm
// (every webhook failing at once) the writes that open and close circuits
// go first, and the status of each breaker follows when they are done
// (policy.StatusCanWait says which may).
func (r *Reconciler) deferReport(b *v1alpha1.WebhookCircuitBreaker, o policy.Outcome, status v1alpha1.WebhookCircuitBreakerStatus) bool {
	if policy.StatusCanWait(b, o, status) && r.Decisions.Defer(b.Name, r.Clock.Now()) {
		return true
	}
	r.Decisions.Reported(b.Name)
	return false
}

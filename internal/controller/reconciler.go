// Package controller wires probe results to circuit decisions to writes,
// status, events and metrics. The decision is internal/policy's pure
// Decide; the Reconciler is the thin shell that reads, decides, writes once
// and reports.
package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/auditrun"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/schedule"
)

const (
	// Finalizer holds a breaker's deletion until its webhook is restored.
	Finalizer = v1alpha1.Finalizer

	// resync re-reads a breaker's target even when no probe reports.
	resync = time.Minute
)

// HealthSource is where health comes from; *probe.Monitor implements it.
type HealthSource interface {
	Ensure(key string, s probe.Settings)
	Stop(key string)
	Observe(key string) (probe.Observation, bool)
}

// Reconciler reconciles WebhookCircuitBreakers.
type Reconciler struct {
	// Client reads breakers and writes their status and finalizers, and
	// patches webhook configurations.
	Client client.Client
	// APIReader reads uncached: webhook configurations whenever Targets has
	// no synced watch for them, and a breaker whose cached copy lags.
	APIReader client.Reader
	// Targets, if set, watches each target configuration by name and serves
	// its reads (*targetwatch.Targets); unset, every read goes through APIReader.
	Targets TargetSource
	Health  HealthSource
	// Recorder, if set, receives the breaker's events.
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	Metrics  *Metrics
	// Audits, if set, is asked for the audit of each closed window of a
	// breaker with spec.audit enabled.
	Audits AuditQueue
	// Signals, if set, keeps the API server signal of breakers with
	// spec.apiServerSignal enabled.
	Signals SignalSource
	// Requeue queues a breaker for reconciling; nil: a breaker waiting for
	// its configuration's write lock polls for it instead.
	Requeue func(breaker string)
	// Decisions, if set, counts the breakers queued for a decision; while
	// more wait than its Workers, status writes that can wait do (see
	// deferReport).
	Decisions *schedule.Decisions
	// TargetIndexed: Client's cache indexes breakers by TargetIndexField
	// (Setup registers it); unset, finding the breakers that name the same
	// webhook lists every breaker.
	TargetIndexed bool

	// approvals: the approved configuration names last read, per kind
	// (approval.go).
	approvals sync.Map

	once sync.Once
	// memory is what this process remembers of each breaker (memory.go).
	memory memories
	// configs is what it remembers of each target configuration: its
	// write lock, and its own last write to it (memory.go).
	configs sync.Map // kind/name -> *configMemory
}

// TargetSource serves reads of target configurations from their watches;
// *targetwatch.Targets implements it.
type TargetSource interface {
	// Get returns the configuration as its watch has it; cached is false
	// when there is no synced watch to serve it.
	Get(breaker string, kind v1alpha1.TargetKind, name string) (obj client.Object, found, cached bool)
	// Forget ends breaker's interest in its target's watch.
	Forget(breaker string)
	// Users are the breakers that target the configuration.
	Users(kind v1alpha1.TargetKind, name string) []string
	// Listing reports whether the configuration's watch runs but has not
	// listed it yet; when it has, it names its users as changed.
	Listing(kind v1alpha1.TargetKind, name string) bool
}

// AuditQueue takes requests for the audits of a breaker's closed windows;
// *auditrun.Runner implements it.
type AuditQueue interface{ Request(breaker string) }

// The collaborators of a Reconciler left unset.
type (
	uncachedTargets struct{}
	noAudits        struct{}
	noSignals       struct{}
	noEvents        struct{}
)

func (uncachedTargets) Get(string, v1alpha1.TargetKind, string) (client.Object, bool, bool) {
	return nil, false, false
}
func (uncachedTargets) Users(v1alpha1.TargetKind, string) []string                             { return nil }
func (uncachedTargets) Forget(string)                                                          {}
func (uncachedTargets) Listing(v1alpha1.TargetKind, string) bool                               { return false }
func (noAudits) Request(string)                                                                {}
func (noSignals) Ensure(string, apisignal.Settings) error                                      { return nil }
func (noSignals) Stop(string)                                                                  {}
func (noSignals) Observe(string) (apisignal.Status, bool)                                      { return apisignal.Status{}, false }
func (noEvents) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {}

// setDefaults puts no-op collaborators where none was given.
func (r *Reconciler) setDefaults() {
	if r.Targets == nil {
		r.Targets = uncachedTargets{}
	}
	if r.Audits == nil {
		r.Audits = noAudits{}
	}
	if r.Signals == nil {
		r.Signals = noSignals{}
	}
	if r.Recorder == nil {
		r.Recorder = noEvents{}
	}
}

// watchCurrent reports whether b's target is served by a watch that has
// shown this process's last write to it (or this process has written none):
// a decision on it then needs no fresh read. One on a watch that lags
// behind another breaker's patch a moment ago would be refused; one on a
// watch that lags behind someone else's write is refused too, by the
// resourceVersion every patch carries, and decided again.
func (r *Reconciler) watchCurrent(b *v1alpha1.WebhookCircuitBreaker) bool {
	t := b.Spec.Target
	obj, found, cached := r.Targets.Get(b.Name, t.Kind, t.ConfigurationName)
	if !cached || !found {
		return false
	}
	written := r.config(t).written()
	return written == "" || written == obj.GetResourceVersion()
}

// awaitWatch reports whether b should wait for its configuration's watch,
// which has started but not listed yet, rather than read the configuration
// from the API server: the list names b as changed when it is in (1,000
// breakers created or a controller restarted at once would otherwise cost
// 1,000 reads on top of the lists). Each breaker waits once, then reads: a
// watch that cannot list (RBAC does not approve the configuration) must not
// keep it from reporting why.
func (r *Reconciler) awaitWatch(b *v1alpha1.WebhookCircuitBreaker) bool {
	t := b.Spec.Target
	if _, _, cached := r.Targets.Get(b.Name, t.Kind, t.ConfigurationName); cached {
		r.memory.update(b.Name, func(m *memory) { m.awaited = false })
		return false
	}
	if !r.Targets.Listing(t.Kind, t.ConfigurationName) {
		return false
	}
	waited := false
	r.memory.update(b.Name, func(m *memory) { waited, m.awaited = m.awaited, true })
	return !waited
}

// watchWait is how long a breaker waits for a watch (its configuration's
// first list, or its own watch's event of this controller's last write)
// before it reads from the API server, if the watch does not wake it first.
const watchWait = 2 * time.Second

// lockedRetry is when a breaker that found its configuration's lock taken
// is looked at again if nothing woke it (Requeue unset, or a lost wake-up).
const lockedRetry = time.Second

// SignalSource keeps the API server signal; *apisignal.Tracker implements it.
type SignalSource interface {
	Ensure(breaker string, s apisignal.Settings) error
	Stop(breaker string)
	Observe(breaker string) (apisignal.Status, bool)
}

// Reconcile reads a breaker and its target, decides, performs at most one
// webhook write, and reports.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.once.Do(r.setDefaults)
	decision := r.Decisions.Take(req.Name)
	var b v1alpha1.WebhookCircuitBreaker
	if err := r.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get breaker %s: %w", req.Name, err)
	}
	if lag, behind := r.lagging(&b); lag {
		// The watch has not shown this controller's last write to the
		// breaker (its status or finalizer a moment ago): anything decided or
		// written on this version would be refused. Unless a decision waits
		// on it, wait for the watch's event of that write, which queues the
		// breaker again (a thousand breakers written at once would otherwise
		// cost a thousand reads); else read it fresh.
		if behind && !decision {
			return ctrl.Result{RequeueAfter: watchWait}, nil
		}
		if err := r.APIReader.Get(ctx, req.NamespacedName, &b); err != nil {
			if apierrors.IsNotFound(err) {
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("get breaker %s: %w", req.Name, err)
		}
		r.wrote(&b, "")
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("breaker", b.Name,
		"target", b.Spec.Target.ConfigurationKey(), "webhook", b.Spec.Target.WebhookName))
	deleting := !b.DeletionTimestamp.IsZero()
	if deleting && !controllerutil.ContainsFinalizer(&b, Finalizer) {
		return ctrl.Result{}, nil
	}
	if r.awaitWatch(&b) {
		return ctrl.Result{RequeueAfter: watchWait}, nil
	}
	spec := b.Spec.Resolve()
	obs, in, d, err := r.decide(ctx, &b, spec, deleting, false)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The finalizer goes on once tripswitch may read the target, which is
	// before it can write to it: a breaker it may not read holds nothing, and
	// deleting it needs no controller.
	if !deleting && !controllerutil.ContainsFinalizer(&b, Finalizer) && obs.NotApproved == "" {
		if err := r.patchFinalizer(ctx, &b, true); err != nil {
			return r.retry(ctx, "breaker changed while its finalizer was added; retrying", err)
		}
		return ctrl.Result{}, nil
	}
	if d.Write != policy.WriteNone {
		// Before a write, decide again, with the configuration's write lock
		// held: one writer per configuration at a time (the breakers of its
		// webhooks, opened by one outage, would otherwise race each other's
		// patches and all but one be refused), and never on a watch that has
		// not yet shown this process's last write to it (another breaker's a
		// moment ago): then the configuration is read fresh. A patch carries
		// the resourceVersion it was decided on, so a writer outside this
		// process makes it fail and be decided again.
		unlock := r.lockTarget(b.Spec.Target, b.Name)
		if unlock == nil {
			retry := lockedRetry
			if r.Requeue == nil {
				retry = 20 * time.Millisecond
			}
			return ctrl.Result{RequeueAfter: retry}, nil
		}
		defer unlock()
		if obs, in, d, err = r.decide(ctx, &b, spec, deleting, !r.watchCurrent(&b)); err != nil {
			return ctrl.Result{}, err
		}
	}
	if d.Disarm != "" && d.Write != policy.WriteNone && b.Status.DisarmedReason != d.Disarm {
		// Remember the disarm before acting on the configuration: once the
		// record is dropped, only the status says that a human overrode
		// tripswitch during this outage, and a controller killed between
		// the two writes must not re-open the webhook over them.
		if err := r.persistDisarm(ctx, &b, d.Disarm); err != nil {
			return r.retry(ctx, "breaker changed while its disarm was written; retrying", err)
		}
	}
	var others []companion
	if d.Write == policy.WriteOpen || d.Write == policy.WriteClose {
		others = r.companions(ctx, &b, obs, d.Write)
	}
	after, writeErr := r.write(ctx, &b, obs, d, others)
	if writeErr != nil && circuit.IsStale(writeErr) {
		r.Metrics.conflict(b.Name)
		return r.retry(ctx, "webhook configuration changed since it was read; re-reading and deciding again", writeErr)
	}
	o := policy.Outcome{Input: in, Decision: d, Observed: obs, After: after, WriteErr: writeErr, Now: metav1.NewTime(r.Clock.Now().Truncate(time.Second))}
	o.ClosedBy = r.memory.get(b.Name).closed
	deferred, err := r.report(ctx, &b, o)
	if err != nil {
		return r.retry(ctx, "breaker changed while its status was written; retrying", err)
	}
	if deferred {
		// Decisions are waiting: this status goes after them.
		return ctrl.Result{RequeueAfter: schedule.ReportDelay, Priority: new(schedule.PriorityReport)}, nil
	}
	if writeErr != nil && !errors.Is(writeErr, circuit.ErrCannotBypass) {
		return ctrl.Result{}, writeErr
	}
	if auditrun.Due(&b) {
		r.Audits.Request(b.Name)
	}
	if d.ReleaseFinalizer && writeErr == nil {
		r.event(&b, "Normal", policy.ReasonFinalizerReleased, "Delete", d.Message)
		if err := r.patchFinalizer(ctx, &b, false); err != nil {
			return r.retry(ctx, "breaker changed while its finalizer was released; retrying", err)
		}
		r.forget(b.Name)
		return ctrl.Result{}, nil
	}
	// Looks again later are routine (priority 0), whatever brought this one.
	if obs.Config == nil || deleting {
		// Nothing is probed, so nothing else triggers a look at the target.
		return ctrl.Result{RequeueAfter: spec.Probe.Interval, Priority: new(0)}, nil
	}
	return ctrl.Result{RequeueAfter: resync, Priority: new(0)}, nil
}

// expectedRetry is how soon an expected race is retried.
const expectedRetry = 100 * time.Millisecond

// retry handles an error from writing a breaker or its target. A conflict
// (someone wrote in between) or a NotFound (the breaker was deleted in
// between) is an expected race: one info line, no stack trace, and a retry
// that reads again. Anything else is returned for controller-runtime to log
// as a Reconciler error, because an operator should look at it.
func (r *Reconciler) retry(ctx context.Context, msg string, err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || circuit.IsStale(err) {
		log.FromContext(ctx).Info(msg, "error", err.Error())
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil // the breaker is gone; its deletion is the next event
		}
		return ctrl.Result{RequeueAfter: expectedRetry}, nil
	}
	return ctrl.Result{}, err
}

// decide is one step of reading and deciding: observe, gather the input,
// Decide. fresh reads the target from the API server rather than its watch.
func (r *Reconciler) decide(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, deleting, fresh bool) (policy.Observed, policy.Input, policy.Decision, error) {
	obs, err := r.observe(ctx, b, spec, deleting, fresh)
	if err != nil {
		return obs, policy.Input{}, policy.Decision{}, err
	}
	in := policy.NewInput(b, spec, obs)
	return obs, in, policy.Decide(in), nil
}

// observe reads the target, from its watch when it has synced (and fresh
// is false) or from the API server, and the health the monitor and the API
// server signal have gathered.
func (r *Reconciler) observe(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, deleting, fresh bool) (policy.Observed, error) {
	var obs policy.Observed
	if winner, err := r.conflictWinner(ctx, b); err != nil {
		return obs, err
	} else {
		obs.Conflict = winner
	}
	t := b.Spec.Target
	var obj client.Object
	found, cached := false, false
	if !fresh {
		obj, found, cached = r.Targets.Get(b.Name, t.Kind, t.ConfigurationName)
	}
	if !cached {
		var err error
		if obj, err = circuit.NewObject(t.Kind); err != nil {
			return obs, err
		}
		err = r.APIReader.Get(ctx, types.NamespacedName{Name: t.ConfigurationName}, obj)
		if apierrors.IsForbidden(err) {
			obs.NotApproved = r.notApproved(ctx, t)
			obs.State = circuit.State{Index: -1}
			return obs, nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return obs, fmt.Errorf("get %s %s: %w", t.Kind, t.ConfigurationName, err)
		}
		found = err == nil
	}
	if !found {
		obs.State = circuit.State{Index: -1}
		return obs, nil
	}
	var err error
	if obs.Config, err = circuit.View(obj); err != nil {
		return obs, err
	}
	obs.State = circuit.Inspect(obs.Config, b.Spec.Target.WebhookName)
	if obs.State.Index >= 0 && !deleting {
		settings := probeSettings(spec.Probe, obs.State.Webhook)
		if spec.Probe.Endpoints {
			if svc := obs.State.Webhook.ClientConfig.Service; svc != nil {
				eps, err := ServiceEndpoints(ctx, r.APIReader, svc)
				settings.Target.Endpoints = eps
				if err != nil {
					settings.Target.EndpointsErr = err.Error()
				}
			}
		}
		r.Health.Ensure(b.Name, settings)
	}
	obs.Health, _ = r.Health.Observe(b.Name)
	obs.Signal = r.observeSignal(b, spec, obs, deleting)
	if obs.Signal != nil {
		obs.Ambiguous = r.signalAmbiguity(ctx, b)
	}
	return obs, nil
}

// signalAmbiguity reports another breaker that names a webhook of the same
// name and type in another configuration: the API server's metrics key
// webhooks by name and type only, so the two signals are one.
func (r *Reconciler) signalAmbiguity(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker) string {
	t := b.Spec.Target
	list, err := r.named(ctx, WebhookIndexField, t.SignalKey())
	if err != nil {
		return fmt.Sprintf("cannot tell whether another breaker names a webhook %s: %v", t.WebhookName, err)
	}
	for _, o := range list {
		if ot := o.Spec.Target; o.Name != b.Name && ot.ConfigurationName != t.ConfigurationName {
			return fmt.Sprintf("breaker %s names a webhook %s in %s %s too; the API server counts calls by webhook name and type, "+
				"so the signal cannot tell the two apart and does not open this circuit on its own (the probes still do)",
				o.Name, t.WebhookName, ot.Kind, ot.ConfigurationName)
		}
	}
	return ""
}

// observeSignal keeps the API server signal of a breaker that enabled it.
func (r *Reconciler) observeSignal(b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, obs policy.Observed, deleting bool) *apisignal.Status {
	sig := spec.Signal
	if sig == nil || deleting || obs.State.Index < 0 {
		r.Signals.Stop(b.Name)
		return nil
	}
	settings := apisignal.Settings{Webhook: apisignal.Webhook{Name: b.Spec.Target.WebhookName, Type: circuit.MetricType(b.Spec.Target.Kind)},
		Window: sig.Window, MinimumCalls: int(sig.MinimumCalls), FailureRateThreshold: float64(sig.FailureRateThreshold)}
	if err := r.Signals.Ensure(b.Name, settings); err != nil {
		return &apisignal.Status{FailureRate: -1, Message: err.Error()}
	}
	st, ok := r.Signals.Observe(b.Name)
	if !ok {
		return nil
	}
	return &st
}

// companion is another breaker of the same configuration whose circuit
// opens (or closes) in the same patch.
type companion struct {
	b     *v1alpha1.WebhookCircuitBreaker
	d     policy.Decision
	state circuit.State // its webhook as read
}

// companions are the other breakers of b's configuration that make the same
// write now, each decided exactly as its own reconcile would decide on the
// configuration just read with the lock held (its fresh breaker, its own
// probes; without its API server signal, which can only open more and keep
// open longer, so a companion never opens or closes earlier than its own
// reconcile would): one outage trips a configuration's breakers together,
// one recovery heals them together, and one patch then writes them all
// instead of each in turn behind the lock. A breaker its own reconcile
// would not write now, or could not (no finalizer yet, being deleted, a
// Bypass that cannot apply, a change no longer intact), is left to it.
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
		ot := o.Spec.Target
		if ot.Kind != t.Kind || ot.ConfigurationName != t.ConfigurationName || ot.WebhookName == t.WebhookName ||
			!o.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(o, Finalizer) {
			continue
		}
		obsO := policy.Observed{Config: obs.Config, State: circuit.Inspect(obs.Config, ot.WebhookName)}
		if obsO.State.Index < 0 {
			continue
		}
		if w, err := r.conflictWinner(ctx, o); err != nil || w != "" {
			continue // conflicted: never opened, in its own patch or another's
		}
		var ok bool
		if obsO.Health, ok = r.Health.Observe(o.Name); !ok {
			continue
		}
		spec := o.Spec.Resolve()
		if write == policy.WriteClose && spec.Signal != nil {
			continue // its signal may still hold it open
		}
		d := policy.Decide(policy.NewInput(o, spec, obsO))
		if d.Write != write {
			continue
		}
		var err error
		if write == policy.WriteOpen {
			_, _, err = circuit.OpenPatch(obs.Config, ot.WebhookName, v1alpha1.CircuitRecord{Breaker: o.Name, BreakerUID: o.UID, Action: d.Action})
		} else {
			_, err = circuit.ClosePatch(obs.Config, ot.WebhookName, obsO.State.Record)
		}
		if err != nil {
			continue
		}
		out = append(out, companion{b: o, d: d, state: obsO.State})
	}
	return out
}

// write performs the decision's one write and returns the state it left.
// An open also opens the companions' circuits, in the same patch.
func (r *Reconciler) write(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, obs policy.Observed, d policy.Decision, others []companion) (circuit.State, error) {
	if d.Write == policy.WriteNone {
		return obs.State, nil
	}
	w := circuit.Writer{Client: r.Client}
	webhook := b.Spec.Target.WebhookName
	var err error
	switch d.Write {
	case policy.WriteOpen:
		at := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
		recs := []v1alpha1.CircuitRecord{{Webhook: webhook, Breaker: b.Name, BreakerUID: b.UID, Action: d.Action, OpenedAt: at, Reason: d.Message}}
		for _, c := range others {
			recs = append(recs, v1alpha1.CircuitRecord{Webhook: c.b.Spec.Target.WebhookName, Breaker: c.b.Name, BreakerUID: c.b.UID,
				Action: c.d.Action, OpenedAt: at, Reason: c.d.Message})
		}
		_, err = w.OpenAll(ctx, obs.Config, recs)
	case policy.WriteClose:
		if obs.State.Record == nil {
			return obs.State, fmt.Errorf("close webhook %s: no record", webhook)
		}
		own := *obs.State.Record
		own.Webhook = webhook
		recs := []v1alpha1.CircuitRecord{own}
		for _, c := range others {
			rec := *c.state.Record
			rec.Webhook = c.b.Spec.Target.WebhookName
			recs = append(recs, rec)
		}
		err = w.CloseAll(ctx, obs.Config, recs)
	case policy.WriteDrop:
		err = w.Drop(ctx, obs.Config, webhook)
	}
	if err != nil {
		return obs.State, err
	}
	r.config(b.Spec.Target).wrote(obs.Config.Object.GetResourceVersion())
	after := circuit.Inspect(obs.Config, webhook)
	var openFor time.Duration
	if d.Write != policy.WriteOpen && obs.State.Record != nil {
		openFor = r.Clock.Since(obs.State.Record.OpenedAt.Time)
	}
	r.Metrics.transition(b.Name, d.Write, d.Reason, openFor)
	now := metav1.NewTime(r.Clock.Now().Truncate(time.Second))
	if d.Write == policy.WriteClose {
		// Should its status write be deferred, the window still closes with this reason and time.
		r.closedBy(b.Name, policy.ClosedNote{OpenedAt: obs.State.Record.OpenedAt, Reason: d.Reason, At: now})
	}
	log.FromContext(ctx).Info("wrote webhook configuration", "write", d.Write, "reason", d.Reason, "message", d.Message)
	switch d.Write {
	case policy.WriteOpen:
		// Requests are now admitted without this webhook: a Warning.
		r.event(b, "Warning", "CircuitOpened", "Open", "%s: set %s on webhook %s: %s", d.Reason, d.Action, webhook, d.Message)
	case policy.WriteClose:
		r.event(b, "Normal", "CircuitClosed", "Close", "%s: restored webhook %s: %s", d.Reason, webhook, d.Message)
	}
	for _, c := range others {
		cw := c.b.Spec.Target.WebhookName
		var openFor time.Duration
		if d.Write == policy.WriteClose {
			openFor = r.Clock.Since(c.state.Record.OpenedAt.Time)
		}
		r.Metrics.transition(c.b.Name, d.Write, c.d.Reason, openFor)
		if d.Write == policy.WriteClose {
			r.closedBy(c.b.Name, policy.ClosedNote{OpenedAt: c.state.Record.OpenedAt, Reason: c.d.Reason, At: now})
		}
		log.FromContext(ctx).Info("wrote a companion's circuit in the same patch", "write", d.Write, "companion", c.b.Name,
			"companionWebhook", cw, "reason", c.d.Reason, "message", c.d.Message)
		if d.Write == policy.WriteOpen {
			r.event(c.b, "Warning", "CircuitOpened", "Open", "%s: set %s on webhook %s (in %s's patch): %s", c.d.Reason, c.d.Action, cw, b.Name, c.d.Message)
		} else {
			r.event(c.b, "Normal", "CircuitClosed", "Close", "%s: restored webhook %s (in %s's patch): %s", c.d.Reason, cw, b.Name, c.d.Message)
		}
		if r.Requeue != nil {
			r.Requeue(c.b.Name) // its status mirrors what it now has
		}
	}
	return after, nil
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

// report writes the status if it changed, and emits events for refusals the
// first time they happen; deferred when the write waits for decisions (see
// deferReport).
func (r *Reconciler) report(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, o policy.Outcome) (deferred bool, err error) {
	d := o.Decision
	status := policy.NextStatus(b, o)
	r.Metrics.setOpen(b.Name, status.State == v1alpha1.StateOpen)
	r.Decisions.SetOpen(b.Name, status.State == v1alpha1.StateOpen)
	if r.deferReport(b, o, status) {
		r.Metrics.deferredReport()
		return true, nil
	}
	r.emitConditionEvents(b, status)
	if d.Refused {
		// A refusal that leaves the breaker Ready: report it once, when it starts.
		if prev := meta.FindStatusCondition(b.Status.Conditions, policy.ConditionReady); prev == nil || prev.Reason != d.Reason {
			r.event(b, "Normal", d.Reason, "Refuse", "%s", d.Message)
		}
	}
	if status.TargetUID != b.Status.TargetUID && b.Status.TargetUID != "" {
		r.event(b, "Warning", policy.ReasonTargetRecreated, "Report", "%s %s was deleted and recreated (uid %s, was %s); any record of the old one is gone, starting fresh",
			b.Spec.Target.Kind, b.Spec.Target.ConfigurationName, status.TargetUID, b.Status.TargetUID)
	}
	if policy.RearmRequested(b) {
		r.event(b, "Normal", policy.ReasonRearmed, "Rearm", "re-armed by annotation %s=%s", policy.RearmAnnotation, b.Annotations[policy.RearmAnnotation])
	}
	if equality.Semantic.DeepEqual(status, b.Status) {
		r.forgetClosed(b.Name, status)
		return false, nil
	}
	before := b.ResourceVersion
	b.Status = status
	if err := r.Client.Status().Update(ctx, b); err != nil {
		return false, fmt.Errorf("update status of breaker %s: %w", b.Name, err)
	}
	r.wrote(b, before)
	r.forgetClosed(b.Name, status)
	return false, nil
}

// deferReport reports whether b's status write waits because more breakers
// are queued for decisions than the workers serve at once: in a storm
// (every webhook failing at once) the writes that open and close circuits
// go first, and the status of each breaker follows when they are done (see
// canWait for which do).
func (r *Reconciler) deferReport(b *v1alpha1.WebhookCircuitBreaker, o policy.Outcome, status v1alpha1.WebhookCircuitBreakerStatus) bool {
	if canWait(b, o, status) && r.Decisions.Defer(b.Name, r.Clock.Now()) {
		return true
	}
	r.Decisions.Reported(b.Name)
	return false
}

// canWait reports whether b's status write loses nothing by waiting: the
// circuit's truth is its record on the configuration, written already, and
// the status mirrors it later (with the record's times, and a close's
// reason kept in memory); a decision that must be remembered in the status
// (a disarm or re-arm, an external change, a refusal, a failed write, a
// recreated target) is written at once.
func canWait(b *v1alpha1.WebhookCircuitBreaker, o policy.Outcome, status v1alpha1.WebhookCircuitBreakerStatus) bool {
	d := o.Decision
	return d.Disarm == "" && !d.Rearm && !d.ExternalChange && !d.Refused && !d.ReleaseFinalizer &&
		o.WriteErr == nil && !policy.RearmRequested(b) && o.Observed.NotApproved == "" && status.TargetUID == b.Status.TargetUID &&
		!equality.Semantic.DeepEqual(status, b.Status)
}

// emitConditionEvents reports refusals and findings once, when their condition
// first turns up, not on every reconcile. A disarm is one of them: Ready turns
// False with reason Disarmed and the message says how it re-arms.
func (r *Reconciler) emitConditionEvents(b *v1alpha1.WebhookCircuitBreaker, next v1alpha1.WebhookCircuitBreakerStatus) {
	for _, typ := range []string{policy.ConditionReady, policy.ConditionTargetFound, policy.ConditionExternalChange, policy.ConditionProbeUnsupported, policy.ConditionAPIServerSignal, policy.ConditionControllerStarved} {
		c := meta.FindStatusCondition(next.Conditions, typ)
		if c == nil {
			continue
		}
		prev := meta.FindStatusCondition(b.Status.Conditions, typ)
		bad := (c.Status == metav1.ConditionFalse) == (typ == policy.ConditionReady || typ == policy.ConditionTargetFound || typ == policy.ConditionAPIServerSignal)
		if !bad || (prev != nil && prev.Status == c.Status && prev.Reason == c.Reason) {
			continue
		}
		r.event(b, "Warning", c.Reason, "Report", "%s", c.Message)
	}
}

// probeSettings are the monitor's settings for the breaker's webhook w.
func probeSettings(p v1alpha1.ResolvedProbe, w circuit.Webhook) probe.Settings {
	return probe.Settings{
		Target: probe.Target{
			ClientConfig: w.ClientConfig, Kind: p.Kind, HealthPath: p.HealthPath,
			Timeout: p.Timeout, ReviewVersions: w.ReviewVersions, EndpointMode: p.Endpoints,
		},
		Interval: p.Interval, FailureThreshold: p.FailureThreshold, SuccessThreshold: p.SuccessThreshold,
	}
}

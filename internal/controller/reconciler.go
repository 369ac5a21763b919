// Package controller wires probe results to circuit decisions to writes,
// status, events and metrics. The decision is internal/policy's pure
// Decide; the Reconciler is the thin shell that reads, decides, writes once
// and reports.
package controller

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/clusterlimit"
	"github.com/tripswitch-dev/tripswitch/internal/configlock"
	"github.com/tripswitch-dev/tripswitch/internal/metrics"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/schedule"
	"github.com/tripswitch-dev/tripswitch/internal/webhookchain"
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
	// Metrics, if set, records the breakers' metrics; unset, they go to a
	// set no registry exposes.
	Metrics *metrics.Metrics
	// Audits, if set, is asked for the audit of each closed window of a
	// breaker with spec.audit enabled.
	Audits AuditQueue
	// Signals, if set, keeps the API server signal of breakers with
	// spec.apiServerSignal enabled.
	Signals SignalSource
	// Requeue, if set, queues a breaker for reconciling; unset, a breaker
	// waiting for its configuration's write lock polls for it instead.
	Requeue func(breaker string)
	// Decisions, if set, counts the breakers queued for a decision; while
	// any waits, status writes that can wait do (see deferReport). Unset:
	// none is queued, and no status write waits.
	Decisions *schedule.Decisions
	// Limit, if set, is --max-open-circuits: every open is judged by it.
	// Unset: no limit.
	Limit *clusterlimit.Gate
	// RequestDeadline is the API server's request deadline the Preflight
	// condition judges a chain of webhooks against
	// (--apiserver-request-timeout); 0: kube-apiserver's default, 60s.
	RequestDeadline time.Duration
	// TargetIndexed: Client's cache indexes breakers by byTarget
	// (Setup registers it); unset, finding the breakers that name the same
	// webhook lists every breaker.
	TargetIndexed bool

	// approvals: the approved configuration names last read, per kind.
	approvals approvalCache

	once sync.Once
	// lockWait is when a breaker that found its configuration's write lock
	// taken is looked at again if nothing wakes it (setDefaults).
	lockWait time.Duration
	// memory is what this process remembers of each breaker (memory.go).
	memory memories
	// configs is what it remembers of each target configuration: its
	// write lock, and its own last write to it.
	configs configlock.Locks
	// chains judges each breaker's Preflight on the watched configurations.
	chains webhookchain.Watched
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
	// Generation and Each serve the preflight (webhookchain.Source).
	webhookchain.Source
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
func (uncachedTargets) Generation() uint64                                                     { return 0 }
func (uncachedTargets) Each(func(client.Object))                                               {}
func (noAudits) Request(string)                                                                {}
func (noSignals) Ensure(string, apisignal.Settings) error                                      { return nil }
func (noSignals) Stop(string)                                                                  {}
func (noSignals) Observe(string) (apisignal.Status, bool)                                      { return apisignal.Status{}, false }
func (noSignals) Current(string) (apisignal.Status, bool)                                      { return apisignal.Status{}, false }
func (noSignals) Forget(string, time.Time)                                                     {}
func (noEvents) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {}

// setDefaults puts no-op collaborators where none was given.
func (r *Reconciler) setDefaults() {
	if r.Metrics == nil {
		r.Metrics = metrics.Unregistered()
	}
	if r.Decisions == nil {
		r.Decisions = &schedule.Decisions{}
	}
	if r.Limit == nil {
		r.Limit = &clusterlimit.Gate{}
	}
	// A breaker that found its configuration's write lock taken is queued
	// again at its release (Requeue), and looks again after lockedRetry in
	// case that wake-up is lost; with nothing to queue it, it polls.
	r.lockWait = lockedRetry
	if r.Requeue == nil {
		r.Requeue = func(string) {}
		r.lockWait = lockPoll
	}
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

// SignalSource keeps the API server signal; *apisignal.Tracker implements it.
type SignalSource interface {
	Ensure(breaker string, s apisignal.Settings) error
	Stop(breaker string)
	Observe(breaker string) (apisignal.Status, bool)
	// Current is the signal as of the last read: a trial is judged on it.
	Current(breaker string) (apisignal.Status, bool)
	// Forget drops the calls counted so far once the outage that began at
	// began ended: they are that outage's, not evidence of a new one.
	Forget(breaker string, began time.Time)
}

// Reconcile reads a breaker and its target, decides, performs at most one
// webhook write, and reports: observe, decide, limit, act, top to bottom.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.once.Do(r.setDefaults)
	// Observe: the breaker, fresh if the cache lags behind this process.
	b, wait, err := r.readBreaker(ctx, req)
	if b == nil || err != nil {
		return ctrl.Result{RequeueAfter: wait}, err
	}
	r.memory.firstSeen(b.Name, r.Clock.Now()) // a new breaker's first status waits from here at most
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("breaker", b.Name,
		"target", b.Spec.Target.ConfigurationKey(), "webhook", b.Spec.Target.WebhookName))
	deleting := !b.DeletionTimestamp.IsZero()
	if deleting && !controllerutil.ContainsFinalizer(b, Finalizer) {
		return ctrl.Result{}, nil
	}
	if r.awaitWatch(b) {
		return ctrl.Result{RequeueAfter: watchWait}, nil
	}
	// Decide, on the target as its watch has it if that has shown this
	// process's last write to it, else as the API server has it.
	spec := b.Spec.Resolve()
	s, err := r.decide(ctx, b, spec, r.readFor(b))
	if err != nil {
		return ctrl.Result{}, err
	}
	// The finalizer goes on once tripswitch may read the target, which is
	// before it can write to it: a breaker it may not read holds nothing, and
	// deleting it needs no controller.
	if !deleting && !controllerutil.ContainsFinalizer(b, Finalizer) && s.obs.NotApproved == "" {
		if err := r.patchFinalizer(ctx, b, true); err != nil {
			return r.retry(ctx, "breaker changed while its finalizer was added; retrying", err)
		}
		return ctrl.Result{}, nil
	}
	if s.d.Write != policy.WriteNone {
		// Before a write, decide again, with the configuration's write lock
		// held (lockTarget), and never on a watch that has not yet shown
		// this process's last write to it (another breaker's a moment ago):
		// then the configuration is read fresh. A patch carries the
		// resourceVersion it was decided on, so a writer outside this
		// process makes it fail and be decided again.
		unlock := r.lockTarget(b.Spec.Target, b.Name)
		if unlock == nil {
			return ctrl.Result{RequeueAfter: r.lockWait}, nil
		}
		defer unlock()
		if s, err = r.decide(ctx, b, spec, r.readFor(b)); err != nil {
			return ctrl.Result{}, err
		}
	}
	// Limit: --max-open-circuits judges an open, and holds its place
	// through the open's write.
	var release func()
	s.d, release = r.Limit.Judge(ctx, b, s.d, r.Clock.Now())
	defer release()
	// Act: write, report, requeue.
	return r.act(ctx, b, spec, s)
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

package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// watchWait is how long a breaker waits for a watch (its configuration's
// first list, or its own watch's event of this controller's last write)
// before it reads from the API server, if the watch does not wake it first.
const watchWait = 2 * time.Second

// lockedRetry is when a breaker that found its configuration's lock taken
// is looked at again if nothing woke it (a lost wake-up); lockPoll, when
// nothing can (Requeue unset).
const (
	lockedRetry = time.Second
	lockPoll    = 20 * time.Millisecond
)

// readBreaker reads the breaker named by req from the cache. When the cache
// has not shown this controller's last write to it (its status or
// finalizer a moment ago), anything decided or written on that version
// would be refused: unless a decision waits on it, it waits for the watch's
// event of that write, which queues the breaker again (a thousand breakers
// written at once would otherwise cost a thousand reads); else it reads it
// fresh. nil: nothing to do now, or again after wait; a breaker that is
// gone is forgotten.
func (r *Reconciler) readBreaker(ctx context.Context, req ctrl.Request) (*v1alpha1.WebhookCircuitBreaker, time.Duration, error) {
	decision := r.Decisions.Take(req.Name)
	var b v1alpha1.WebhookCircuitBreaker
	if err := r.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
			return nil, 0, nil
		}
		return nil, 0, fmt.Errorf("get breaker %s: %w", req.Name, err)
	}
	lag, behind := r.lagging(&b)
	if lag && behind && !decision {
		// Mark the wait before looking again: the event may have come
		// since the read, and the watch's filter passes it only once the
		// mark is there (breakerEvents).
		r.await(b.Name, true)
		if err := r.Client.Get(ctx, req.NamespacedName, &b); err == nil {
			lag, behind = r.lagging(&b)
		}
	}
	if !lag || !behind || decision {
		r.await(b.Name, false)
	}
	switch {
	case !lag:
		return &b, 0, nil
	case behind && !decision:
		return nil, watchWait, nil
	}
	if err := r.APIReader.Get(ctx, req.NamespacedName, &b); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, 0, nil
		}
		return nil, 0, fmt.Errorf("get breaker %s: %w", req.Name, err)
	}
	r.wrote(&b, "")
	return &b, 0, nil
}

// readFrom says where a decision reads its target configuration.
type readFrom int

const (
	// fromWatch reads it from its watch when that has synced, else from
	// the API server.
	fromWatch readFrom = iota
	// fromAPIServer always reads it from the API server.
	fromAPIServer
)

// readFor is where a decision on b reads its configuration: its watch, if
// that has shown this process's last write to it; else the API server.
func (r *Reconciler) readFor(b *v1alpha1.WebhookCircuitBreaker) readFrom {
	if r.watchCurrent(b) {
		return fromWatch
	}
	return fromAPIServer
}

// watchCurrent reports whether b's target is served by a watch that has
// shown this process's last write to it (or this process has written none):
// a decision on it then needs no fresh read. One on a watch that lags
// behind this process's write would be refused if it wrote, and if it did
// not, its status would go back in time: the record this process wrote a
// moment ago gone, as if someone had undone it. One on a watch that lags
// behind someone else's write is refused by the resourceVersion every patch
// carries, and decided again.
func (r *Reconciler) watchCurrent(b *v1alpha1.WebhookCircuitBreaker) bool {
	t := b.Spec.Target
	obj, found, cached := r.Targets.Get(b.Name, t.Kind, t.ConfigurationName)
	if !cached {
		return false
	}
	written := r.configs.Written(t.ConfigurationKey())
	if !found || written == "" {
		return true // gone since (a watch lists before it serves), or never written
	}
	// Resource versions are comparable (KEP-5504, GA in 1.35): a watch
	// that has moved past the write (someone wrote after it) has shown it.
	cmp, err := resourceversion.CompareResourceVersion(obj.GetResourceVersion(), written)
	if err != nil {
		return written == obj.GetResourceVersion()
	}
	return cmp >= 0
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

// step is one observation and the decision on it.
type step struct {
	obs policy.Observed
	in  policy.Input
	d   policy.Decision
}

// decide observes and decides (policy.Decide).
func (r *Reconciler) decide(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, from readFrom) (step, error) {
	obs, err := r.observe(ctx, b, spec, from)
	if err != nil {
		return step{obs: obs}, err
	}
	in := policy.NewInput(b, spec, obs)
	policy.Clocked(&in, spec, obs, r.Clock.Now())
	return step{obs: obs, in: in, d: policy.Decide(in)}, nil
}

// observe reads the target, and the health the monitor and the API server
// signal have gathered, and whether an older breaker owns the webhook.
func (r *Reconciler) observe(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, from readFrom) (policy.Observed, error) {
	obs := policy.Observed{State: circuit.State{Index: -1}}
	var err error
	if obs.Conflict, err = r.conflictWinner(ctx, b); err != nil {
		return obs, err
	}
	obj, err := r.readTarget(ctx, b, from, &obs)
	if err != nil || obj == nil {
		return obs, err
	}
	if obs.Config, err = circuit.View(obj); err != nil {
		return obs, err
	}
	obs.State = circuit.Inspect(obs.Config, b.Spec.Target.WebhookName)
	obs.Closed = r.memory.get(b.Name).closed
	deleting := !b.DeletionTimestamp.IsZero()
	if obs.State.Index >= 0 && !deleting {
		r.Health.Ensure(b.Name, r.probeSettings(ctx, spec.Probe, obs.State.Webhook))
		chain := r.preflight(b.Name, obs.Config, obs.State.Webhook)
		obs.Chain = &chain
	}
	obs.Health, _ = r.Health.Observe(b.Name)
	obs.Signal = r.observeSignal(b, spec, obs)
	if obs.Signal != nil {
		obs.Ambiguous = r.signalAmbiguity(ctx, b)
	}
	if obs.State.InTrial() { // judged on the signal's last read, not the one shown
		cur, ok := r.Signals.Current(b.Name)
		obs.TrialCalls = policy.TrialCalls(ok && obs.Signal != nil, cur, obs.Ambiguous)
	}
	return obs, nil
}

// readTarget reads b's configuration: from its watch when that has synced
// (and from allows), else from the API server. nil: it is missing, or
// tripswitch may not read it (obs.NotApproved says what to change).
func (r *Reconciler) readTarget(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, from readFrom, obs *policy.Observed) (client.Object, error) {
	t := b.Spec.Target
	if from == fromWatch {
		if obj, found, cached := r.Targets.Get(b.Name, t.Kind, t.ConfigurationName); cached {
			if !found {
				return nil, nil
			}
			return obj, nil
		}
	}
	obj, err := circuit.NewObject(t.Kind)
	if err != nil {
		return nil, err
	}
	err = r.APIReader.Get(ctx, types.NamespacedName{Name: t.ConfigurationName}, obj)
	switch {
	case apierrors.IsForbidden(err):
		obs.NotApproved = r.approvals.notApproved(ctx, r.Client, r.Clock.Now(), t)
		return nil, nil
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get %s %s: %w", t.Kind, t.ConfigurationName, err)
	}
	return obj, nil
}

// signalAmbiguity reports another breaker that names a webhook of the same
// name and type in another configuration: the API server's metrics key
// webhooks by name and type only, so the two signals are one.
func (r *Reconciler) signalAmbiguity(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker) string {
	t := b.Spec.Target
	list, err := listBreakers(ctx, r.Client, r.TargetIndexed, byWebhook, t.SignalKey())
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
func (r *Reconciler) observeSignal(b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, obs policy.Observed) *apisignal.Status {
	sig := spec.Signal
	if sig == nil || !b.DeletionTimestamp.IsZero() || obs.State.Index < 0 {
		r.Signals.Stop(b.Name)
		return nil
	}
	settings := apisignal.Settings{Webhook: apisignal.WebhookID{Name: b.Spec.Target.WebhookName, Type: circuit.MetricType(b.Spec.Target.Kind)},
		Window: sig.Window, MinimumCalls: int(sig.MinimumCalls), FailureRateThreshold: float64(sig.FailureRateThreshold)}
	if rec := obs.State.Record; rec != nil && rec.Trial != nil {
		settings.From = rec.Trial.StartedAt.Time // a trial counts its own calls only
	}
	if err := r.Signals.Ensure(b.Name, settings); err != nil {
		return &apisignal.Status{FailureRate: -1, Message: err.Error()}
	}
	st, ok := r.Signals.Observe(b.Name)
	if !ok {
		return nil
	}
	return &st
}

// probeSettings are the monitor's settings for the breaker's webhook w,
// with the Service's ready endpoints when it probes each of them.
func (r *Reconciler) probeSettings(ctx context.Context, p v1alpha1.ResolvedProbe, w circuit.Webhook) probe.Settings {
	settings := probe.Settings{
		Target: probe.Target{
			ClientConfig: w.ClientConfig, Kind: p.Kind, HealthPath: p.HealthPath,
			Timeout: p.Timeout, ReviewVersions: w.ReviewVersions, EndpointMode: p.Endpoints,
		},
		Interval: p.Interval, FailureThreshold: p.FailureThreshold, SuccessThreshold: p.SuccessThreshold,
	}
	if svc := w.ClientConfig.Service; p.Endpoints && svc != nil {
		eps, err := serviceEndpoints(ctx, r.APIReader, svc)
		settings.Target.Endpoints = eps
		if err != nil {
			settings.Target.EndpointsErr = err.Error()
		}
	}
	return settings
}

package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/auditrun"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/targetwatch"
)

// DefaultMaxConcurrentReconciles is how many breakers are reconciled at
// once unless told otherwise (--max-concurrent-reconciles): enough that one
// outage's writes to many configurations do not queue behind each other.
const DefaultMaxConcurrentReconciles = 32

// Options configure Setup.
type Options struct {
	// Prober checks webhook health.
	Prober probe.Prober
	// Registerer receives the metrics; nil means none are registered.
	Registerer prometheus.Registerer
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// MaxConcurrentReconciles defaults to DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// Reviewer sends audit re-reviews; nil means the Prober if it is a
	// *probe.HTTPProber, else a new one.
	Reviewer audit.Reviewer
	// SignalInterval is how often the API server's /metrics is read for
	// breakers with spec.apiServerSignal; default 5s.
	SignalInterval time.Duration
	// Requester is the user the controller runs as (identity.Username); the
	// audit's re-reviews name it. Set the HTTPProber's Requester to it too.
	Requester string
}

// queueRef hands the controller's workqueue, once it starts, to the probe
// monitor and the target watches: they add breakers to it directly, so no
// notification is ever dropped (with reconciles only on change, a dropped
// one would not come again) and a breaker queued twice is reconciled once.
type queueRef struct {
	mu sync.Mutex
	q  workqueue.TypedRateLimitingInterface[reconcile.Request]
}

func (r *queueRef) start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	r.mu.Lock()
	r.q = q
	r.mu.Unlock()
	return nil
}

func (r *queueRef) add(breaker string) {
	r.mu.Lock()
	q := r.q
	r.mu.Unlock()
	if q != nil {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: breaker}})
	}
}

// Setup adds the probe monitor and the breaker controller to mgr. Both run
// only on the elected leader.
func Setup(mgr ctrl.Manager, opts Options) (*Reconciler, error) {
	if opts.Prober == nil {
		return nil, fmt.Errorf("controller setup: Options.Prober is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	var metrics *Metrics
	if opts.Registerer != nil {
		var err error
		if metrics, err = NewMetrics(opts.Registerer); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	queue := &queueRef{}
	enqueue := queue.add
	// Every probe is measured; only a probe that changed something is
	// reconciled, so steady breakers cost no reconciles and no API requests.
	monitor := probe.NewMonitor(opts.Prober, opts.Clock, func(key string, res probe.Result, changed bool) {
		metrics.ObserveProbe(key, res)
		if changed {
			enqueue(key)
		}
	})
	if err := mgr.Add(monitor); err != nil {
		return nil, fmt.Errorf("add probe monitor: %w", err)
	}
	// The target watches carry one small object each: without gzip they do
	// not keep a 32 KiB decompression window per watch.
	watchCfg := rest.CopyConfig(mgr.GetConfig())
	watchCfg.DisableCompression = true
	cs, err := kubernetes.NewForConfig(watchCfg)
	if err != nil {
		return nil, fmt.Errorf("create clientset: %w", err)
	}
	targets := targetwatch.New(cs, enqueue)
	if err := mgr.Add(targets); err != nil {
		return nil, fmt.Errorf("add target watches: %w", err)
	}
	reviewer := opts.Reviewer
	if reviewer == nil {
		if hp, ok := opts.Prober.(*probe.HTTPProber); ok {
			reviewer = hp
		} else {
			reviewer = &probe.HTTPProber{}
		}
	}
	audits := &auditrun.Runner{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Config: mgr.GetConfig(), Reviewer: reviewer,
		Requester: opts.Requester, Recorder: mgr.GetEventRecorder("tripswitch"), Clock: opts.Clock, Done: metrics.setAudit,
	}
	if err := mgr.Add(audits); err != nil {
		return nil, fmt.Errorf("add audit runner: %w", err)
	}
	if opts.SignalInterval <= 0 {
		opts.SignalInterval = 5 * time.Second
	}
	signals := &apisignal.Tracker{Source: apisignal.FromAPIServer(cs.CoreV1().RESTClient()), Interval: opts.SignalInterval,
		Clock: opts.Clock, Changed: enqueue}
	if err := mgr.Add(signals); err != nil {
		return nil, fmt.Errorf("add api server signal: %w", err)
	}
	r := &Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Targets:   targets,
		Health:    monitor,
		Recorder:  mgr.GetEventRecorder("tripswitch"),
		Clock:     opts.Clock,
		Metrics:   metrics,
		Audits:    audits,
		Signals:   signals,
		Requeue:   enqueue,
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.WebhookCircuitBreaker{}).
		WatchesRawSource(source.Func(queue.start)).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
		Named("webhookcircuitbreaker").
		Complete(r)
	if err != nil {
		return nil, fmt.Errorf("build controller: %w", err)
	}
	return r, nil
}

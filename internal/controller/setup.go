package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/auditrun"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/schedule"
	"github.com/tripswitch-dev/tripswitch/internal/stall"
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
	// Stalls measures how long the controller could not run, so that a
	// probe timeout it caused is discarded; nil means a new stall.Watch of
	// the process's own cgroup.
	Stalls *stall.Watch
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
	queue := &schedule.Queue{}
	enqueue := queue.Add
	decisions := &schedule.Decisions{Workers: opts.MaxConcurrentReconciles}
	// Every probe is measured; only a probe that changed something is
	// reconciled, so steady breakers cost no reconciles and no API requests.
	// A verdict that may open or close a circuit goes first: when every
	// webhook fails at once, the writes that fail them open are not queued
	// behind a thousand status reports.
	monitor := probe.NewMonitor(opts.Prober, opts.Clock, func(key string, res probe.Result, c probe.Change) {
		metrics.ObserveProbe(key, res)
		switch c {
		case probe.DecisionChange:
			decisions.Record(key, res.Status == probe.Unhealthy)
			queue.AddAt(key, schedule.PriorityDecision)
		case probe.ReportChange:
			queue.AddAt(key, schedule.PriorityReport)
		}
	})
	if opts.Stalls == nil {
		opts.Stalls = stall.New(stall.Options{})
	}
	monitor.Stalls = opts.Stalls
	if hp, ok := opts.Prober.(*probe.HTTPProber); ok && hp.Pauses == nil {
		hp.Pauses = opts.Stalls
	}
	if err := mgr.Add(opts.Stalls); err != nil {
		return nil, fmt.Errorf("add stall watch: %w", err)
	}
	if opts.Registerer != nil {
		if err := RegisterStalls(opts.Registerer, opts.Stalls); err != nil {
			return nil, fmt.Errorf("register stall metrics: %w", err)
		}
	}
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
	recorder, err := schedule.EventRecorder(mgr, cs)
	if err != nil {
		return nil, err
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
		Requester: opts.Requester, Recorder: recorder, Clock: opts.Clock, Done: metrics.setAudit,
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
		Recorder:  recorder,
		Clock:     opts.Clock,
		Metrics:   metrics,
		Audits:    audits,
		Signals:   signals,
		Requeue:   enqueue,
		Decisions: decisions,
		// The breakers naming one webhook: who owns it (conflict.go).
		TargetIndexed: true,
	}
	if err := IndexTarget(context.Background(), mgr); err != nil {
		return nil, err
	}
	err = r.watchPeers(ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.WebhookCircuitBreaker{})).
		WatchesRawSource(source.Func(queue.Start)).
		// The priority queue (controller-runtime's default, asked for
		// explicitly because decisions depend on it) serves decisions first.
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles, UsePriorityQueue: new(true)}).
		Named("webhookcircuitbreaker").
		Complete(r)
	if err != nil {
		return nil, fmt.Errorf("build controller: %w", err)
	}
	return r, nil
}

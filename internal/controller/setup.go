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
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/auditrun"
	"github.com/tripswitch-dev/tripswitch/internal/clusterlimit"
	"github.com/tripswitch-dev/tripswitch/internal/metrics"
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
	// Requester is the user the controller runs as (cmd/tripswitch asks
	// the API server): the probes' synthetic reviews (an HTTPProber without
	// a Requester of its own) and the audit's re-reviews name it.
	Requester string
	// Stalls measures how long the controller could not run, so that a
	// probe timeout it caused is discarded; nil means a new stall.Watch of
	// the process's own cgroup.
	Stalls *stall.Watch
	// MaxOpenCircuits is --max-open-circuits: how many circuits may be open
	// at once in the cluster (0: no limit).
	MaxOpenCircuits int
	// RequestDeadline is --apiserver-request-timeout: the deadline the
	// Preflight condition judges chains of webhooks against (0: 60s).
	RequestDeadline time.Duration
}

// Setup adds the controller and the runnables that feed it to mgr: the
// stall watch, the probe monitor, the target watches, the event
// broadcaster, the audit runner and the API server signal. All run only on
// the elected leader.
func Setup(mgr ctrl.Manager, opts Options) (*Reconciler, error) {
	if opts.Prober == nil {
		return nil, fmt.Errorf("controller setup: Options.Prober is required")
	}
	opts.setDefaults()
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: opts.Clock,
		// The breakers naming one webhook: who owns it (conflict.go).
		TargetIndexed: true, Limit: &clusterlimit.Gate{Max: opts.MaxOpenCircuits, Reader: mgr.GetAPIReader()},
		RequestDeadline: opts.RequestDeadline}
	queue := &schedule.Queue{}
	r.Requeue = queue.Add
	r.Decisions = &schedule.Decisions{}
	if opts.Registerer != nil {
		var err error
		if r.Metrics, err = metrics.New(opts.Registerer); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
		if err := metrics.RegisterStalls(opts.Registerer, opts.Stalls); err != nil {
			return nil, fmt.Errorf("register stall metrics: %w", err)
		}
	}
	r.once.Do(r.setDefaults) // before the runnables take r.Metrics
	if err := r.addRunnables(mgr, opts, queue); err != nil {
		return nil, err
	}
	if err := indexBreakers(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	err := r.watchPeers(ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.WebhookCircuitBreaker{}, builder.WithPredicates(r.breakerEvents()))).
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

// setDefaults fills in what o leaves unset, and hands the HTTPProber the
// stall watch and the requester.
func (o *Options) setDefaults() {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if o.Stalls == nil {
		o.Stalls = stall.New(stall.Options{})
	}
	if o.SignalInterval <= 0 {
		o.SignalInterval = 5 * time.Second
	}
	hp, ok := o.Prober.(*probe.HTTPProber)
	if ok && hp.Pauses == nil {
		hp.Pauses = o.Stalls
	}
	if ok && hp.Requester == "" {
		hp.Requester = o.Requester
	}
	if o.Reviewer == nil {
		if ok {
			o.Reviewer = hp
		} else {
			o.Reviewer = &probe.HTTPProber{}
		}
	}
}

// addRunnables makes r's collaborators and adds them to mgr.
func (r *Reconciler) addRunnables(mgr ctrl.Manager, opts Options, queue *schedule.Queue) error {
	// Every probe is measured; only a probe that changed something is
	// reconciled, so steady breakers cost no reconciles and no API requests.
	// A verdict that may open or close a circuit goes first: when every
	// webhook fails at once, the writes that fail them open are not queued
	// behind a thousand status reports.
	monitor := probe.NewMonitor(opts.Prober, opts.Clock, func(key string, res probe.Result, c probe.Change) {
		r.Metrics.ObserveProbe(key, res)
		switch c {
		case probe.DecisionChange:
			r.Decisions.Record(key, res.Status == probe.Unhealthy)
			queue.AddAt(key, schedule.PriorityDecision)
		case probe.ReportChange:
			queue.AddAt(key, schedule.PriorityReport)
		}
	})
	monitor.Stalls = opts.Stalls
	r.Health = monitor
	// The target watches carry one small object each: without gzip they do
	// not keep a 32 KiB decompression window per watch.
	watchCfg := rest.CopyConfig(mgr.GetConfig())
	watchCfg.DisableCompression = true
	cs, err := kubernetes.NewForConfig(watchCfg)
	if err != nil {
		return fmt.Errorf("create clientset: %w", err)
	}
	targets := targetwatch.New(cs, r.Requeue)
	r.Targets = targets
	if r.Recorder, err = schedule.EventRecorder(mgr, cs); err != nil {
		return err
	}
	audits := &auditrun.Runner{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Config: mgr.GetConfig(), Reviewer: opts.Reviewer,
		Requester: opts.Requester, Recorder: r.Recorder, Clock: opts.Clock, Done: r.Metrics.SetAudit,
	}
	r.Audits = audits
	signals := &apisignal.Tracker{Source: apisignal.FromAPIServer(cs.CoreV1().RESTClient()), Interval: opts.SignalInterval,
		Clock: opts.Clock, Changed: r.Requeue}
	r.Signals = signals
	for _, run := range []struct {
		what string
		r    manager.Runnable
	}{{"stall watch", opts.Stalls}, {"probe monitor", monitor}, {"target watches", targets}, {"audit runner", audits}, {"api server signal", signals}} {
		if err := mgr.Add(run.r); err != nil {
			return fmt.Errorf("add %s: %w", run.what, err)
		}
	}
	return nil
}

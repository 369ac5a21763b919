package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/auditrun"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
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

func (r *queueRef) add(breaker string) { r.addAt(breaker, 0) }

// addAt queues breaker at priority p: controller-runtime's queue serves
// higher priorities first, and raises an item queued lower (FIFO within a
// priority).
func (r *queueRef) addAt(breaker string, p int) {
	r.mu.Lock()
	q := r.q
	r.mu.Unlock()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: breaker}}
	switch pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); {
	case ok:
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, req)
	case q != nil:
		q.Add(req)
	}
}

// The queue priorities of a breaker's reconciles. Watch events and
// resyncs are 0.
const (
	// priorityDecision: a probe verdict reached a threshold, so the
	// reconcile may open or close a circuit.
	priorityDecision = 100
	// priorityReport: only the status is behind (a deferred status write, or
	// a probe change no decision acts on).
	priorityReport = handler.LowPriority
)

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
	decisions := &Decisions{Workers: opts.MaxConcurrentReconciles}
	// Every probe is measured; only a probe that changed something is
	// reconciled, so steady breakers cost no reconciles and no API requests.
	// A verdict that may open or close a circuit goes first: when every
	// webhook fails at once, the writes that fail them open are not queued
	// behind a thousand status reports.
	monitor := probe.NewMonitor(opts.Prober, opts.Clock, func(key string, res probe.Result, c probe.Change) {
		metrics.ObserveProbe(key, res)
		switch c {
		case probe.DecisionChange:
			decisions.Verdict(key, res.Status == probe.Unhealthy)
			queue.addAt(key, priorityDecision)
		case probe.ReportChange:
			queue.addAt(key, priorityReport)
		}
	})
	if opts.Stalls == nil {
		opts.Stalls = stall.New(stall.Options{})
	}
	monitor.Stalls = opts.Stalls
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
	recorder, err := boundedRecorder(mgr, cs)
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
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.WebhookCircuitBreaker{}).
		// A breaker's signal is ambiguous while another names a webhook of
		// the same name and type: each change of one looks at the others
		// at once, so that ambiguity ends when its cause does.
		// Only a change of spec can make or end that ambiguity (a status
		// write bumps no generation): every status write listing every
		// breaker made 1,000 breakers cost a million copies per 1,000 writes.
		Watches(&v1alpha1.WebhookCircuitBreaker{}, handler.EnqueueRequestsFromMapFunc(r.signalTwins),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Func(queue.start)).
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

// eventConcurrency is how many events are sent to the API server at once.
const eventConcurrency = 4

// boundedRecorder returns the breakers' event recorder. The events.k8s.io
// broadcaster sends every event from a goroutine of its own, so the
// thousand CircuitOpened events of a storm would all compete at once with
// the patches that open the circuits; here at most eventConcurrency are in
// flight, and the rest follow as they finish (none is dropped).
func boundedRecorder(mgr ctrl.Manager, cs kubernetes.Interface) (events.EventRecorder, error) {
	b := events.NewBroadcaster(&boundedSink{
		sink:  &events.EventSinkImpl{Interface: cs.EventsV1()},
		slots: make(chan struct{}, eventConcurrency),
	})
	err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
			return fmt.Errorf("start recording events: %w", err)
		}
		<-ctx.Done()
		b.Shutdown()
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("add event broadcaster: %w", err)
	}
	return b.NewRecorder(mgr.GetScheme(), "tripswitch"), nil
}

// boundedSink sends at most cap(slots) events at a time.
type boundedSink struct {
	sink  events.EventSink
	slots chan struct{}
}

func (s *boundedSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	s.slots <- struct{}{}
	defer func() { <-s.slots }()
	return s.sink.Create(ctx, e)
}

func (s *boundedSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	s.slots <- struct{}{}
	defer func() { <-s.slots }()
	return s.sink.Update(ctx, e)
}

func (s *boundedSink) Patch(ctx context.Context, old *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	s.slots <- struct{}{}
	defer func() { <-s.slots }()
	return s.sink.Patch(ctx, old, data)
}

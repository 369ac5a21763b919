package controller

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// Options configure Setup.
type Options struct {
	// Prober checks webhook health.
	Prober probe.Prober
	// Registerer receives the metrics; nil means none are registered.
	Registerer prometheus.Registerer
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// MaxConcurrentReconciles defaults to 4.
	MaxConcurrentReconciles int
}

// notifyBuffer bounds pending probe notifications; a full buffer drops one,
// which only delays a reconcile until the next probe.
const notifyBuffer = 1024

// Setup adds the probe monitor and the breaker controller to mgr. Both run
// only on the elected leader.
func Setup(mgr ctrl.Manager, opts Options) (*Reconciler, error) {
	if opts.Prober == nil {
		return nil, fmt.Errorf("controller setup: Options.Prober is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MaxConcurrentReconciles == 0 {
		opts.MaxConcurrentReconciles = 4
	}
	var metrics *Metrics
	if opts.Registerer != nil {
		var err error
		if metrics, err = NewMetrics(opts.Registerer); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	probed := make(chan event.GenericEvent, notifyBuffer)
	enqueue := func(key string) {
		b := &v1alpha1.WebhookCircuitBreaker{}
		b.Name = key
		select {
		case probed <- event.GenericEvent{Object: b}:
		default:
		}
	}
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
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("create clientset: %w", err)
	}
	targets := NewTargets(cs, enqueue)
	if err := mgr.Add(targets); err != nil {
		return nil, fmt.Errorf("add target watches: %w", err)
	}
	r := &Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Targets:   targets,
		Health:    monitor,
		Recorder:  mgr.GetEventRecorder("tripswitch"),
		Clock:     opts.Clock,
		Metrics:   metrics,
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.WebhookCircuitBreaker{}).
		WatchesRawSource(source.Channel(probed, &handler.TypedEnqueueRequestForObject[client.Object]{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
		Named("webhookcircuitbreaker").
		Complete(r)
	if err != nil {
		return nil, fmt.Errorf("build controller: %w", err)
	}
	return r, nil
}

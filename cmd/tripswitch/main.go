// Command tripswitch is the controller manager: a circuit breaker for
// admission webhooks that an operator approved with a WebhookCircuitBreaker.
//
//	tripswitch [flags]        run the controller against the current kubeconfig
//	tripswitch demo [flags]   run seed 000's delayed-webhook experiment locally
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// +kubebuilder:rbac:groups=tripswitch.dev,resources=webhookcircuitbreakers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=tripswitch.dev,resources=webhookcircuitbreakers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=tripswitch.dev,resources=webhookcircuitbreakers/finalizers,verbs=update
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update

func main() {
	if len(os.Args) > 1 && os.Args[1] == "demo" {
		os.Exit(runDemo(os.Args[2:]))
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "tripswitch:", err)
		os.Exit(1)
	}
}

func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("tripswitch", flag.ContinueOnError)
	metricsAddr := fs.String("metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint; 0 disables it")
	probeAddr := fs.String("health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	leaderElect := fs.Bool("leader-elect", true, "elect a leader through a Lease so that only one replica writes")
	leaderNS := fs.String("leader-election-namespace", "", "namespace of the leader-election Lease (default: the pod's namespace)")
	leaseDuration := fs.Duration("leader-election-lease-duration", 15*time.Second, "how long a leader's Lease lasts without renewal; a replica taking over from a dead leader waits this long")
	renewDeadline := fs.Duration("leader-election-renew-deadline", 10*time.Second, "how long the leader keeps retrying to renew before it steps down")
	retryPeriod := fs.Duration("leader-election-retry-period", 2*time.Second, "how often candidates try to acquire or renew the Lease")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	scheme, err := newScheme()
	if err != nil {
		return fmt.Errorf("build scheme: %w", err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:        *probeAddr,
		LeaderElection:                *leaderElect,
		LeaderElectionID:              "tripswitch.dev",
		LeaderElectionNamespace:       *leaderNS,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 leaseDuration,
		RenewDeadline:                 renewDeadline,
		RetryPeriod:                   retryPeriod,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if _, err := controller.Setup(mgr, controller.Options{Prober: &probe.HTTPProber{}, Registerer: metrics.Registry}); err != nil {
		return err
	}
	// An open circuit is not a liveness failure: health reports only whether
	// the process works, never circuit state.
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("add readiness check: %w", err)
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

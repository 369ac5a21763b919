// Command tripswitch is the controller manager: a circuit breaker for
// admission webhooks that an operator approved with a WebhookCircuitBreaker.
//
//	tripswitch [flags]                     run the controller
//	tripswitch status [-o table|json]      list the circuits held open, from their records
//	tripswitch restore CONFIG/WEBHOOK...   restore from a record without the controller
//	tripswitch restore --all
//	tripswitch audit BREAKER [--window N]  list and re-review what an open window admitted
//	tripswitch remediate BREAKER [--apply] repair it: re-apply patches, roll Pods, label objections
//	tripswitch standdown --namespace NS    before an uninstall: stop the controller, restore every circuit
//	tripswitch check [-o table|json]       find what would keep each breaker from working
//	tripswitch --version                   print the version
//	tripswitch --help                      list the flags
//
// The demo is a binary of its own (cmd/tripswitch-demo), so this one links
// no test machinery.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// version is set at build time: -ldflags "-X main.version=v0.1.0".
var version = ""

func main() {
	if err := dispatch(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "tripswitch:", err)
		os.Exit(1)
	}
}

// gcPercent is the controller's GOGC unless its environment sets one. Its
// live heap is small (about 30 MiB at 1,000 breakers) and what it
// allocates is short-lived: Go's default headroom of the whole live heap
// again made the heap, not the breakers, most of its memory. At 1,000
// breakers a quarter cost CPU within the measurements' noise and made the
// steady RSS and a storm's peak about a quarter lower (docs/scale.md,
// "Memory").
const gcPercent = 25

// setGCPercent sets gcPercent when GOGC is not set.
func setGCPercent() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
}

// dispatch runs a subcommand, or the controller.
func dispatch(args []string, out io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "status":
			return runStatus(args[1:], out)
		case "restore":
			return runRestore(args[1:], out)
		case "audit":
			return runAudit(args[1:], out)
		case "remediate":
			return runRemediate(args[1:], out)
		case "standdown":
			return runStanddown(args[1:], out)
		case "check":
			return runCheck(args[1:], out)
		}
	}
	return run(args, out)
}

// Version is the build's version: the -X value, else the module version Go
// recorded, else "devel".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
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

// flags are the manager's command line.
type flags struct {
	kubeconfig                             *kubeconfig
	metricsAddr, probeAddr, metricsCertDir string
	pprofAddr                              string
	metricsSecure                          bool
	leaderElect                            bool
	leaderNS                               string
	leaseDuration, renewDeadline, retry    time.Duration
	qps                                    float64
	burst, concurrency                     int
	maxOpenCircuits                        int
	signalInterval, requestTimeout         time.Duration
	kernelEvidence                         bool
	showVersion                            bool
	zap                                    zap.Options
}

func parseFlags(args []string, out io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("tripswitch", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: tripswitch [flags]\n\nRuns the tripswitch controller: a circuit breaker for approved admission webhooks.\n\n"+
			"Commands (they work without the controller, with your credentials):\n"+
			"  status                     list the circuits held open, from the records on the webhook configurations\n"+
			"  restore CONFIG/WEBHOOK...  restore a webhook's original policy from its record (--all for every one)\n"+
			"  audit BREAKER              list what an open window admitted without the webhook, and re-review it\n"+
			"  remediate BREAKER          repair it (dry run unless --apply): re-apply patches, roll Pods, label objections\n"+
			"  standdown --namespace NS   before an uninstall: stop the controller, restore every circuit, release every breaker\n"+
			"  check                      find what would keep each breaker from working (exit 1 on a problem)\n\n"+
			"Flags:\n")
		fs.PrintDefaults()
	}
	f.kubeconfig = kubeconfigFlag(fs)
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8443", "address of the Prometheus metrics endpoint; \"0\" disables it")
	fs.BoolVar(&f.metricsSecure, "metrics-secure", true, "serve metrics over HTTPS and authenticate and authorize every scrape (TokenReview and SubjectAccessReview on GET /metrics); false serves plain HTTP, for local runs")
	fs.StringVar(&f.metricsCertDir, "metrics-cert-dir", "", "directory holding tls.crt and tls.key for the metrics endpoint; default: a self-signed certificate made at start")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (they never depend on a circuit's state)")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader through a Lease so that only one replica probes and writes")
	fs.StringVar(&f.leaderNS, "leader-election-namespace", "", "namespace of the leader-election Lease; default: the pod's namespace (required outside a cluster)")
	fs.DurationVar(&f.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long a Lease lasts without renewal: a replica taking over from a leader that died waits up to this long, so it bounds how late a circuit opens or closes after a leader crash")
	fs.DurationVar(&f.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it steps down; must be less than the lease duration")
	fs.DurationVar(&f.retry, "leader-election-retry-period", 2*time.Second, "how often candidates try to acquire or renew the Lease")
	fs.Float64Var(&f.qps, "kube-api-qps", -1, "client-side limit on requests per second to the API server; negative (the default): none, so the API server's priority and fairness is what queues them. A quiet controller makes well under 1 per second; an outage of every webhook at once costs about 4 per breaker (read, patch, status, event), all due within a probe interval, which a client-side limit would spread over many seconds")
	fs.IntVar(&f.burst, "kube-api-burst", 1000, "requests the controller may send at once above a positive --kube-api-qps")
	fs.IntVar(&f.concurrency, "max-concurrent-reconciles", controller.DefaultMaxConcurrentReconciles, "breakers reconciled in parallel")
	fs.IntVar(&f.maxOpenCircuits, "max-open-circuits", 0, "at most this many circuits open at once in the cluster (counted on the records); a breaker that would open beyond it reports OpenRefused/ClusterLimit; 0: no limit")
	fs.DurationVar(&f.requestTimeout, "apiserver-request-timeout", 60*time.Second, "the API server's --request-timeout: each breaker's Preflight condition says when the webhooks that can match the same requests can take longer than this, with every circuit closed")
	fs.DurationVar(&f.signalInterval, "apiserver-signal-interval", 5*time.Second, "how often the API server's /metrics is read for breakers with spec.apiServerSignal")
	fs.StringVar(&f.pprofAddr, "pprof-bind-address", "0", "address of Go's pprof endpoints, for profiling; \"0\" (default) disables them")
	fs.BoolVar(&f.kernelEvidence, "probe-kernel-evidence", true, "on Linux, confirm a probe's timeout from the kernel's count of what its connection received (nothing since the request was written), and count an answer read late whose last byte arrived in time; false judges by the controller's own running time alone (docs/evidence.md)")
	fs.BoolVar(&f.showVersion, "version", false, "print the version and exit")
	f.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (commands: status, restore, audit, remediate, standdown, check; see --help)", fs.Arg(0))
	}
	if f.signalInterval < time.Second {
		return nil, fmt.Errorf("--apiserver-signal-interval %v must be at least 1s", f.signalInterval)
	}
	if f.requestTimeout <= 0 {
		return nil, fmt.Errorf("--apiserver-request-timeout must be positive (got %v)", f.requestTimeout)
	}
	if f.maxOpenCircuits < 0 {
		return nil, fmt.Errorf("--max-open-circuits must be 0 (no limit) or more (got %d)", f.maxOpenCircuits)
	}
	if f.qps == 0 || f.burst < 1 || f.concurrency < 1 {
		return nil, fmt.Errorf("--kube-api-qps must be positive, or negative for no client-side limit; --kube-api-burst and --max-concurrent-reconciles must be positive (got %g, %d, %d)", f.qps, f.burst, f.concurrency)
	}
	if f.leaderElect && f.renewDeadline >= f.leaseDuration {
		return nil, fmt.Errorf("--leader-election-renew-deadline (%s) must be less than --leader-election-lease-duration (%s)", f.renewDeadline, f.leaseDuration)
	}
	return f, nil
}

// serviceAccountNamespace is where Kubernetes tells a pod its namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// leaseNamespace resolves the Lease's namespace or says which flag to set.
func (f *flags) leaseNamespace() (string, error) {
	if f.leaderNS != "" || !f.leaderElect {
		return f.leaderNS, nil
	}
	if ns, err := os.ReadFile(serviceAccountNamespace); err == nil && len(strings.TrimSpace(string(ns))) > 0 {
		return strings.TrimSpace(string(ns)), nil
	}
	return "", errors.New("--leader-election-namespace is required when running outside a cluster (or pass --leader-elect=false for a single replica)")
}

// kubeconfig is the --kubeconfig flag of the controller and every command:
// the cluster to talk to.
type kubeconfig string

// kubeconfigFlag defines --kubeconfig on fs.
func kubeconfigFlag(fs *flag.FlagSet) *kubeconfig {
	k := new(kubeconfig)
	fs.StringVar((*string)(k), "kubeconfig", "", "path to a kubeconfig; default: $KUBECONFIG, the in-cluster config, then ~/.kube/config")
	return k
}

// restConfig is the client configuration k names.
func (k kubeconfig) restConfig() (*rest.Config, error) {
	if k != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", string(k))
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", string(k), err)
		}
		return cfg, nil
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster to talk to (set --kubeconfig or $KUBECONFIG): %w", err)
	}
	return cfg, nil
}

// client is a client of the cluster k names, with tripswitch's scheme.
func (k kubeconfig) client() (client.Client, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// setLogger makes log the one logger: controller-runtime's and klog's, so
// that client-go's own lines (a reflector's "Failed to watch", leader
// election) come out in the same format (JSON by default) as the rest.
func setLogger(log logr.Logger) {
	ctrl.SetLogger(log)
	klog.SetLogger(log)
}

func run(args []string, out io.Writer) error {
	f, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	if f.showVersion {
		fmt.Fprintln(out, "tripswitch", Version())
		return nil
	}
	setLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	setGCPercent()
	leaseNS, err := f.leaseNamespace()
	if err != nil {
		return err
	}
	scheme, err := newScheme()
	if err != nil {
		return fmt.Errorf("build scheme: %w", err)
	}
	cfg, err := f.kubeconfig.restConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(f.qps), f.burst
	metricsOpts := metricsserver.Options{BindAddress: f.metricsAddr, SecureServing: f.metricsSecure, CertDir: f.metricsCertDir}
	if f.metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// Nothing reads the cached breakers' managedFields: at 1,000
		// breakers they were a tenth of the live heap.
		Cache:                         cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        f.probeAddr,
		PprofBindAddress:              f.pprofAddr,
		LeaderElection:                f.leaderElect,
		LeaderElectionID:              "tripswitch.dev",
		LeaderElectionNamespace:       leaseNS,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &f.leaseDuration,
		RenewDeadline:                 &f.renewDeadline,
		RetryPeriod:                   &f.retry,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	// The reviews tripswitch sends name the user it runs as, in whatever
	// namespace it was installed.
	idCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	requester, err := username(idCtx, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("learn the controller's identity, which its probe and audit reviews name: %w", err)
	}
	ctrl.Log.Info("running as", "user", requester)
	prober := &probe.HTTPProber{IgnoreKernel: !f.kernelEvidence}
	if _, err := controller.Setup(mgr, controller.Options{Prober: prober, Registerer: metrics.Registry, MaxConcurrentReconciles: f.concurrency,
		SignalInterval: f.signalInterval, Requester: requester, MaxOpenCircuits: f.maxOpenCircuits, RequestDeadline: f.requestTimeout}); err != nil {
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

package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tripswitch-dev/tripswitch/config/crd"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// LocalOptions configure the environment of `make demo`.
type LocalOptions struct {
	// Assets holds kube-apiserver and etcd.
	Assets string
	// Dir receives controller.log.
	Dir string
	// Out receives progress lines.
	Out io.Writer
	// Controller starts tripswitch against the control plane and returns a
	// function that stops it. Nil runs it in this process (InProcess).
	Controller func(ctx context.Context, cfg *rest.Config, dir string) (stop func(), err error)
}

// Local is the environment of `make demo`: kube-apiserver and etcd through
// envtest, the webhook on 127.0.0.1 (a URL webhook: envtest has no cluster
// network), and the controller with leader election.
type Local struct {
	c    client.Client
	cp   *envtest.Environment
	hook *slowhook.Server
	stop func()
}

var _ Environment = (*Local)(nil)

// StartLocal starts the control plane, the webhook and the controller; Close
// stops them.
func StartLocal(ctx context.Context, opts LocalOptions) (_ *Local, err error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	l := &Local{}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	logf(opts.Out, "starting kube-apiserver and etcd from %s", opts.Assets)
	cfg, scheme, err := l.startControlPlane(opts.Assets)
	if err != nil {
		return nil, err
	}
	if l.hook, err = slowhook.Start(); err != nil {
		return nil, err
	}
	if l.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	start := opts.Controller
	if start == nil {
		start = InProcess
	}
	if l.stop, err = start(ctx, cfg, opts.Dir); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Local) startControlPlane(assets string) (*rest.Config, *runtime.Scheme, error) {
	crds, err := crd.All()
	if err != nil {
		return nil, nil, err
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, nil, err
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, nil, fmt.Errorf("%s not found in %s: run `make tools` first (or `make demo`, which does)", bin, assets)
		}
	}
	l.cp = &envtest.Environment{BinaryAssetsDirectory: assets, CRDInstallOptions: envtest.CRDInstallOptions{CRDs: crds}, Scheme: scheme}
	cfg, err := l.cp.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("start control plane: %w", err)
	}
	return cfg, scheme, nil
}

// Close stops the controller, the webhook and the control plane.
func (l *Local) Close() {
	if l.stop != nil {
		l.stop()
	}
	if l.hook != nil {
		_ = l.hook.Close()
	}
	if l.cp != nil {
		_ = l.cp.Stop()
	}
}

// Client implements Environment.
func (l *Local) Client() client.Client { return l.c }

// ClientConfig implements Environment: the webhook's URL and its CA.
func (l *Local) ClientConfig() admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(l.hook.URL + "/mutate"), CABundle: l.hook.CABundle}
}

// SetDelay implements Environment.
func (l *Local) SetDelay(_ context.Context, d time.Duration) error {
	l.hook.SetDelay(d)
	return nil
}

// Called implements Environment: the webhook records what it reviewed.
func (l *Local) Called(_ context.Context, cm *corev1.ConfigMap) bool {
	return l.hook.Saw(cm.Namespace, cm.Name)
}

// Mutates implements Environment: this webhook admits without a patch.
func (l *Local) Mutates() bool { return false }

func (l *Local) String() string {
	return "kube-apiserver and etcd (envtest), the controller with leader election, the webhook at " + l.hook.URL
}

// InProcess runs the controller manager in this process, logging to
// dir/controller.log; stop may be called more than once.
func InProcess(ctx context.Context, cfg *rest.Config, dir string) (stop func(), err error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "controller.log"))
	if err != nil {
		return nil, fmt.Errorf("create controller log: %w", err)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logFile)))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		LeaderElection:                true,
		LeaderElectionID:              "tripswitch.dev",
		LeaderElectionNamespace:       "default",
		LeaderElectionReleaseOnCancel: true,
		// Tests run it again in the same process (go test -count).
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if _, err := controller.Setup(mgr, controller.Options{Prober: &probe.HTTPProber{}, SignalInterval: time.Second}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = mgr.Start(ctx); close(done) }()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done; _ = logFile.Close() }) }, nil
}

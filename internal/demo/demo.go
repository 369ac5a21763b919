// Package demo runs the delayed-webhook experiment on a real API
// server: a webhook with failurePolicy Fail and timeoutSeconds 1 starts
// answering after 2s, tripswitch opens its circuit, the webhook recovers, and
// tripswitch restores it; once with openAction Ignore and once with Bypass.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/config/crd"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// Names used in the demo cluster.
const (
	Namespace     = "demo"
	Configuration = "slow-mutator"
	Webhook       = "slow-mutator.tripswitch.demo"
	Breaker       = "slow-mutator"
)

// Options configure a demo run.
type Options struct {
	// Assets holds kube-apiserver and etcd.
	Assets string
	// Dir receives timeline.svg, timeline.png and controller.log.
	Dir string
	// Out receives progress lines and the report.
	Out io.Writer
	// Creates is how many ConfigMaps each measured phase creates. Default 7.
	Creates int
	// Delay is the injected webhook delay. Default 2s, past the 1s timeout.
	Delay time.Duration
	// Controller starts tripswitch against the control plane and returns a
	// function that stops it. Nil runs it in this process (InProcess).
	Controller func(ctx context.Context, cfg *rest.Config, dir string) (stop func(), err error)
}

// Phase is one step of the scenario.
type Phase string

// Phases, in order.
const (
	PhaseHealthy    Phase = "healthy"
	PhaseDelayed    Phase = "delayed, circuit closed"
	PhaseOpen       Phase = "delayed, circuit open"
	PhaseRecovering Phase = "recovered, circuit still open"
	PhaseRecovered  Phase = "recovered, circuit closed"
)

// Sample is one ConfigMap create.
type Sample struct {
	Phase    Phase
	At       time.Duration // since the run started
	Latency  time.Duration
	Admitted bool
	Err      string
}

// Run is one pass of the scenario with one open action.
type Run struct {
	Action v1alpha1.OpenAction
	// Signal: the breaker also used the API server signal in this run, and
	// the creates of the delayed phase came four at a time, as from several
	// clients.
	Signal  bool
	Samples []Sample
	// FaultAt, OpenedAt, RecoveredAt and ClosedAt are offsets from the run's start.
	FaultAt, OpenedAt, RecoveredAt, ClosedAt time.Duration
	// StillClosedAt is when a read of the configuration last showed the
	// circuit closed before it opened: the open write came after it, so only
	// a create that ended after it can have been admitted under the opened
	// configuration.
	StillClosedAt time.Duration
	// ProbesAt is when the breaker's status first showed failureThreshold
	// failed probes; SignalAt when it first showed the API server signal
	// failing (0: never). OpenedBy is the reason the circuit opened with.
	ProbesAt, SignalAt time.Duration
	OpenedBy           string
	// Webhook is the target webhook as read back from the API server at each phase.
	Webhook map[Phase]string
	// Failures lists expectations that did not hold.
	Failures []string
}

// env is a running demo: control plane, webhook, controller.
type env struct {
	opts  Options
	c     client.Client
	hook  *slowhook.Server
	start time.Time
}

// Execute runs the demo: both actions in turn. It returns the runs even when
// some expectation failed; the error says which.
func Execute(ctx context.Context, opts Options) ([]Run, error) {
	if opts.Creates == 0 {
		opts.Creates = 7
	}
	if opts.Delay == 0 {
		opts.Delay = 2 * time.Second
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	logf(opts.Out, "starting kube-apiserver and etcd from %s", opts.Assets)
	cp, cfg, scheme, err := startControlPlane(opts.Assets)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cp.Stop() }()

	hook, err := slowhook.Start()
	if err != nil {
		return nil, err
	}
	defer func() { _ = hook.Close() }()

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	e := &env{opts: opts, c: c, hook: hook}
	if err := e.install(ctx); err != nil {
		return nil, err
	}
	if opts.Controller == nil {
		opts.Controller = InProcess
	}
	stop, err := opts.Controller(ctx, cfg, opts.Dir)
	if err != nil {
		return nil, err
	}
	defer stop()
	logf(opts.Out, "controller running with leader election; webhook %s at %s", Webhook, hook.URL)

	var runs []Run
	var failed []string
	for _, pass := range []struct {
		action v1alpha1.OpenAction
		signal bool
	}{{v1alpha1.OpenActionIgnore, false}, {v1alpha1.OpenActionBypass, false}, {v1alpha1.OpenActionIgnore, true}} {
		run, err := e.run(ctx, pass.action, pass.signal)
		name := run.Name()
		if err != nil {
			return runs, fmt.Errorf("%s run: %w", name, err)
		}
		runs = append(runs, run)
		for _, f := range run.Failures {
			failed = append(failed, name+": "+f)
		}
	}
	if len(failed) > 0 {
		return runs, fmt.Errorf("%d expectations failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	return runs, nil
}

func startControlPlane(assets string) (*envtest.Environment, *rest.Config, *runtime.Scheme, error) {
	crds, err := crd.All()
	if err != nil {
		return nil, nil, nil, err
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, nil, nil, err
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, nil, nil, fmt.Errorf("%s not found in %s: run `make tools` first (or `make demo`, which does)", bin, assets)
		}
	}
	cp := &envtest.Environment{BinaryAssetsDirectory: assets, CRDInstallOptions: envtest.CRDInstallOptions{CRDs: crds}, Scheme: scheme}
	cfg, err := cp.Start()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start control plane: %w", err)
	}
	return cp, cfg, scheme, nil
}

// Scheme returns a scheme with the built-in types and tripswitch's API.
func Scheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
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
	return func() { cancel(); <-done; _ = logFile.Close() }, nil
}

// install creates the namespace, the webhook configuration (Fail,
// timeoutSeconds 1, ConfigMap creates) and the breaker.
func (e *env) install(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: Configuration},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:           Webhook,
			ClientConfig:   admissionregistrationv1.WebhookClientConfig{URL: ptr.To(e.hook.URL + "/mutate"), CABundle: e.hook.CABundle},
			FailurePolicy:  ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds: ptr.To(int32(1)),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: Namespace}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	wcb := &v1alpha1.WebhookCircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: Breaker},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: Configuration, WebhookName: Webhook},
			AllowAdmissionWithoutMutation: true,
			OpenAction:                    v1alpha1.OpenActionIgnore,
		},
	}
	for _, obj := range []client.Object{ns, cfg, wcb} {
		if err := e.c.Create(ctx, obj); err != nil {
			return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
	}
	// The API server loads webhook configurations asynchronously: wait until
	// it calls this one before measuring anything.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		name := fmt.Sprintf("warmup-%d", i)
		err := e.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name}})
		if err == nil && e.hook.Saw(Namespace, name) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the API server never called the demo webhook")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run is one pass of the scenario with action.
func (e *env) run(ctx context.Context, action v1alpha1.OpenAction, signal bool) (Run, error) {
	r := Run{Action: action, Signal: signal, Webhook: map[Phase]string{}}
	if err := e.configure(ctx, action, signal); err != nil {
		return r, err
	}
	name := r.Name()
	e.start = time.Now()
	w := e.watch(ctx)
	defer w.stop()
	out := e.opts.Out
	logf(out, "[%s] phase 1: healthy webhook, policy Fail: creating %d ConfigMaps", name, e.opts.Creates)
	e.creates(ctx, &r, PhaseHealthy, e.opts.Creates)
	r.Webhook[PhaseHealthy] = e.describe(ctx)

	e.hook.SetDelay(e.opts.Delay)
	r.FaultAt = e.since()
	logf(out, "[%s] phase 2: webhook now answers after %s (timeoutSeconds 1); creating until the circuit opens", name, e.opts.Delay)
	for !w.open() {
		if e.since()-r.FaultAt > time.Minute {
			return r, errors.New("circuit did not open within a minute of the fault")
		}
		if signal {
			e.parallelCreates(ctx, &r, PhaseDelayed, 4)
		} else {
			e.creates(ctx, &r, PhaseDelayed, 1)
		}
	}
	r.OpenedAt, r.StillClosedAt = w.openedAt(), w.stillClosedAt()
	r.Webhook[PhaseOpen] = e.describe(ctx)
	logf(out, "[%s] phase 3: circuit open after %s: creating %d ConfigMaps", name, (r.OpenedAt - r.FaultAt).Round(10*time.Millisecond), e.opts.Creates)
	e.creates(ctx, &r, PhaseOpen, e.opts.Creates)
	// Whether the probes or the signal saw the fault first is a race (on a
	// busy machine the signal's scrapes come later); what the run shows is
	// that the signal sees it too, from the calls the API server still makes
	// to the open (Ignore) webhook: wait for that, not for a time.
	for signal && w.signalFailing() == 0 && e.since()-r.FaultAt < time.Minute {
		e.creates(ctx, &r, PhaseOpen, 1)
	}
	r.ProbesAt, r.SignalAt, r.OpenedBy = w.signals()

	e.hook.SetDelay(0)
	r.RecoveredAt = e.since()
	logf(out, "[%s] phase 4: webhook healthy again; waiting for the circuit to close", name)
	for w.open() {
		if e.since()-r.RecoveredAt > time.Minute {
			return r, errors.New("circuit did not close within a minute of recovery")
		}
		e.creates(ctx, &r, PhaseRecovering, 1)
		time.Sleep(250 * time.Millisecond)
	}
	r.ClosedAt = w.closedAt()
	r.Webhook[PhaseRecovered] = e.describe(ctx)
	logf(out, "[%s] phase 5: circuit closed after %s: creating %d ConfigMaps", name, (r.ClosedAt - r.RecoveredAt).Round(10*time.Millisecond), e.opts.Creates)
	e.creates(ctx, &r, PhaseRecovered, e.opts.Creates)
	r.Failures = check(r)
	return r, nil
}

// configure sets the breaker's open action and API server signal.
func (e *env) configure(ctx context.Context, action v1alpha1.OpenAction, signal bool) error {
	var wcb v1alpha1.WebhookCircuitBreaker
	if err := e.c.Get(ctx, client.ObjectKey{Name: Breaker}, &wcb); err != nil {
		return fmt.Errorf("get breaker: %w", err)
	}
	base := wcb.DeepCopy()
	wcb.Spec.OpenAction = action
	wcb.Spec.APIServerSignal = nil
	if signal {
		// A short window, so that the circuit closes soon after recovery (the
		// failures of the open phase must leave the window). The signal goes
		// with Ignore: Bypass would stop the very calls it counts.
		wcb.Spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true, Window: &metav1.Duration{Duration: 10 * time.Second}, MinimumCalls: 4, FailureRateThreshold: 50}
	}
	if err := e.c.Patch(ctx, &wcb, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("configure breaker (openAction %s, API server signal %v): %w", action, signal, err)
	}
	return nil
}

// runName names a run in logs and reports.
// Name names the run: its open action, and the API server signal if on.
func (r Run) Name() string {
	if r.Signal {
		return string(r.Action) + " + API server signal"
	}
	return string(r.Action)
}

// parallelCreates makes n ConfigMaps at once, as n clients would.
func (e *env) parallelCreates(ctx context.Context, r *Run, phase Phase, n int) {
	results := make([]Run, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { e.creates(ctx, &results[i], phase, 1) })
	}
	wg.Wait()
	for _, x := range results {
		r.Samples = append(r.Samples, x.Samples...)
	}
}

func (e *env) since() time.Duration { return time.Since(e.start) }

// creates makes n ConfigMaps in the demo namespace and records each.
func (e *env) creates(ctx context.Context, r *Run, phase Phase, n int) {
	for range n {
		at := e.since()
		t0 := time.Now()
		err := e.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, GenerateName: "demo-"}})
		s := Sample{Phase: phase, At: at, Latency: time.Since(t0), Admitted: err == nil}
		if err != nil {
			s.Err = err.Error()
		}
		r.Samples = append(r.Samples, s)
	}
}

// describe reads the target webhook back from the API server.
func (e *env) describe(ctx context.Context) string {
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := e.c.Get(ctx, client.ObjectKey{Name: Configuration}, &cfg); err != nil {
		return "unreadable: " + err.Error()
	}
	for _, w := range cfg.Webhooks {
		if w.Name != Webhook {
			continue
		}
		s := "failurePolicy=" + string(ptr.Deref(w.FailurePolicy, ""))
		var conds []string
		for _, c := range w.MatchConditions {
			conds = append(conds, c.Name+"="+c.Expression)
		}
		if len(conds) > 0 {
			s += " matchConditions=[" + strings.Join(conds, ", ") + "]"
		}
		if _, ok := cfg.Annotations[circuit.AnnotationKey(Webhook)]; ok {
			s += " +record"
		}
		return s
	}
	return "webhook missing"
}

// watcher polls the webhook configuration and timestamps circuit transitions
// as the API server shows them.
type watcher struct {
	mu         sync.Mutex
	isOpen     bool
	changes    []time.Duration
	lastClosed time.Duration // when the last read that found it closed began, until it first opened
	probesAt   time.Duration // first status with failureThreshold failed probes
	signalAt   time.Duration // first status with the API server signal failing
	openedBy   string
	cancel     context.CancelFunc
	done       chan struct{}
}

func (e *env) watch(ctx context.Context) *watcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			var cfg admissionregistrationv1.MutatingWebhookConfiguration
			began := e.since()
			if err := e.c.Get(ctx, client.ObjectKey{Name: Configuration}, &cfg); err == nil {
				_, open := cfg.Annotations[circuit.AnnotationKey(Webhook)]
				w.mu.Lock()
				if !open && len(w.changes) == 0 {
					w.lastClosed = began
				}
				if open != w.isOpen {
					w.isOpen = open
					w.changes = append(w.changes, e.since())
				}
				w.mu.Unlock()
			}
			var wcb v1alpha1.WebhookCircuitBreaker
			if err := e.c.Get(ctx, client.ObjectKey{Name: Breaker}, &wcb); err == nil {
				now := e.since()
				w.mu.Lock()
				if w.probesAt == 0 && wcb.Status.Probe.ConsecutiveFailures >= 3 {
					w.probesAt = now
				}
				if w.signalAt == 0 && wcb.Status.APIServer != nil && wcb.Status.APIServer.Failing {
					w.signalAt = now
				}
				if w.openedBy == "" && wcb.Status.Record != nil {
					w.openedBy = wcb.Status.Record.Reason
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *watcher) stop() { w.cancel(); <-w.done }

// signals returns when each signal first tripped, and what opened the circuit.
func (w *watcher) signals() (probes, signal time.Duration, openedBy string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.probesAt, w.signalAt, w.openedBy
}

func (w *watcher) signalFailing() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.signalAt
}

func (w *watcher) open() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.isOpen
}

func (w *watcher) openedAt() time.Duration { return w.change(0) }

func (w *watcher) stillClosedAt() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastClosed
}
func (w *watcher) closedAt() time.Duration { return w.change(1) }

func (w *watcher) change(i int) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i < len(w.changes) {
		return w.changes[i]
	}
	return 0
}

// Latencies returns the phase's latencies, sorted, and how many were admitted.
func (r Run) Latencies(p Phase) (lat []time.Duration, admitted int) {
	for _, s := range r.Samples {
		if s.Phase == p {
			lat = append(lat, s.Latency)
			if s.Admitted {
				admitted++
			}
		}
	}
	slices.Sort(lat)
	return lat, admitted
}

// AdmittedBefore counts the phase's admitted creates that ended before t.
func (r Run) AdmittedBefore(p Phase, t time.Duration) int {
	n := 0
	for _, s := range r.Samples {
		if s.Phase == p && s.Admitted && s.At+s.Latency < t {
			n++
		}
	}
	return n
}

// Median is the phase's p50 latency.
func (r Run) Median(p Phase) time.Duration {
	lat, _ := r.Latencies(p)
	if len(lat) == 0 {
		return 0
	}
	return lat[len(lat)/2]
}

// bypassFloor keeps the Bypass comparison meaningful when healthy creates take
// a few milliseconds and a busy machine adds noise: it is still a twentieth of
// the 1s wait that Ignore keeps.
const bypassFloor = 50 * time.Millisecond

// check lists the expectations the run broke.
func check(r Run) []string {
	var f []string
	expect := func(ok bool, format string, args ...any) {
		if !ok {
			f = append(f, fmt.Sprintf(format, args...))
		}
	}
	for _, p := range []Phase{PhaseHealthy, PhaseOpen, PhaseRecovered} {
		lat, admitted := r.Latencies(p)
		expect(len(lat) > 0 && admitted == len(lat), "%s: %d of %d creates admitted, want all", p, admitted, len(lat))
	}
	// In the delayed phase failurePolicy Fail rejects every create the API
	// server sends to the slow webhook. A create still running when the
	// circuit opens may be admitted under the opened configuration: only
	// one that ended after the last read that showed the circuit closed.
	lat, admitted := r.Latencies(PhaseDelayed)
	early := r.AdmittedBefore(PhaseDelayed, r.StillClosedAt)
	expect(len(lat) > admitted, "%s: %d of %d creates admitted, want some rejected (failurePolicy Fail)", PhaseDelayed, admitted, len(lat))
	expect(early == 0, "%s: %d creates admitted that ended while the configuration still read closed (failurePolicy Fail)", PhaseDelayed, early)
	healthy, open := r.Median(PhaseHealthy), r.Median(PhaseOpen)
	switch r.Action {
	case v1alpha1.OpenActionIgnore:
		expect(open >= 900*time.Millisecond, "Ignore: open-phase p50 %s, want about the 1s webhook timeout (Ignore still waits)", open)
	case v1alpha1.OpenActionBypass:
		expect(open <= max(3*healthy, bypassFloor), "Bypass: open-phase p50 %s, want at most 3× the healthy p50 %s (floor %s)", open, healthy, bypassFloor)
	}
	if r.Signal {
		expect(r.SignalAt > 0, "the API server signal never showed failing")
	}
	expect(r.Webhook[PhaseHealthy] == "failurePolicy=Fail", "healthy webhook reads %q", r.Webhook[PhaseHealthy])
	expect(r.Webhook[PhaseRecovered] == "failurePolicy=Fail", "restored webhook reads %q, want the original failurePolicy=Fail", r.Webhook[PhaseRecovered])
	return f
}

func logf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// Package demo is the delayed-webhook experiment, written once and run in
// an Environment: a webhook with failurePolicy Fail and timeoutSeconds 1
// starts answering after 2s, tripswitch opens its circuit, the webhook
// recovers, and tripswitch restores it; with openAction Ignore, with Bypass,
// and with Ignore and the API server signal. `make demo` runs it on envtest
// (Local), `make demo-cluster` and test/cluster in a real cluster (Cluster).
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/defaulthook"
)

// Names used in the demo cluster.
const (
	Namespace     = "demo"
	Configuration = "slow-mutator"
	Webhook       = "slow-mutator.tripswitch.demo"
	Breaker       = "slow-mutator"
)

// Environment is where the experiment runs: an API server that calls a
// webhook, and tripswitch's controller watching that API server. Execute
// creates the namespace, the webhook configuration and the breaker through
// Client, and makes the webhook slow through SetDelay; the environment owns
// the rest (Local: envtest, a webhook on 127.0.0.1 and the controller in
// this process; Cluster: a webhook Deployment behind a Service, and
// tripswitch as installed in the cluster).
type Environment interface {
	// Client is an administrator's client of the API server.
	Client() client.Client
	// ClientConfig is how the API server calls the webhook: at /mutate.
	ClientConfig() admissionregistrationv1.WebhookClientConfig
	// SetDelay makes every later answer of the webhook, /healthz's too, come
	// after d; 0 heals it.
	SetDelay(ctx context.Context, d time.Duration) error
	// Called reports whether the webhook reviewed this object's create, from
	// the object the API server returned.
	Called(ctx context.Context, created *corev1.ConfigMap) bool
	// Mutates says the webhook labels what it admits
	// (defaulthook.InjectedLabel), so each create says whether it went
	// through the webhook.
	Mutates() bool
	// String names the environment in the progress lines.
	String() string
}

// Options configure a demo run.
type Options struct {
	// Out receives progress lines.
	Out io.Writer
	// Creates is how many ConfigMaps each measured phase creates. Default 7.
	Creates int
	// Delay is the injected webhook delay. Default 2s, past the 1s timeout.
	Delay time.Duration
	// Passes are the runs, in order. Default Passes.
	Passes []Pass
}

// Pass is one run's open action, and whether the API server signal is on
// (with four clients creating at once while the webhook is delayed).
type Pass struct {
	Action v1alpha1.OpenAction
	Signal bool
}

// Passes are the demo's runs: Ignore, Bypass, then Ignore with the API
// server signal.
var Passes = []Pass{{v1alpha1.OpenActionIgnore, false}, {v1alpha1.OpenActionBypass, false}, {v1alpha1.OpenActionIgnore, true}}

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
	// Mutated: the webhook's label came back on the object (only where the
	// environment's webhook Mutates).
	Mutated bool
	Err     string
}

// Run is one pass of the scenario with one open action.
type Run struct {
	Action v1alpha1.OpenAction
	// Signal: the breaker also used the API server signal in this run, and
	// the creates of the delayed phase came four at a time, as from several
	// clients.
	Signal bool
	// Mutates: the webhook mutates, so each sample says whether it did.
	Mutates bool
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
	// Before and After are the configuration's annotations and webhooks as
	// JSON before the fault and after the close: a close restores it byte
	// for byte.
	Before, After string
	// Failures lists expectations that did not hold.
	Failures []string
}

// scenario is a running demo: its environment and the run's clock.
type scenario struct {
	opts  Options
	env   Environment
	c     client.Client
	start time.Time
}

// Execute runs the experiment in env: each of opts.Passes in turn. It
// creates the namespace, the webhook configuration and the breaker, and
// deletes them at the end. It returns the runs even when some expectation
// failed; the error says which.
func Execute(ctx context.Context, env Environment, opts Options) ([]Run, error) {
	if opts.Creates == 0 {
		opts.Creates = 7
	}
	if opts.Delay == 0 {
		opts.Delay = 2 * time.Second
	}
	if opts.Passes == nil {
		opts.Passes = Passes
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	e := &scenario{opts: opts, env: env, c: env.Client()}
	defer e.uninstall()
	if err := e.install(ctx); err != nil {
		return nil, err
	}
	logf(opts.Out, "%s; webhook %s", env, Webhook)

	var runs []Run
	var failed []string
	for _, pass := range opts.Passes {
		run, err := e.run(ctx, pass.Action, pass.Signal)
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

// install creates the namespace, the webhook configuration (Fail,
// timeoutSeconds 1, ConfigMap creates in the namespace) and the breaker,
// then waits until the API server calls the webhook.
func (e *scenario) install(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: Configuration},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:           Webhook,
			ClientConfig:   e.env.ClientConfig(),
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
	// What an interrupted run left goes first, and a namespace an earlier
	// run deleted may still be terminating (a cluster's namespace controller
	// empties it first).
	for _, obj := range []client.Object{wcb.DeepCopy(), cfg.DeepCopy(), ns.DeepCopy()} {
		if err := e.gone(ctx, obj, 3*time.Minute); err != nil {
			return err
		}
	}
	for _, obj := range []client.Object{ns, cfg, wcb} {
		if err := e.c.Create(ctx, obj); err != nil {
			return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
	}
	// The API server loads webhook configurations asynchronously: wait until
	// it calls this one before measuring anything.
	deadline := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: fmt.Sprintf("warmup-%d", i)}}
		err := e.c.Create(ctx, cm)
		if err == nil && e.env.Called(ctx, cm) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server never called the demo webhook (last create: %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// uninstall deletes the breaker (its finalizer restores the configuration
// if a circuit is still open) and the configuration, waiting until each is
// gone, then the namespace, without waiting: the next run waits for it
// (envtest has no namespace controller to finish it).
func (e *scenario) uninstall() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, obj := range []client.Object{
		&v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: Breaker}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: Configuration}},
	} {
		if err := e.c.Delete(ctx, obj); err == nil {
			_ = e.waitGone(ctx, obj)
		}
	}
	_ = e.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}})
}

// gone deletes obj if it exists and waits up to limit until it is gone.
func (e *scenario) gone(ctx context.Context, obj client.Object, limit time.Duration) error {
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
		return nil
	}
	if err := e.c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %T %s left by an earlier run: %w", obj, obj.GetName(), err)
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := e.waitGone(ctx, obj); err != nil {
		return fmt.Errorf("%T %s, left by an earlier run, still there after %s: %w", obj, obj.GetName(), limit, err)
	}
	return nil
}

func (e *scenario) waitGone(ctx context.Context, obj client.Object) error {
	for {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// run is one pass of the scenario with action.
func (e *scenario) run(ctx context.Context, action v1alpha1.OpenAction, signal bool) (Run, error) {
	r := Run{Action: action, Signal: signal, Mutates: e.env.Mutates(), Webhook: map[Phase]string{}}
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
	r.Before = e.snapshot(ctx)

	if err := e.env.SetDelay(ctx, e.opts.Delay); err != nil {
		return r, err
	}
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
	// The API server applies a configuration a moment after it stored it.
	if err := e.settle(ctx, "admitted", func(s Sample) bool { return s.Admitted }); err != nil {
		return r, err
	}
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

	if err := e.env.SetDelay(ctx, 0); err != nil {
		return r, err
	}
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
	r.After = e.snapshot(ctx)
	if e.env.Mutates() {
		if err := e.settle(ctx, "mutated", func(s Sample) bool { return s.Mutated }); err != nil {
			return r, err
		}
	}
	logf(out, "[%s] phase 5: circuit closed after %s: creating %d ConfigMaps", name, (r.ClosedAt - r.RecoveredAt).Round(10*time.Millisecond), e.opts.Creates)
	e.creates(ctx, &r, PhaseRecovered, e.opts.Creates)
	r.Failures = check(r)
	return r, nil
}

// configure sets the breaker's open action and API server signal.
func (e *scenario) configure(ctx context.Context, action v1alpha1.OpenAction, signal bool) error {
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

// Name names the run: its open action, and the API server signal if on.
func (r Run) Name() string {
	if r.Signal {
		return string(r.Action) + " + API server signal"
	}
	return string(r.Action)
}

// parallelCreates makes n ConfigMaps at once, as n clients would.
func (e *scenario) parallelCreates(ctx context.Context, r *Run, phase Phase, n int) {
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

func (e *scenario) since() time.Duration { return time.Since(e.start) }

// creates makes n ConfigMaps in the demo namespace and records each.
func (e *scenario) creates(ctx context.Context, r *Run, phase Phase, n int) {
	for range n {
		at := e.since()
		t0 := time.Now()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, GenerateName: "demo-"}}
		err := e.c.Create(ctx, cm)
		s := Sample{Phase: phase, At: at, Latency: time.Since(t0), Admitted: err == nil}
		if err != nil {
			s.Err = err.Error()
		}
		s.Mutated = err == nil && e.env.Mutates() && cm.Labels[defaulthook.InjectedLabel] == "true"
		r.Samples = append(r.Samples, s)
	}
}

// settle waits, with dry-run creates that are not measured, until one is
// what the next phase expects: the API server applies a configuration the
// controller wrote a moment after the write (a cluster's API server, busy,
// later than envtest's).
func (e *scenario) settle(ctx context.Context, what string, want func(Sample) bool) error {
	deadline := time.Now().Add(time.Minute)
	for {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, GenerateName: "settle-"}}
		err := e.c.Create(ctx, cm, client.DryRunAll)
		s := Sample{Admitted: err == nil, Mutated: err == nil && cm.Labels[defaulthook.InjectedLabel] == "true"}
		if want(s) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server did not apply the written configuration within a minute: a dry-run create is not %s (%v)", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// snapshot is the configuration's annotations and webhooks as JSON.
func (e *scenario) snapshot(ctx context.Context) string {
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := e.c.Get(ctx, client.ObjectKey{Name: Configuration}, &cfg); err != nil {
		return "unreadable: " + err.Error()
	}
	b, err := json.Marshal([]any{cfg.Annotations, cfg.Webhooks})
	if err != nil {
		return "unmarshallable: " + err.Error()
	}
	return string(b)
}

// describe reads the target webhook back from the API server.
func (e *scenario) describe(ctx context.Context) string {
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

func (e *scenario) watch(ctx context.Context) *watcher {
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

// MutatedIn counts the phase's creates the webhook mutated.
func (r Run) MutatedIn(p Phase) int {
	n := 0
	for _, s := range r.Samples {
		if s.Phase == p && s.Mutated {
			n++
		}
	}
	return n
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
	if r.Mutates {
		for _, p := range []Phase{PhaseHealthy, PhaseRecovered} {
			lat, _ := r.Latencies(p)
			expect(r.MutatedIn(p) == len(lat), "%s: %d of %d creates mutated, want all (the webhook reviewed each)", p, r.MutatedIn(p), len(lat))
		}
		expect(r.MutatedIn(PhaseOpen) == 0, "%s: %d creates mutated, want none (the webhook times out, or is skipped)", PhaseOpen, r.MutatedIn(PhaseOpen))
	}
	expect(r.Before != "" && r.Before == r.After, "the configuration after the close is not what it was before the fault:\nbefore %s\nafter  %s", r.Before, r.After)
	expect(r.Webhook[PhaseHealthy] == "failurePolicy=Fail", "healthy webhook reads %q", r.Webhook[PhaseHealthy])
	expect(r.Webhook[PhaseRecovered] == "failurePolicy=Fail", "restored webhook reads %q, want the original failurePolicy=Fail", r.Webhook[PhaseRecovered])
	return f
}

func logf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

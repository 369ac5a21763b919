package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/targetwatch"
)

const (
	target = "target.tripswitch.test"
	other  = "other.tripswitch.test"
)

// scriptedHealth is a HealthSource whose observations the test sets.
type scriptedHealth struct {
	mu  sync.Mutex
	obs map[string]probe.Observation
}

func newScriptedHealth() *scriptedHealth { return &scriptedHealth{obs: map[string]probe.Observation{}} }

func (h *scriptedHealth) Ensure(string, probe.Settings) {}
func (h *scriptedHealth) Stop(string)                   {}
func (h *scriptedHealth) Observe(key string) (probe.Observation, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o, ok := h.obs[key]
	return o, ok
}

// set makes breaker key look down (failures > 0), up (successes > 0) or unknown.
func (h *scriptedHealth) set(key string, st probe.Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o := probe.Observation{Last: probe.Result{Status: st, Reason: "scripted " + string(st)}}
	switch st {
	case probe.Healthy:
		o.ConsecutiveSuccesses, o.Verdict = 100, probe.VerdictHealthy
	case probe.Unhealthy:
		o.ConsecutiveFailures, o.Verdict = 100, probe.VerdictUnhealthy
	default:
		o.Verdict = probe.VerdictPending
	}
	h.obs[key] = o
}

// The package's control plane starts on first use; TestMain stops it.
var shared = testenv.Shared{Options: testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}}}

func controlPlane(t *testing.T) *testenv.Env {
	t.Helper()
	return shared.Get(t)
}

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	code := m.Run()
	shared.Stop()
	os.Exit(code)
}

// bed is one test's corner of the shared control plane: its own webhook
// configuration and breakers, named after the test.
type bed struct {
	t      *testing.T
	ctx    context.Context
	c      client.Client
	health *scriptedHealth
	clock  *clocktesting.FakeClock
	cfg    string // this test's configuration name
}

func newBed(t *testing.T) *bed {
	t.Helper()
	cfg := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	// A test's objects may outlive it (deletion waits for finalizers), so
	// each run of it under -count names its own.
	runs, _ := bedRuns.LoadOrStore(cfg, new(atomic.Int64))
	if n := runs.(*atomic.Int64).Add(1); n > 1 {
		cfg += fmt.Sprintf("-run%d", n)
	}
	return &bed{
		t: t, ctx: t.Context(), c: controlPlane(t).Client, health: newScriptedHealth(),
		clock: clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)),
		cfg:   cfg,
	}
}

// bedRuns counts the beds made for each test name.
var bedRuns sync.Map

// reconciler returns a fresh reconciler, as a restarted process would have,
// talking to the API server through c.
func (b *bed) reconciler(c client.Client) *controller.Reconciler {
	return &controller.Reconciler{Client: c, APIReader: c, Health: b.health, Clock: b.clock}
}

func (b *bed) createConfig(mutate func(*admissionregistrationv1.MutatingWebhookConfiguration)) *admissionregistrationv1.MutatingWebhookConfiguration {
	b.t.Helper()
	hook := func(name, path string) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9/" + path), CABundle: []byte("not-a-real-ca-" + name)},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}}}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			// Selects nothing, so these webhooks never slow the test's own writes.
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tripswitch.test/never": "true"}},
		}
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: b.cfg},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{hook(other, "other"), hook(target, "target")},
	}
	if mutate != nil {
		mutate(cfg)
	}
	if err := b.c.Create(b.ctx, cfg); err != nil {
		b.t.Fatalf("create webhook configuration: %v", err)
	}
	return cfg
}

func (b *bed) createBreaker(name string, mutate func(*v1alpha1.WebhookCircuitBreaker)) *v1alpha1.WebhookCircuitBreaker {
	b.t.Helper()
	wcb := &v1alpha1.WebhookCircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: b.cfg, WebhookName: target},
			AllowAdmissionWithoutMutation: true,
		},
	}
	if mutate != nil {
		mutate(wcb)
	}
	if err := b.c.Create(b.ctx, wcb); err != nil {
		b.t.Fatalf("create breaker: %v", err)
	}
	return wcb
}

func (b *bed) getConfig() *admissionregistrationv1.MutatingWebhookConfiguration {
	b.t.Helper()
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := b.c.Get(b.ctx, types.NamespacedName{Name: b.cfg}, &cfg); err != nil {
		b.t.Fatalf("get webhook configuration: %v", err)
	}
	return &cfg
}

func (b *bed) getBreaker(name string) *v1alpha1.WebhookCircuitBreaker {
	b.t.Helper()
	var wcb v1alpha1.WebhookCircuitBreaker
	if err := b.c.Get(b.ctx, types.NamespacedName{Name: name}, &wcb); err != nil {
		b.t.Fatalf("get breaker: %v", err)
	}
	return &wcb
}

// drive makes breaker name's webhook look st and reconciles until settled.
func (b *bed) drive(r *controller.Reconciler, name string, st probe.Status) {
	b.t.Helper()
	b.health.set(name, st)
	b.settle(r, name)
}

// settle reconciles name until neither the breaker nor the configuration
// changes, failing the test if that takes more than a few rounds.
func (b *bed) settle(r *controller.Reconciler, name string) {
	b.t.Helper()
	if err := b.trySettle(r, name); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bed) trySettle(r *controller.Reconciler, name string) error {
	var last string
	for i := 0; i < 12; i++ {
		_, err := r.Reconcile(b.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
		now := b.fingerprint(name)
		if err == nil && now == last {
			return nil
		}
		last = now
	}
	return fmt.Errorf("breaker %s did not settle within 12 reconciles", name)
}

func (b *bed) fingerprint(name string) string {
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	_ = b.c.Get(b.ctx, types.NamespacedName{Name: b.cfg}, &cfg)
	var wcb v1alpha1.WebhookCircuitBreaker
	_ = b.c.Get(b.ctx, types.NamespacedName{Name: name}, &wcb)
	return cfg.ResourceVersion + "/" + wcb.ResourceVersion
}

// webhookJSON is the exact stored form of the named webhook entry.
func webhookJSON(t *testing.T, cfg *admissionregistrationv1.MutatingWebhookConfiguration, name string) string {
	t.Helper()
	for _, w := range cfg.Webhooks {
		if w.Name == name {
			data, err := json.Marshal(w)
			if err != nil {
				t.Fatal(err)
			}
			return string(data)
		}
	}
	t.Fatalf("webhook %s missing from configuration", name)
	return ""
}

func hookOf(t *testing.T, cfg *admissionregistrationv1.MutatingWebhookConfiguration, name string) admissionregistrationv1.MutatingWebhook {
	t.Helper()
	for _, w := range cfg.Webhooks {
		if w.Name == name {
			return w
		}
	}
	t.Fatalf("webhook %s missing from configuration", name)
	return admissionregistrationv1.MutatingWebhook{}
}

func hasRecord(cfg *admissionregistrationv1.MutatingWebhookConfiguration) bool {
	_, ok := cfg.Annotations[circuit.AnnotationKey(target)]
	return ok
}

// startWatches runs target watches on the shared control plane until the
// test ends, as the manager would.
func startWatches(t *testing.T, b *bed) *targetwatch.Targets {
	t.Helper()
	cs, err := kubernetes.NewForConfig(controlPlane(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	watches := targetwatch.New(cs, func(string) {})
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { _ = watches.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return watches
}

package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestAPIServerSignalOpensAndHoldsTheCircuit: a webhook with failurePolicy
// Fail answers 500. Before the probes reach their threshold, the API
// server's own failure counts trip the signal and the circuit opens with
// reason APIServerFailing, shown in the status next to the probes. Healthy
// probes do not close it while the API server still saw failures in the
// window, nor once the window has slid past them with no calls at all
// (nothing says the calls pass: a recovery is confirmed, not assumed);
// the API server's own calls passing again do.
func TestAPIServerSignalOpensAndHoldsTheCircuit(t *testing.T) { signalScenario(t, false) }

// TestAmbiguousSignalDoesNotOpenAlone: another breaker names a webhook of
// the same name and type in another configuration. The API server's metrics
// cannot tell the two apart, so the same failures do not open the circuit
// on the signal alone, and the status says why.
func TestAmbiguousSignalDoesNotOpenAlone(t *testing.T) { signalScenario(t, true) }

func signalScenario(t *testing.T, ambiguous bool) {
	b := newBed(t)
	hook, label, hookName := signalTarget(t, b)
	name := b.cfg
	signalBreaker(b, name, hookName)
	if ambiguous {
		b.createBreaker(name+"-twin", func(wcb *v1alpha1.WebhookCircuitBreaker) {
			wcb.Spec.Target.ConfigurationName, wcb.Spec.Target.WebhookName = name+"-elsewhere", hookName
		})
	}
	r, tracker := signalReconciler(t, b)
	b.settle(r, name) // registers the signal
	tracker.Scrape(b.ctx)

	// The outage, as the API server lives it: every create fails to call the webhook.
	hook.SetStatus(500)
	failingCreates(t, b, label, "a", 12)
	b.clock.Step(time.Second)
	tracker.Scrape(b.ctx)
	b.health.set(name, probe.Unhealthy) // one failed probe: below the threshold of 3
	b.health.mu.Lock()
	o := b.health.obs[name]
	o.ConsecutiveFailures, o.Verdict = 1, probe.VerdictPending
	b.health.obs[name] = o
	b.health.mu.Unlock()
	b.settle(r, name)
	got := b.getBreaker(name)
	if ambiguous {
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAPIServerSignal)
		if got.Status.State != v1alpha1.StateClosed || c == nil || c.Reason != policy.ReasonSignalAmbiguous || !strings.Contains(c.Message, name+"-twin") {
			t.Fatalf("state %s, APIServerSignal %+v: want Closed and the ambiguity named", got.Status.State, c)
		}
		if a := got.Status.APIServer; a == nil || !a.Failing {
			t.Fatalf("status.apiServer %+v: the failures are still shown", got.Status.APIServer)
		}
		return
	}
	if got.Status.State != v1alpha1.StateOpen || len(got.Status.History) != 1 || !strings.HasPrefix(got.Status.History[0].Reason, "the API server's calls to the webhook failed") {
		t.Fatalf("state %s history %+v: want Open by the API server signal", got.Status.State, got.Status.History)
	}
	if a := got.Status.APIServer; a == nil || !a.Failing || a.Failures < 10 || a.FailureRatePercent < 50 {
		t.Fatalf("status.apiServer %+v", got.Status.APIServer)
	}

	// Probes healthy, but the failures are still in the window: stays open.
	b.drive(r, name, probe.Healthy)
	if s := b.getBreaker(name).Status.State; s != v1alpha1.StateOpen {
		t.Fatalf("closed with the API server signal still failing: %s", s)
	}
	// The window slides past the failures (no creates, so no new calls):
	// nothing confirms the webhook, so it stays open.
	b.clock.Step(31 * time.Second)
	tracker.Scrape(b.ctx)
	b.settle(r, name)
	if got := b.getBreaker(name); got.Status.State != v1alpha1.StateOpen || got.Status.APIServer == nil || got.Status.APIServer.Failing {
		t.Fatalf("state %s apiServer %+v: want Open, the signal clear but unconfirmed", got.Status.State, got.Status.APIServer)
	}
	// The webhook answers again, and the API server's calls (under Ignore
	// it still calls it) pass: that confirms it, and it closes.
	hook.SetStatus(0)
	for i := 0; i < 12; i++ {
		if err := b.c.Create(b.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-ok-%d", b.cfg, i), Labels: label}}); err != nil {
			t.Fatal(err)
		}
	}
	b.clock.Step(time.Second)
	tracker.Scrape(b.ctx)
	b.settle(r, name)
	got = b.getBreaker(name)
	if got.Status.State != v1alpha1.StateClosed || got.Status.APIServer == nil || got.Status.APIServer.Failing || got.Status.Outage != nil {
		t.Fatalf("state %s apiServer %+v outage %+v: want Closed on the API server's passing calls, the outage over", got.Status.State, got.Status.APIServer, got.Status.Outage)
	}
}

// Without the signal's permission the status says what to grant and where,
// in a condition of its own; the rest of the breaker stays Ready.
func TestSignalWithoutPermissionIsADegradedCondition(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	name := b.cfg
	b.createBreaker(name, func(wcb *v1alpha1.WebhookCircuitBreaker) {
		wcb.Spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true}
	})
	cfg, err := controlPlane(t).UserConfig("no-metrics-access")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tracker := &apisignal.Tracker{Source: apisignal.FromAPIServer(cs.CoreV1().RESTClient()), Interval: time.Second, Clock: b.clock}
	r := b.reconciler(b.c)
	r.Signals = tracker
	b.settle(r, name)
	tracker.Scrape(b.ctx)
	b.settle(r, name)
	got := b.getBreaker(name)
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAPIServerSignal)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != policy.ReasonSignalUnreadable {
		t.Fatalf("condition %+v, want APIServerSignal False (Unreadable)", c)
	}
	for _, want := range []string{"/metrics", "apiServerSignal.enabled=true", "config/apiserver-signal"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q does not name %q", c.Message, want)
		}
	}
	if ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v: the probes still work, the breaker can still act", ready)
	}
}

// signalTarget makes b's configuration call a webhook server of its own
// for creates of ConfigMaps labelled label, under failurePolicy Fail, with a
// webhook name of its own: the API server's metrics, and so the signal's
// ambiguity check, key webhooks by name across configurations, and every
// other test's webhook is called target.tripswitch.test.
func signalTarget(t *testing.T, b *bed) (*slowhook.Server, map[string]string, string) {
	t.Helper()
	hook, err := slowhook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })
	label := map[string]string{"tripswitch.test/signal": b.cfg}
	hookName := b.cfg + ".signal.tripswitch.test"
	b.createConfig(func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
		w := &cfg.Webhooks[1]
		w.Name = hookName
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + "/mutate"), CABundle: hook.CABundle}
		w.Rules = []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
		}}
		w.ObjectSelector = &metav1.LabelSelector{MatchLabels: label}
		w.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
		w.TimeoutSeconds = ptr.To[int32](2)
	})
	return hook, label, hookName
}

// failingCreates creates ConfigMaps labelled label until n of them were
// refused: the API server called the failing webhook n times.
func failingCreates(t *testing.T, b *bed, label map[string]string, prefix string, n int) {
	t.Helper()
	called := 0
	for i := 0; called < n; i++ {
		if i == 600 {
			t.Fatalf("the API server refused only %d of %d creates: it does not call the webhook", called, i)
		}
		err := b.c.Create(b.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%s-%d", b.cfg, prefix, i), Labels: label}})
		if err != nil {
			called++ // refused: the API server called the failing webhook
		} else {
			time.Sleep(50 * time.Millisecond) // it has not picked up the configuration yet
		}
	}
}

// TestTheSignalDoesNotReopenOnItsOutagesCalls: the probes open the
// circuit; the webhook fails the API server's calls too, but the signal's
// last read was before the outage, so it shows none of them when the
// webhook recovers and the probes close the circuit. The next read counts
// the calls the outage failed (the signal reads every few seconds): they
// must not open the circuit again after its recovery. One open and one
// close.
func TestTheSignalDoesNotReopenOnItsOutagesCalls(t *testing.T) {
	b := newBed(t)
	hook, label, hookName := signalTarget(t, b)
	name := b.cfg
	signalBreaker(b, name, hookName)
	r, tracker := signalReconciler(t, b)
	b.settle(r, name)
	// The webhook is in the API server's path: it reviewed a create.
	for i := 0; ; i++ {
		cm := fmt.Sprintf("%s-warm-%d", b.cfg, i)
		if err := b.c.Create(b.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: cm, Labels: label}}); err != nil {
			t.Fatal(err)
		}
		if hook.Saw("default", cm) {
			break
		}
		if i == 100 {
			t.Fatal("the API server does not call the webhook")
		}
		time.Sleep(50 * time.Millisecond)
	}
	tracker.Scrape(b.ctx)

	hook.SetStatus(500)
	b.drive(r, name, probe.Unhealthy)
	got := b.getBreaker(name)
	if got.Status.State != v1alpha1.StateOpen || got.Status.Outage == nil || got.Status.Outage.Evidence != v1alpha1.EvidenceProbes {
		t.Fatalf("state %s outage %+v: want Open on the probes", got.Status.State, got.Status.Outage)
	}
	// 12 calls fail in the outage, none read yet: refused while the API
	// server still has Fail, admitted once it has the open's Ignore.
	for i := range 12 {
		_ = b.c.Create(b.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-b-%d", b.cfg, i), Labels: label}})
	}
	hook.SetStatus(0)
	b.drive(r, name, probe.Healthy)
	if got := b.getBreaker(name); got.Status.State != v1alpha1.StateClosed || got.Status.Outage != nil {
		t.Fatalf("state %s outage %+v: want Closed on the healthy probes, the outage over", got.Status.State, got.Status.Outage)
	}
	b.clock.Step(time.Second)
	tracker.Scrape(b.ctx)
	b.settle(r, name)
	got = b.getBreaker(name)
	if got.Status.State != v1alpha1.StateClosed || len(got.Status.History) != 1 {
		t.Fatalf("state %s history %+v apiServer %+v: the signal opened the circuit again on the calls of the outage that ended",
			got.Status.State, got.Status.History, got.Status.APIServer)
	}
}

// signalBreaker makes an Ignore breaker of b's webhook hookName with the API
// server signal on: a 30 s window, 10 calls at least, 50 %.
func signalBreaker(b *bed, name, hookName string) {
	b.createBreaker(name, func(wcb *v1alpha1.WebhookCircuitBreaker) {
		wcb.Spec.Target.WebhookName = hookName
		wcb.Spec.OpenAction = v1alpha1.OpenActionIgnore
		wcb.Spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true, Window: &metav1.Duration{Duration: 30 * time.Second}, MinimumCalls: 10, FailureRateThreshold: 50}
	})
}

// signalReconciler is b's reconciler with a signal tracker that reads the
// API server's /metrics when the test scrapes, on b's clock.
func signalReconciler(t *testing.T, b *bed) (*controller.Reconciler, *apisignal.Tracker) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(controlPlane(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	tracker := &apisignal.Tracker{Source: apisignal.FromAPIServer(cs.CoreV1().RESTClient()), Interval: time.Second, Clock: b.clock}
	r := b.reconciler(b.c)
	r.Signals = tracker
	return r, tracker
}

package apisignal_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// TestSignalFromARealAPIServer: a validating webhook with failurePolicy
// Fail that answers 500, and one with Ignore that does the same; every
// create is a failed call the API server counts. The signal trips once the
// window holds the minimum number of calls, and not before; a healthy
// webhook's calls do not trip it.
func TestSignalFromARealAPIServer(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx := t.Context()
	hook, err := slowhook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "signal"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			signalWebhook(hook, "fail.example.com", admissionregistrationv1.Fail),
			signalWebhook(hook, "ignore.example.com", admissionregistrationv1.Ignore),
		},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait until the API server calls the webhooks.
	create := func(i int) error { return createLabelled(ctx, cs, fmt.Sprintf("cm-%d", i)) }
	i := 0
	for deadline := time.Now().Add(30 * time.Second); len(hook.Reviews()) < 2; i++ {
		if time.Now().After(deadline) {
			t.Fatal("the API server never called the webhooks")
		}
		_ = create(i)
		time.Sleep(50 * time.Millisecond)
	}

	clk := clocktesting.NewFakeClock(time.Now())
	var flipped []string
	tr := &apisignal.Tracker{Source: apisignal.FromAPIServer(cs.CoreV1().RESTClient()), Interval: time.Second, Clock: clk,
		Refresh: time.Nanosecond, Changed: func(b string) { flipped = append(flipped, b) }}
	settings := func(name string) apisignal.Settings {
		return apisignal.Settings{Webhook: apisignal.WebhookID{Name: name, Type: "validating"}, Window: 30 * time.Second, MinimumCalls: 10, FailureRateThreshold: 50}
	}
	for _, b := range []string{"fail", "ignore"} {
		if err := tr.Ensure(b, settings(b+".example.com")); err != nil {
			t.Fatal(err)
		}
	}
	tr.Scrape(ctx) // the baseline: increments count from here

	// Healthy calls: 12 creates that both webhooks admit.
	for range 12 {
		if err := create(i); err != nil {
			t.Fatal(err)
		}
		i++
	}
	clk.Step(time.Second)
	tr.Scrape(ctx)
	for _, b := range []string{"fail", "ignore"} {
		s, _ := tr.Observe(b)
		if s.Failing || s.Calls < 12 || s.Failures != 0 {
			t.Fatalf("%s while healthy: %+v", b, s)
		}
	}

	// The outage: 500s. Under Fail every create is refused; under Ignore admitted.
	hook.SetStatus(500)
	for n := 0; n < 20; n++ {
		_ = create(i)
		i++
		if n == 4 {
			clk.Step(time.Second)
			tr.Scrape(ctx)
			if s, _ := tr.Observe("fail"); s.Failing {
				t.Fatalf("failing after 5 failures among %d calls: %+v", s.Calls, s)
			}
		}
	}
	clk.Step(time.Second)
	tr.Scrape(ctx)
	s, _ := tr.Observe("fail")
	if !s.Failing || s.Failures < 20 || s.FailureRate < 50 {
		t.Fatalf("Fail policy after 20 failed calls: %+v", s)
	}
	// Validating webhooks are called in parallel, so the Ignore one saw every
	// create too: its failures come from the fail-open counter.
	if is, _ := tr.Observe("ignore"); !is.Failing || is.Failures < 20 {
		t.Fatalf("Ignore policy after 20 failed calls: %+v", is)
	}
	if !strings.Contains(strings.Join(flipped, ","), "fail") {
		t.Fatalf("no change notification for fail: %v", flipped)
	}

	// The window slides: 31 s later the failures are out of it.
	clk.Step(31 * time.Second)
	tr.Scrape(ctx)
	if s, _ := tr.Observe("fail"); s.Failing || s.Calls != 0 {
		t.Fatalf("after the window: %+v", s)
	}
}

// signalWebhook calls hook for every labelled ConfigMap create.
func signalWebhook(hook *slowhook.Server, name string, policy admissionregistrationv1.FailurePolicyType) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name:         name,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + "/validate"), CABundle: hook.CABundle},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
		}},
		ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"signal": "yes"}},
		FailurePolicy:           ptr.To(policy),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		TimeoutSeconds:          ptr.To[int32](2),
	}
}

func createLabelled(ctx context.Context, cs kubernetes.Interface, name string) error {
	_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"signal": "yes"}}}, metav1.CreateOptions{})
	return err
}

// TestSignalWithTwoAPIServers: a control plane of two kube-apiservers on one
// etcd, behind a proxy that sends each connection to either and cuts it
// after 1–3 s, so successive scrapes land on different instances. Instance A
// once counted 150 failed calls, B none. While the webhook is healthy the
// signal, on the real clock, must never say failing (before, every switch
// back to A fed A's old failures again: open in 12 s, never closed); an
// outage that both instances see must still make it fail.
func TestSignalWithTwoAPIServers(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	second := env.SecondAPIServer(t)
	ctx := t.Context()
	hook, err := slowhook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })
	pinned, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const name = "two-servers.example.com"
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "two-servers"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{signalWebhook(hook, name, admissionregistrationv1.Ignore)},
	}
	if _, err := pinned.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A's history: 150 failed calls (admitted, failurePolicy Ignore).
	hook.SetStatus(500)
	n := 0
	for failed := 0; failed < 150; n++ {
		if err := createLabelled(ctx, pinned, fmt.Sprintf("a-%d", n)); err != nil {
			t.Fatal(err)
		}
		if n%25 == 24 {
			failed = countOf(t, env, name).Failures
		}
	}
	hook.SetStatus(0)

	first := strings.TrimSuffix(strings.TrimPrefix(env.Config.Host, "https://"), "/")
	lb := testenv.StartBalancer(t, 3*time.Second, first, second)
	viaLB := func() *kubernetes.Clientset {
		c := rest.CopyConfig(env.Config)
		c.Host = "https://" + lb.Addr
		cs, err := kubernetes.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	scraper, writer := viaLB(), viaLB()

	var mu sync.Mutex
	var flips []apisignal.Status // every status shown while failing
	var tr *apisignal.Tracker
	tr = &apisignal.Tracker{Source: apisignal.FromAPIServer(scraper.CoreV1().RESTClient()), Interval: time.Second, Clock: clock.RealClock{},
		Refresh: time.Nanosecond,
		Changed: func(string) {
			if s, _ := tr.Observe("b"); s.Failing {
				mu.Lock()
				flips = append(flips, s)
				mu.Unlock()
			}
		}}
	if err := tr.Ensure("b", apisignal.Settings{Webhook: apisignal.WebhookID{Name: name, Type: "validating"},
		Window: 10 * time.Second, MinimumCalls: 10, FailureRateThreshold: 50}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = tr.Start(ctx) }()

	// Healthy traffic through the balancer for 25 s: two and a half windows,
	// a dozen reconnects.
	for end := time.Now().Add(25 * time.Second); time.Now().Before(end); n++ {
		_ = createLabelled(ctx, writer, fmt.Sprintf("h-%d", n)) // a cut connection may fail one
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	healthyFlips := append([]apisignal.Status(nil), flips...)
	mu.Unlock()
	if len(healthyFlips) > 0 {
		t.Fatalf("the healthy webhook's signal said failing %d times, first %+v", len(healthyFlips), healthyFlips[0])
	}
	conns := lb.Connections()
	if conns[first] < 2 || conns[second] < 2 {
		t.Fatalf("the balancer did not spread connections over both API servers: %v", conns)
	}
	// (The last scrape may be Unreadable: the proxy cuts connections, some
	// mid-response, as real reconnects do.)
	if s, _ := tr.Observe("b"); s.Calls == 0 {
		t.Fatalf("no healthy calls in the window: the test saw nothing: %+v", s)
	}

	// The outage both instances see.
	hook.SetStatus(500)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if s, _ := tr.Observe("b"); s.Failing {
			if s.FailureRate < 50 {
				t.Fatalf("failing below the threshold: %+v", s)
			}
			break
		}
		if time.Now().After(deadline) {
			s, _ := tr.Observe("b")
			t.Fatalf("an outage on both API servers did not make the signal fail in 60 s: %+v", s)
		}
		_ = createLabelled(ctx, writer, fmt.Sprintf("o-%d", n))
		n++
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("connections per API server: %v", lb.Connections())
}

// countOf reads one webhook's counts from the API server env.Config reaches.
func countOf(t *testing.T, env *testenv.Env, name string) struct{ Calls, Failures int } {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	data, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	r, err := apisignal.Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	c := r.Webhooks[apisignal.WebhookID{Name: name, Type: "validating"}]
	return struct{ Calls, Failures int }{int(c.Calls), int(c.Failures)}
}

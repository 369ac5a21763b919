package apisignal_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/testenv"
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
	webhook := func(name string, policy admissionregistrationv1.FailurePolicyType) admissionregistrationv1.ValidatingWebhook {
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
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "signal"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{webhook("fail.example.com", admissionregistrationv1.Fail), webhook("ignore.example.com", admissionregistrationv1.Ignore)},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait until the API server calls the webhooks.
	create := func(i int) error {
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Labels: map[string]string{"signal": "yes"}}}, metav1.CreateOptions{})
		return err
	}
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
		Changed: func(b string) { flipped = append(flipped, b) }}
	settings := func(name string) apisignal.Settings {
		return apisignal.Settings{Webhook: apisignal.Webhook{Name: name, Type: "validating"}, Window: 30 * time.Second, MinimumCalls: 10, FailureRateThreshold: 50}
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

package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// TestMaxOpenDurationClosesOnTheSystemClock: the controller binary, on the
// system clock, opens a failing webhook whose breaker has maxOpenDuration
// 1m (the shortest allowed) and onMaxOpen Close, and at the deadline puts
// its failurePolicy back to Fail although it still fails, within a few
// seconds of the record's openedAt + 1m (the controller looks again at the
// deadline, not at its next resync); it does not open again for this
// outage.
func TestMaxOpenDurationClosesOnTheSystemClock(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := t.Context()
	hook := startSlowHook(t)
	const name, webhook = "max-open", "max-open.tripswitch.e2e"
	cfg := slowValidating(hook, name, webhook)
	wcb := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                          v1alpha1.Target{Kind: v1alpha1.ValidatingWebhookConfiguration, ConfigurationName: name, WebhookName: webhook},
			AllowAdmissionWithoutValidation: true,
			MaxOpenDuration:                 &metav1.Duration{Duration: time.Minute},
			OnMaxOpen:                       v1alpha1.OnMaxOpenClose,
			Probe: v1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: 200 * time.Millisecond}, Timeout: &metav1.Duration{Duration: 100 * time.Millisecond},
				FailureThreshold: 2, SuccessThreshold: 2},
		}}
	for _, o := range []client.Object{cfg, wcb} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	startController(t, adminKubeconfig(t, env), "max-open", "--leader-elect=false")
	read := func(ctx context.Context) (policy admissionregistrationv1.FailurePolicyType, rec *v1alpha1.CircuitRecord, err error) {
		var c admissionregistrationv1.ValidatingWebhookConfiguration
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &c); err != nil {
			return "", nil, err
		}
		view, err := circuit.View(&c)
		if err != nil {
			return "", nil, err
		}
		st := circuit.Inspect(view, webhook)
		return *c.Webhooks[0].FailurePolicy, st.Record, nil
	}
	eventually(t, 30*time.Second, "the breaker armed", func(ctx context.Context) (bool, error) {
		var got v1alpha1.WebhookCircuitBreaker
		err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &got)
		return err == nil && got.Status.State == v1alpha1.StateClosed, fmt.Errorf("state %s: %v", got.Status.State, err)
	})
	hook.SetDelay(2 * time.Second)
	var openedAt time.Time
	eventually(t, 30*time.Second, "open", func(ctx context.Context) (bool, error) {
		p, rec, err := read(ctx)
		if rec != nil {
			openedAt = rec.OpenedAt.Time
		}
		return err == nil && p == admissionregistrationv1.Ignore && rec != nil, fmt.Errorf("policy %s record %v: %v", p, rec != nil, err)
	})
	eventually(t, 90*time.Second, "failed closed again at maxOpenDuration", func(ctx context.Context) (bool, error) {
		p, rec, err := read(ctx)
		return err == nil && p == admissionregistrationv1.Fail && rec == nil, fmt.Errorf("policy %s record %v: %v", p, rec != nil, err)
	})
	late := time.Since(openedAt.Add(time.Minute))
	t.Logf("closed %s after openedAt + maxOpenDuration (openedAt is kept to the second)", late.Round(10*time.Millisecond))
	if late < -time.Second || late > 10*time.Second {
		t.Fatalf("closed %s after the deadline, want within 10 s", late)
	}
	// Still failing: it stays closed (disarmed) for this outage.
	time.Sleep(3 * time.Second)
	if p, rec, err := read(ctx); err != nil || p != admissionregistrationv1.Fail || rec != nil {
		t.Fatalf("reopened during the same outage: policy %s record %v: %v", p, rec != nil, err)
	}
	var got v1alpha1.WebhookCircuitBreaker
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.State != v1alpha1.StateDisarmed {
		t.Fatalf("state %s, want Disarmed", got.Status.State)
	}
}

// startSlowHook starts a slowhook server until the test ends.
func startSlowHook(t *testing.T) *slowhook.Server {
	t.Helper()
	hook, err := slowhook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })
	return hook
}

// configMapCreates is the rule of the e2e webhooks: ConfigMap creates.
var configMapCreates = admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
	Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}

// inNoNamespace selects no namespace: the API server never calls the
// webhook (or applies the policy) on the test's own writes.
var inNoNamespace = &metav1.LabelSelector{MatchLabels: map[string]string{"tripswitch.e2e/never": "true"}}

// slowValidating is a validating configuration of one webhook served by
// hook's /validate (failurePolicy Fail, 1 s timeout) for ConfigMap creates
// in no namespace: only the probes call it.
func slowValidating(hook *slowhook.Server, name, webhook string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: webhook,
			ClientConfig:  admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + "/validate"), CABundle: hook.CABundle},
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), TimeoutSeconds: ptr.To(int32(1)),
			Rules: []admissionregistrationv1.RuleWithOperations{configMapCreates}, NamespaceSelector: inNoNamespace,
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}}}}
}

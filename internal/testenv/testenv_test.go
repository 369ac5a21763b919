package testenv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/internal/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/testenv"
)

// TestAPIServerCallsURLWebhook proves the test bed: the real API server calls a
// TLS webhook on 127.0.0.1 for a ConfigMap create.
func TestAPIServerCallsURLWebhook(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	hook, err := slowhook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })
	ctx := t.Context()

	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "bed"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "bed.tripswitch.test",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + "/mutate"), CABundle: hook.CABundle},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		}},
	}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatalf("create webhook configuration: %v", err)
	}

	// The API server picks up new webhook configurations asynchronously; with
	// failurePolicy Fail, creates fail or skip the webhook until it does.
	waitForWebhook(ctx, t, env, hook)

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "called"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatalf("create ConfigMap with the webhook active: %v", err)
	}
	if !hook.Saw("default", "called") {
		t.Fatalf("API server admitted ConfigMap default/called without calling the webhook; webhook saw %+v", hook.Reviews())
	}
}

func waitForWebhook(ctx context.Context, t *testing.T, env *testenv.Env, hook *slowhook.Server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		name := fmt.Sprintf("warmup-%d", i)
		err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
		if err == nil && hook.Saw("default", name) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("webhook at %s was never called within 30s; it saw %+v", hook.URL, hook.Reviews())
}

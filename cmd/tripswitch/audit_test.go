package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
)

// TestAuditCommand: `tripswitch audit BREAKER` prints every object of the
// window with the validating webhook's verdict; -o json is the report.
func TestAuditCommand(t *testing.T) {
	env, kubeconfig := cluster(t)
	ctx, c := t.Context(), env.Client
	hook, err := slowhook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })
	hook.SetDeny("forbidden-")

	// Objects first, then the webhook: these were admitted without it.
	from := time.Now().Add(-time.Minute)
	for _, name := range []string{"forbidden-1", "fine-1"} {
		if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"audited": "yes"}}}); err != nil {
			t.Fatal(err)
		}
	}
	to := time.Now().Add(time.Minute)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "policy"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "policy.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + "/validate"), CABundle: hook.CABundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"audited": "yes"}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if err := c.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	wcb := &v1alpha1.WebhookCircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "policy"},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                          v1alpha1.Target{Kind: v1alpha1.ValidatingWebhookConfiguration, ConfigurationName: "policy", WebhookName: "policy.example.com"},
			AllowAdmissionWithoutValidation: true,
		},
	}
	if err := c.Create(ctx, wcb); err != nil {
		t.Fatal(err)
	}
	closed := metav1.NewTime(to)
	wcb.Status.History = []v1alpha1.OpenWindow{{OpenedAt: metav1.NewTime(from), ClosedAt: &closed, Action: v1alpha1.OpenActionBypass}}
	if err := c.Status().Update(ctx, wcb); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := dispatch([]string{"audit", "policy", "--kubeconfig", kubeconfig}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{"2 objects admitted without it", "Objected: 1", "NoObjection: 1", "Objected     CREATE     ConfigMap  default/forbidden-1", `names starting with "forbidden-" are not allowed`} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}

	out.Reset()
	if err := dispatch([]string{"audit", "--kubeconfig", kubeconfig, "-o", "json", "policy"}, &out); err != nil {
		t.Fatal(err)
	}
	var r audit.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Found != 2 || r.Counts[audit.Objected] != 1 {
		t.Fatalf("json report %+v (%v):\n%s", r, err, out.String())
	}

	for _, args := range [][]string{{"audit"}, {"audit", "policy", "--window", "2", "--kubeconfig", kubeconfig}, {"audit", "policy", "-o", "yaml"}, {"audit", "nope", "--kubeconfig", kubeconfig}} {
		out.Reset()
		if err := dispatch(args, &out); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}

package webhookchain_test

import (
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/webhookchain"
)

// TestReadOnTheAPIServer: Read sees both kinds with the API server's
// defaults (timeoutSeconds 10) and reinvocation, and a chain of two slow
// mutating webhooks and a validating one is said to exceed 60 s.
func TestReadOnTheAPIServer(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx := t.Context()
	rules := []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{"CREATE"},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}
	cc := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/x")}
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	never := &metav1.LabelSelector{MatchLabels: map[string]string{"never": "matches"}}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "slow-mutating"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "a.example.com", ClientConfig: cc, Rules: rules, SideEffects: none, AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](20), NamespaceSelector: never,
				ReinvocationPolicy: ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy)},
			{Name: "b.example.com", ClientConfig: cc, Rules: rules, SideEffects: none, AdmissionReviewVersions: []string{"v1"}, NamespaceSelector: never},
		}}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "validating"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "v.example.com", ClientConfig: cc, Rules: rules, SideEffects: none, AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](5), NamespaceSelector: never},
		}}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	hooks, err := webhookchain.Read(ctx, env.Client)
	if err != nil {
		t.Fatal(err)
	}
	if len(hooks) != 3 || !hooks[0].Reinvoked || hooks[1].Reinvoked || webhookchain.Timeout(hooks[1].Webhook) != 10*time.Second {
		t.Fatalf("read %+v", hooks)
	}
	// b (10 s) is the target: a twice (40 s) + b + v (5 s) = 55 s.
	verdict := webhookchain.Judge(hooks[1].Webhook, hooks, 0)
	if verdict.Worst != 55*time.Second || verdict.Exceeds {
		t.Fatalf("verdict %+v", verdict)
	}
	if verdict = webhookchain.Judge(hooks[1].Webhook, hooks, 50*time.Second); !verdict.Exceeds {
		t.Fatalf("under a 50 s deadline: %+v", verdict)
	}
	t.Log(verdict.Message)
}

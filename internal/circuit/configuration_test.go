package circuit

import (
	"reflect"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// TestViewIsOneModelForBothKinds: a mutating and a validating entry with the
// same fields give the same Webhook but for its kind.
func TestViewIsOneModelForBothKinds(t *testing.T) {
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
	}}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	se := ptr.To(admissionregistrationv1.SideEffectClassNone)
	cc := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:8443/x")}
	mc := []admissionregistrationv1.MatchCondition{{Name: "n", Expression: "true"}}
	fp := ptr.To(admissionregistrationv1.Fail)
	mut := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "w", FailurePolicy: fp, MatchConditions: mc, ClientConfig: cc,
			TimeoutSeconds: ptr.To[int32](3), AdmissionReviewVersions: []string{"v1"}, Rules: rules, NamespaceSelector: sel, ObjectSelector: sel, SideEffects: se}}}
	val := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "w", FailurePolicy: fp, MatchConditions: mc, ClientConfig: cc,
			TimeoutSeconds: ptr.To[int32](3), AdmissionReviewVersions: []string{"v1"}, Rules: rules, NamespaceSelector: sel, ObjectSelector: sel, SideEffects: se}}}
	m, err := View(mut)
	if err != nil {
		t.Fatal(err)
	}
	v, err := View(val)
	if err != nil {
		t.Fatal(err)
	}
	mw, vw := m.Webhooks[0], v.Webhooks[0]
	if !mw.Mutating() || vw.Mutating() || mw.Kind != v1alpha1.MutatingWebhookConfiguration || vw.Kind != v1alpha1.ValidatingWebhookConfiguration {
		t.Fatalf("kinds: %s, %s", mw.Kind, vw.Kind)
	}
	want := Webhook{Configuration: "cfg", Kind: mw.Kind, Name: "w", FailurePolicy: fp, MatchConditions: mc, ClientConfig: cc,
		TimeoutSeconds: ptr.To[int32](3), ReviewVersions: []string{"v1"}, Rules: rules, NamespaceSelector: sel, ObjectSelector: sel, SideEffects: se}
	if !reflect.DeepEqual(mw, want) {
		t.Errorf("mutating view %+v, want %+v", mw, want)
	}
	vw.Kind = mw.Kind
	if !reflect.DeepEqual(vw, want) {
		t.Errorf("validating view differs from the mutating one: %+v", vw)
	}
	if _, err := View(&admissionregistrationv1.ValidatingAdmissionPolicy{}); err == nil {
		t.Error("View accepted a ValidatingAdmissionPolicy")
	}
}

func TestKindNames(t *testing.T) {
	for _, k := range Kinds {
		back, err := KindOf(ShortKind(k))
		if err != nil || back != k {
			t.Errorf("KindOf(ShortKind(%s)) = %s, %v", k, back, err)
		}
	}
	// The API server labels its admission webhook metrics type="admit" for
	// mutating webhooks.
	if MetricType(v1alpha1.MutatingWebhookConfiguration) != "admit" || MetricType(v1alpha1.ValidatingWebhookConfiguration) != "validating" {
		t.Error("metric types")
	}
	if k, err := KindOf("Mutating"); err != nil || k != v1alpha1.MutatingWebhookConfiguration {
		t.Errorf("KindOf(Mutating) = %s, %v", k, err)
	}
	if _, err := KindOf("other"); err == nil {
		t.Error("KindOf(other) succeeded")
	}
}

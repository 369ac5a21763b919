package circuit

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// TestDropAfterAnOwnersRevertOnTheAPIServer: during a trial, an owner puts
// the webhook's failurePolicy back (a server-side apply of its own fields,
// which leaves tripswitch's matchCondition in place). Dropping the record
// on the real API server gives back tripswitch's sampled condition and
// leaves the owner's failurePolicy: without it, the condition would send
// most requests past the webhook for good, with no record to end it.
func TestDropAfterAnOwnersRevertOnTheAPIServer(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx := t.Context()
	orig := testConfig(map[string]string{"team": "platform"}, nil)
	orig.ResourceVersion = ""
	for i := range orig.Webhooks {
		w := &orig.Webhooks[i]
		w.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassNone)
		w.AdmissionReviewVersions = []string{"v1"}
		w.ClientConfig.CABundle = nil
	}
	if err := env.Client.Create(ctx, orig); err != nil {
		t.Fatal(err)
	}
	created := orig.DeepCopy()
	w := Writer{Client: env.Client, Budget: NoBudget{}}
	read := func() *Configuration {
		t.Helper()
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		if err := env.Client.Get(ctx, client.ObjectKey{Name: orig.Name}, &cfg); err != nil {
			t.Fatal(err)
		}
		return mustView(t, &cfg)
	}
	rec, err := w.Open(ctx, read(), target, openRecord(v1alpha1.OpenActionBypass))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.StartTrial(ctx, read(), rec, 6, metav1.Now()); err != nil {
		t.Fatal(err)
	}
	// The owner applies its own fields: failurePolicy Fail for the webhook.
	apply := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: orig.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: target, FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			ClientConfig: created.Webhooks[1].ClientConfig, SideEffects: created.Webhooks[1].SideEffects, AdmissionReviewVersions: []string{"v1"}}},
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(apply)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}), client.FieldOwner("owner"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	reverted := read()
	st := Inspect(reverted, target)
	if st.Intact() || conditionIndex(st.Webhook.MatchConditions, MatchConditionName) < 0 {
		t.Fatalf("after the owner's apply: intact %v, conditions %+v; want tripswitch's condition left, the change not intact", st.Intact(), st.Webhook.MatchConditions)
	}
	if err := w.Drop(ctx, reverted, target); err != nil {
		t.Fatal(err)
	}
	after := read()
	st = Inspect(after, target)
	if st.Record != nil || len(st.Webhook.MatchConditions) != 0 {
		t.Fatalf("after the drop: record %+v, matchConditions %+v; want neither", st.Record, st.Webhook.MatchConditions)
	}
	got := after.Object.(*admissionregistrationv1.MutatingWebhookConfiguration)
	if !equality.Semantic.DeepEqual(got.Webhooks, created.Webhooks) || got.Annotations["team"] != "platform" || len(got.Annotations) != 1 {
		t.Errorf("after the drop the configuration is not the owner's:\n%+v\nwant\n%+v", got.Webhooks[1], created.Webhooks[1])
	}
}

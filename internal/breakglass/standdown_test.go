package breakglass_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/breakglass"
	"github.com/tripswitch-dev/tripswitch/internal/testenv"
)

// TestStandDown: the controller's Deployment is scaled to zero, the stand
// down waits for the leader's Lease to expire (its holder never releases
// it, as after a crash), restores the intact circuit, releases every
// breaker it can, and fails naming the one whose circuit someone changed,
// whose finalizer stays.
func TestStandDown(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx, c := t.Context(), env.Client
	const ns = "guards"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "tripswitch"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "tripswitch", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "tripswitch"}}}}},
	}
	renewed := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "tripswitch.dev", Namespace: ns},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("crashed-replica"), LeaseDurationSeconds: ptr.To[int32](3), RenewTime: &renewed},
	}
	for _, o := range []client.Object{deploy, lease} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	uids := map[string]types.UID{}
	// A breaker without the finalizer (its configuration never approved, so
	// not even readable) holds nothing and must not fail the stand-down.
	unapproved := &v1alpha1.WebhookCircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "unapproved"},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{AllowAdmissionWithoutMutation: true,
			Target: v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "sd-missing", WebhookName: "target.example.com"}},
	}
	if err := c.Create(ctx, unapproved); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"intact", "altered", "closed"} {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "sd-" + name},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{hook("target.example.com")},
		}
		b := &v1alpha1.WebhookCircuitBreaker{
			ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{v1alpha1.Finalizer}},
			Spec: v1alpha1.WebhookCircuitBreakerSpec{AllowAdmissionWithoutMutation: true,
				Target: v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "sd-" + name, WebhookName: "target.example.com"}},
		}
		for _, o := range []client.Object{cfg, b} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		uids[name] = b.UID
	}
	original := webhooksJSON(t, c, "sd-intact")
	open(t, c, v1alpha1.MutatingWebhookConfiguration, "sd-intact", "target.example.com", v1alpha1.OpenActionBypass, "intact", uids["intact"])
	open(t, c, v1alpha1.MutatingWebhookConfiguration, "sd-altered", "target.example.com", v1alpha1.OpenActionIgnore, "altered", uids["altered"])
	var altered admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "sd-altered"}, &altered); err != nil {
		t.Fatal(err)
	}
	altered.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	if err := c.Update(ctx, &altered); err != nil {
		t.Fatal(err)
	}

	var log bytes.Buffer
	err := breakglass.StandDown{Client: c, Namespace: ns, Deployment: "tripswitch", Lease: "tripswitch.dev", Timeout: time.Minute, Log: &log}.Run(ctx)
	t.Logf("stand down said:\n%s", log.String())
	if err == nil || !strings.Contains(err.Error(), "breaker altered") || !strings.Contains(err.Error(), "someone changed") ||
		!strings.Contains(err.Error(), "1 of 4 breakers not released") {
		t.Fatalf("stand down with a changed circuit: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(deploy), deploy); err != nil || *deploy.Spec.Replicas != 0 {
		t.Fatalf("deployment replicas %d (%v), want 0", ptr.Deref(deploy.Spec.Replicas, -1), err)
	}
	if !time.Now().After(renewed.Add(3 * time.Second)) {
		t.Fatal("the stand down acted before the crashed leader's lease expired")
	}
	if got := webhooksJSON(t, c, "sd-intact"); got != original {
		t.Fatalf("the intact circuit was not restored:\n%s\nwant\n%s", got, original)
	}
	for name, want := range map[string]int{"intact": 0, "closed": 0, "altered": 1} {
		var b v1alpha1.WebhookCircuitBreaker
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &b); err != nil {
			t.Fatal(err)
		}
		if len(b.Finalizers) != want {
			t.Errorf("breaker %s has finalizers %v, want %d", name, b.Finalizers, want)
		}
	}
}

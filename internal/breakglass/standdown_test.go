package breakglass_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/breakglass"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// TestStandDown: the controller's Deployment is scaled to zero, the stand
// down waits for the leader's Lease to expire (its holder never releases
// it, as after a crash), restores the intact circuit (its status says the
// stand-down did, run by helm uninstall, not a break-glass restore),
// releases every breaker it can, and fails naming the one whose circuit
// someone changed, whose finalizer stays, and so does the Lease. Once that
// is fixed, the stand-down run again succeeds and deletes the Lease.
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
	var intact v1alpha1.WebhookCircuitBreaker
	if err := c.Get(ctx, client.ObjectKey{Name: "intact"}, &intact); err != nil {
		t.Fatal(err)
	}
	intact.Status.State = v1alpha1.StateOpen // as the controller showed it
	if err := c.Status().Update(ctx, &intact); err != nil {
		t.Fatal(err)
	}
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
	sd := breakglass.StandDown{Client: c, Namespace: ns, Deployment: "tripswitch", Lease: "tripswitch.dev", Timeout: time.Minute, By: "helm uninstall", Log: &log}
	err := sd.Run(ctx)
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
	if err := c.Get(ctx, client.ObjectKey{Name: "intact"}, &intact); err != nil {
		t.Fatal(err)
	}
	restored := meta.FindStatusCondition(intact.Status.Conditions, v1alpha1.ConditionCircuitOpen)
	if intact.Status.State != v1alpha1.StateClosed || restored == nil || restored.Reason != breakglass.StandDownReason ||
		!strings.HasPrefix(restored.Message, "restored by the stand-down before an uninstall (helm uninstall) at ") {
		t.Errorf("the restored breaker's status: state %s, CircuitOpen %+v; want Closed, reason %s, restored by the stand-down (helm uninstall)",
			intact.Status.State, restored, breakglass.StandDownReason)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(lease), lease); err != nil {
		t.Fatalf("a stand-down that failed deleted the Lease (%v): it must stay until every breaker is released", err)
	}

	// The operator takes the altered circuit as it is: its record goes.
	if err := c.Get(ctx, client.ObjectKey{Name: "sd-altered"}, &altered); err != nil {
		t.Fatal(err)
	}
	delete(altered.Annotations, circuit.AnnotationKey("target.example.com"))
	if err := c.Update(ctx, &altered); err != nil {
		t.Fatal(err)
	}
	log.Reset()
	err = sd.Run(ctx)
	t.Logf("stand down, run again, said:\n%s", log.String())
	if err != nil {
		t.Fatalf("stand down once every circuit can be released: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(lease), lease); !apierrors.IsNotFound(err) {
		t.Fatalf("after a stand-down that released every breaker, get lease: %v; want NotFound (a Lease must mean a controller led since)", err)
	}
}

// TestStandDownRefusesWithoutTheController: a Helm release "guard" runs its
// controller as platform-guard/guard-tripswitch and a replica leads (it
// renewed its Lease just now, for an hour). A stand-down told the wrong
// namespace, or the wrong Deployment, or forced past a leader that still
// renews, changes nothing: the circuit stays open (the live controller owns
// it), every finalizer stays, the Deployment keeps its replicas, and the
// error says why and what to pass. Found by its labels, the Deployment is
// stopped and the wait for the live leader refuses, saying it stays at 0;
// once the Lease is released the same stand-down restores and releases.
// --force with no controller anywhere goes on, and says so.
func TestStandDownRefusesWithoutTheController(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx, c := t.Context(), env.Client
	for _, ns := range []string{"platform-guard", "tripswitch-system", "crowded"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	deployment := func(ns, name string) *appsv1.Deployment {
		l := map[string]string{"app.kubernetes.io/name": "tripswitch", "app.kubernetes.io/component": "controller", "app.kubernetes.io/instance": name}
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: l},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "tripswitch"}}}}},
		}
	}
	guard := deployment("platform-guard", "guard-tripswitch")
	renewed := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "tripswitch.dev", Namespace: "platform-guard"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("guard-tripswitch-7d9f-x2x_0b1c"),
			LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &renewed},
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "sd-live"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{hook("target.example.com")},
	}
	b := &v1alpha1.WebhookCircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "live", Finalizers: []string{v1alpha1.Finalizer}},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{AllowAdmissionWithoutMutation: true,
			Target: v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "sd-live", WebhookName: "target.example.com"}},
	}
	for _, o := range []client.Object{guard, deployment("crowded", "a-tripswitch"), deployment("crowded", "b-tripswitch"), lease, cfg, b} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	original := webhooksJSON(t, c, "sd-live")
	open(t, c, v1alpha1.MutatingWebhookConfiguration, "sd-live", "target.example.com", v1alpha1.OpenActionBypass, "live", b.UID)
	opened := webhooksJSON(t, c, "sd-live")

	unchanged := func(t *testing.T, replicas int32) {
		t.Helper()
		if got := webhooksJSON(t, c, "sd-live"); got != opened {
			t.Errorf("the live controller's circuit was changed:\n%s\nwant it still open:\n%s", got, opened)
		}
		var got v1alpha1.WebhookCircuitBreaker
		if err := c.Get(ctx, client.ObjectKey{Name: "live"}, &got); err != nil || len(got.Finalizers) != 1 {
			t.Errorf("breaker live: finalizers %v (%v), want its finalizer kept", got.Finalizers, err)
		}
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(guard), &d); err != nil || ptr.Deref(d.Spec.Replicas, -1) != replicas {
			t.Errorf("guard-tripswitch: replicas %d (%v), want %d", ptr.Deref(d.Spec.Replicas, -1), err, replicas)
		}
	}
	for _, tc := range []struct {
		name       string
		sd         breakglass.StandDown
		wantErr    []string
		wantNoCtrl bool
		replicas   int32
	}{
		{name: "the chart's default namespace, not the release's",
			sd:      breakglass.StandDown{Namespace: "tripswitch-system", Deployment: "tripswitch"},
			wantErr: []string{"deployment tripswitch-system/tripswitch does not exist", "--namespace and --deployment", "--force"}, wantNoCtrl: true, replicas: 2},
		{name: "the flag's default Deployment, not the release's",
			sd:      breakglass.StandDown{Namespace: "platform-guard", Deployment: "tripswitch"},
			wantErr: []string{"platform-guard/tripswitch does not exist", "labelled as tripswitch's controller there: guard-tripswitch"}, wantNoCtrl: true, replicas: 2},
		{name: "no Deployment labelled as the controller in the namespace",
			sd:      breakglass.StandDown{Namespace: "tripswitch-system"},
			wantErr: []string{"no Deployment in namespace tripswitch-system is labelled app.kubernetes.io/component=controller,app.kubernetes.io/name=tripswitch"}, wantNoCtrl: true, replicas: 2},
		{name: "two Deployments labelled as the controller",
			sd:      breakglass.StandDown{Namespace: "crowded"},
			wantErr: []string{"2 Deployments in namespace crowded", "a-tripswitch, b-tripswitch", "--deployment"}, replicas: 2},
		{name: "forced past a wrong Deployment while the leader renews",
			sd:      breakglass.StandDown{Namespace: "platform-guard", Deployment: "tripswitch", Force: true},
			wantErr: []string{"a replica still leads", "held by guard-tripswitch-7d9f-x2x_0b1c", "No circuit was restored", "nothing was stopped"}, replicas: 2},
		{name: "found by its labels, stopped, but the leader renews",
			sd:      breakglass.StandDown{Namespace: "platform-guard"},
			wantErr: []string{"a replica still leads", "deployment platform-guard/guard-tripswitch stays at 0 replicas"}, replicas: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			sd := tc.sd
			sd.Client, sd.Lease, sd.Timeout, sd.Log = c, "tripswitch.dev", 2*time.Second, &log
			err := sd.Run(ctx)
			t.Logf("stand down said:\n%s", log.String())
			if err == nil {
				t.Fatal("stand down succeeded, want a refusal")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if got := errors.Is(err, breakglass.ErrNoController); got != tc.wantNoCtrl {
				t.Errorf("errors.Is(err, ErrNoController) = %v, want %v", got, tc.wantNoCtrl)
			}
			unchanged(t, tc.replicas)
		})
	}

	// The leader lets go: the same stand-down finishes, and says what it did.
	lease.Spec.HolderIdentity = nil
	if err := c.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if err := (breakglass.StandDown{Client: c, Namespace: "platform-guard", Lease: "tripswitch.dev", Timeout: 2 * time.Second, Log: &log}).Run(ctx); err != nil {
		t.Fatalf("stand down after the lease was released: %v\n%s", err, log.String())
	}
	for _, want := range []string{"deployment platform-guard/guard-tripswitch was at 0 replicas already", "lease platform-guard/tripswitch.dev is released",
		"breaker live: restored", "breaker live: removed finalizer", "restored 1 circuits; removed the finalizer from 1 of 1 breakers"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("stand down said:\n%s\nwant %q", log.String(), want)
		}
	}
	if got := webhooksJSON(t, c, "sd-live"); got != original {
		t.Errorf("not restored:\n%s\nwant\n%s", got, original)
	}

	// --force where no controller runs and no Lease exists goes on, and says so.
	log.Reset()
	if err := (breakglass.StandDown{Client: c, Namespace: "tripswitch-system", Lease: "tripswitch.dev", Force: true, Log: &log}).Run(ctx); err != nil {
		t.Fatalf("forced stand down: %v", err)
	}
	for _, want := range []string{"no controller Deployment found", "--force: nothing stopped", "lease tripswitch-system/tripswitch.dev does not exist"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("forced stand down said:\n%s\nwant %q", log.String(), want)
		}
	}
}

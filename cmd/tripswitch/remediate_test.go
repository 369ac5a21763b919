package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/defaulthook"
	"github.com/tripswitch-dev/tripswitch/internal/remediate"
)

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// widgetCRD installs a namespaced custom resource, Widget, whose spec
// takes any field.
func widgetCRD(t *testing.T, c client.Client, dyn dynamic.Interface) {
	t.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.example.com"},
		"spec": map[string]any{
			"group": "example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true, "schema": map[string]any{
				"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
					"spec": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}},
		},
	}}
	if err := c.Create(t.Context(), crd); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := dyn.Resource(widgets).Namespace("default").List(t.Context(), metav1.ListOptions{}); err == nil {
			return
		} else if i == 100 {
			t.Fatalf("the Widget CRD is not served: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func widget(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": "default", "labels": map[string]any{"demo": "yes"}}}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	return u
}

func breakerWithWindow(t *testing.T, c client.Client, name string, kind v1alpha1.TargetKind, from, to time.Time) {
	t.Helper()
	wcb := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.WebhookCircuitBreakerSpec{
		Target: v1alpha1.Target{Kind: kind, ConfigurationName: name, WebhookName: name + ".example.com"}}}
	if kind == v1alpha1.MutatingWebhookConfiguration {
		wcb.Spec.AllowAdmissionWithoutMutation = true
	} else {
		wcb.Spec.AllowAdmissionWithoutValidation = true
	}
	if err := c.Create(t.Context(), wcb); err != nil {
		t.Fatal(err)
	}
	closed := metav1.NewTime(to)
	wcb.Status.History = []v1alpha1.OpenWindow{{OpenedAt: metav1.NewTime(from), ClosedAt: &closed, Action: v1alpha1.OpenActionBypass}}
	if err := c.Status().Update(t.Context(), wcb); err != nil {
		t.Fatal(err)
	}
}

// TestRemediateCommand: a mutating webhook that adds a label and a default
// to ConfigMaps and Widgets (a custom resource) was skipped while objects
// were created. `tripswitch remediate` shows what it would do and changes
// nothing; --apply makes each object equal to a twin created through the
// recovered webhook, records events and the counts in the window's audit
// status; a second run has nothing to do. A validating webhook's objections
// are labelled and kept. A window still open is refused.
func TestRemediateCommand(t *testing.T) {
	env, kubeconfig := cluster(t)
	ctx, c := t.Context(), env.Client
	dyn := dynamic.NewForConfigOrDie(env.Config)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	hook, err := defaulthook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })
	widgetCRD(t, c, dyn)

	// The outage: created while there was no webhook to call.
	from := time.Now().Add(-time.Minute)
	demo := map[string]string{"demo": "yes"}
	cms := map[string]*corev1.ConfigMap{
		"bare":    {ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "default", Labels: demo}},
		"partial": {ObjectMeta: metav1.ObjectMeta{Name: "partial", Namespace: "default", Labels: demo}, Data: map[string]string{"other": "kept"}},
		"set":     {ObjectMeta: metav1.ObjectMeta{Name: "set", Namespace: "default", Labels: demo}, Data: map[string]string{"mode": "custom"}},
	}
	ws := map[string]*unstructured.Unstructured{"w-bare": widget("w-bare", nil), "w-sized": widget("w-sized", map[string]any{"size": int64(3), "color": "red"})}
	create := func(suffix string) {
		for _, cm := range cms {
			o := cm.DeepCopy()
			o.Name += suffix
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		for _, w := range ws {
			o := w.DeepCopy()
			o.SetName(o.GetName() + suffix)
			if _, err := dyn.Resource(widgets).Namespace("default").Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	create("")
	validating := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "forbidden", Namespace: "default", Labels: map[string]string{"demo": "yes", "policy": defaulthook.Forbidden}}}
	if err := c.Create(ctx, validating); err != nil {
		t.Fatal(err)
	}
	to := time.Now()

	// The webhooks recover: registered, and reached by the API server.
	rules := []admissionregistrationv1.RuleWithOperations{
		{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}},
		{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}}},
	}
	cc := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + path), CABundle: hook.CABundle}
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "defaults"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "defaults.example.com", ClientConfig: cc("/mutate"), Rules: rules,
			ObjectSelector: &metav1.LabelSelector{MatchLabels: demo}, SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}}}}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "policy"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "policy.example.com", ClientConfig: cc("/validate"),
			// CREATE only: a webhook that validates UPDATE too would deny the label (docs/remediation.md).
			Rules:          []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: rules[0].Rule}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: demo}, SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}}}}
	for _, o := range []client.Object{mwc, vwc} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	breakerWithWindow(t, c, "defaults", v1alpha1.MutatingWebhookConfiguration, from, to)
	breakerWithWindow(t, c, "policy", v1alpha1.ValidatingWebhookConfiguration, from, to)
	// Twins, created through the recovered webhook: what each object should be.
	// After the window's last whole second, which the audit widens it to,
	// and once the webhook configuration reached the API server's admission.
	time.Sleep(time.Until(to.Truncate(time.Second).Add(2 * time.Second)))
	create("-twin")

	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := dispatch(append([]string{"remediate", "--kubeconfig", kubeconfig}, args...), &out); err != nil {
			t.Fatalf("remediate %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		for n := range cms {
			var cm corev1.ConfigMap
			if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: n}, &cm); err != nil {
				t.Fatal(err)
			}
			out[n] = cm.ResourceVersion
		}
		return out
	}

	before := snapshot()
	dry := run("defaults")
	t.Logf("dry run:\n%s", dry)
	for _, want := range []string{"Dry run (nothing changed; --apply to act)", "WouldRemediate: 6", "WouldRemediate  Reapply  ConfigMap  default/bare",
		`"path":"/metadata/resourceVersion"`, `"path":"/data"`, `"path":"/spec","value":{"size":1}`} {
		if !strings.Contains(dry, want) {
			t.Errorf("dry run output lacks %q", want)
		}
	}
	if !reflect.DeepEqual(snapshot(), before) {
		t.Fatal("the dry run changed an object")
	}

	applied := run("defaults", "--apply")
	t.Logf("apply:\n%s", applied)
	if !strings.Contains(applied, "Remediated: 6") {
		t.Errorf("apply output:\n%s", applied)
	}
	for n := range cms {
		var got, twin corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: n}, &got); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: n + "-twin"}, &twin); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Labels, twin.Labels) || !reflect.DeepEqual(got.Data, twin.Data) {
			t.Errorf("ConfigMap %s: %v %v, the webhook made its twin %v %v", n, got.Labels, got.Data, twin.Labels, twin.Data)
		}
	}
	for n := range ws {
		got, err := dyn.Resource(widgets).Namespace("default").Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		twin, err := dyn.Resource(widgets).Namespace("default").Get(ctx, n+"-twin", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.GetLabels(), twin.GetLabels()) || !reflect.DeepEqual(got.Object["spec"], twin.Object["spec"]) {
			t.Errorf("Widget %s: %v %v, the webhook made its twin %v %v", n, got.GetLabels(), got.Object["spec"], twin.GetLabels(), twin.Object["spec"])
		}
	}
	var b v1alpha1.WebhookCircuitBreaker
	if err := c.Get(ctx, client.ObjectKey{Name: "defaults"}, &b); err != nil {
		t.Fatal(err)
	}
	res := b.Status.History[0].Audit
	if res == nil || res.Remediation == nil || res.Remediation.Remediated != 6 || res.Remediation.By != "tripswitch remediate" || res.WouldMutate != 6 {
		t.Fatalf("the window's audit status: %+v %+v", res, res.Remediation)
	}
	evs, err := kube.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs.Items {
		seen[e.Regarding.Kind+"/"+e.Regarding.Name+" "+e.Reason] = true
	}
	for _, want := range []string{"ConfigMap/bare Remediated", "Widget/w-bare Remediated", "WebhookCircuitBreaker/defaults Remediated"} {
		if !seen[want] {
			t.Errorf("no event %s in %v", want, seen)
		}
	}

	again := run("defaults", "--apply", "-o", "json")
	var rep remediate.Report
	if err := json.Unmarshal([]byte(again), &rep); err != nil || len(rep.Items) != 0 || rep.DryRun {
		t.Fatalf("a second run: %v\n%s", err, again)
	}

	labelled := run("policy", "--apply", "--label")
	if !strings.Contains(labelled, "Labelled: 1") || !strings.Contains(labelled, defaulthook.Denial) {
		t.Errorf("--label output:\n%s", labelled)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(validating), validating); err != nil {
		t.Fatalf("the objected-to ConfigMap: %v", err)
	}
	if v := validating.Labels[remediate.LabelKey]; v != "policy.example.com" {
		t.Errorf("label %q", v)
	}

	// A window still open: the webhook has not recovered.
	if err := c.Get(ctx, client.ObjectKey{Name: "defaults"}, &b); err != nil {
		t.Fatal(err)
	}
	b.Status.History = append(b.Status.History, v1alpha1.OpenWindow{OpenedAt: metav1.NewTime(time.Now()), Action: v1alpha1.OpenActionBypass})
	if err := c.Status().Update(ctx, &b); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := dispatch([]string{"remediate", "defaults", "--kubeconfig", kubeconfig}, &out); err == nil || !strings.Contains(err.Error(), "still open") {
		t.Errorf("an open window: %v", err)
	}
	for _, args := range [][]string{{"remediate"}, {"remediate", "defaults", "--max-evictions", "0"}, {"remediate", "defaults", "-o", "yaml"}} {
		if err := dispatch(args, &out); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}

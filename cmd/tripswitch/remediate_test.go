package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
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
	"github.com/tripswitch-dev/tripswitch/internal/demo"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/defaulthook"
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
// are labelled and kept; one that reviews updates too denies the label, and
// those objects are marked (event, audit record, -o json), never Failed. A
// window still open is refused.
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
	strictCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "strict-forbidden", Namespace: "default", Labels: map[string]string{"strict": "yes", "policy": defaulthook.Forbidden}}}
	for _, o := range []client.Object{validating, strictCM} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
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
	// A policy engine's webhook: it validates CREATE and UPDATE, so it also
	// denies the update that would label what it objects to.
	strict := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "strict"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "strict.example.com", ClientConfig: cc("/validate"), Rules: rules[:1],
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"strict": "yes"}}, SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}}}}
	for _, o := range []client.Object{mwc, vwc, strict} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	breakerWithWindow(t, c, "defaults", v1alpha1.MutatingWebhookConfiguration, from, to)
	breakerWithWindow(t, c, "policy", v1alpha1.ValidatingWebhookConfiguration, from, to)
	breakerWithWindow(t, c, "strict", v1alpha1.ValidatingWebhookConfiguration, from, to)
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
	if !hasRow(dry, "WouldRemediate", "Reapply", "ConfigMap", "default/bare", "at", "resourceVersion") {
		t.Error("the dry run has no row for default/bare")
	}
	for _, want := range []string{"Dry run (nothing changed; --apply to act)", "WouldRemediate: 6", `"path":"/data"`, `"path":"/spec","value":{"size":1}`} {
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

	// The policy engine denies the label: a dry run says so, --apply marks
	// the object where the webhook cannot block it, and neither fails.
	strictDry := run("strict", "--label")
	t.Logf("dry run, a webhook that reviews updates:\n%s", strictDry)
	if !hasRow(strictDry, "WouldMark", "Label", "ConfigMap", "default/strict-forbidden") {
		t.Error("the dry run has no WouldMark row")
	}
	for _, want := range []string{"WouldMark: 1", `admission webhook "strict.example.com" denied the request: ` + defaulthook.Denial,
		"Note: 1 objects cannot be changed by tripswitch: the webhook reviews their updates too and denies them", "--apply marks each where the webhook cannot block it"} {
		if !strings.Contains(strictDry, want) {
			t.Errorf("the dry run does not say %q", want)
		}
	}
	marked := run("strict", "--apply", "--label")
	t.Logf("--apply, a webhook that reviews updates:\n%s", marked)
	if !hasRow(marked, "Marked", "Label", "ConfigMap", "default/strict-forbidden") {
		t.Error("the output has no Marked row")
	}
	for _, want := range []string{"Marked: 1", "Each is marked where the webhook cannot block it", "reason=AdmittedWithout", "markedObjects"} {
		if !strings.Contains(marked, want) {
			t.Errorf("the output does not say %q", want)
		}
	}
	if strings.Contains(marked, "Failed") {
		t.Error("a designed limit reported as Failed")
	}
	var exported remediate.Report
	if err := json.Unmarshal([]byte(run("strict", "--apply", "--label", "-o", "json")), &exported); err != nil || len(exported.Items) != 1 ||
		exported.Items[0].Outcome != remediate.Marked || exported.Items[0].UID != strictCM.UID || !strings.Contains(exported.Items[0].Message, "not labelled") {
		t.Errorf("the exported report: %v %+v", err, exported.Items)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(strictCM), strictCM); err != nil || strictCM.Labels[remediate.LabelKey] != "" {
		t.Errorf("the object the webhook denies updates of: %v %v", err, strictCM.Labels)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "strict"}, &b); err != nil {
		t.Fatal(err)
	}
	if r := b.Status.History[0].Audit.Remediation; r == nil || r.Marked != 1 || r.Failed != 0 || !reflect.DeepEqual(r.MarkedObjects, []string{"ConfigMap default/strict-forbidden"}) {
		t.Errorf("the window's audit record: %+v", r)
	}
	evs, err = kube.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	markEvents := 0
	for _, e := range evs.Items {
		if e.Regarding.Kind == "ConfigMap" && e.Regarding.Name == strictCM.Name && e.Reason == "AdmittedWithout" && e.Type == corev1.EventTypeWarning {
			markEvents++
			if !strings.Contains(e.Note, "denies the label too") {
				t.Errorf("the event does not say why it is not labelled: %q", e.Note)
			}
		}
	}
	if markEvents != 2 {
		t.Errorf("%d AdmittedWithout events on %s after two runs, want 2", markEvents, strictCM.Name)
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

// hasRow reports whether a line of a table begins with these cells.
func hasRow(table string, cells ...string) bool {
	for line := range strings.Lines(table) {
		if f := strings.Fields(line); len(f) >= len(cells) && slices.Equal(f[:len(cells)], cells) {
			return true
		}
	}
	return false
}

// waitFor polls cond every 100ms for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// TestRemediateRepairsOncePerWindow: a mutating webhook that is not
// idempotent, like the Kubernetes conformance suite's ConfigMap mutator (it
// adds data mutation-stage-1, and mutation-stage-2 to a ConfigMap that has
// stage 1), registered for CREATE with failurePolicy Fail behind a Bypass
// breaker. A real outage: the controller opens the circuit, 18 ConfigMaps
// are admitted without the webhook, the webhook recovers and the circuit
// closes. Then `tripswitch remediate`: a dry run, and three --apply runs
// that repair 18, 0 and 0 objects; after each, every ConfigMap equals a
// twin created through the recovered webhook (stage 1, never stage 2), and
// there is one Remediated event per object. A dry run after them has
// nothing to do and says why.
func TestRemediateRepairsOncePerWindow(t *testing.T) {
	env, kubeconfig := cluster(t)
	ctx, c := t.Context(), env.Client
	kube := kubernetes.NewForConfigOrDie(env.Config)
	hook, err := defaulthook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })
	sel := map[string]string{"stages": "yes"}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "stages"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "stages.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + "/stages"), CABundle: hook.CABundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), ObjectSelector: &metav1.LabelSelector{MatchLabels: sel},
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), TimeoutSeconds: ptr.To[int32](2), AdmissionReviewVersions: []string{"v1"}}}}
	wcb := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "stages"}, Spec: v1alpha1.WebhookCircuitBreakerSpec{
		Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "stages", WebhookName: "stages.example.com"},
		AllowAdmissionWithoutMutation: true, OpenAction: v1alpha1.OpenActionBypass,
		Probe: v1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: 250 * time.Millisecond}, Timeout: &metav1.Duration{Duration: 250 * time.Millisecond},
			FailureThreshold: 2, SuccessThreshold: 2},
	}}
	for _, o := range []client.Object{mwc, wcb} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	stopController, err := demo.InProcess(ctx, env.Config, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopController)
	state := func(want v1alpha1.CircuitState) func() bool {
		return func() bool {
			var b v1alpha1.WebhookCircuitBreaker
			return c.Get(ctx, client.ObjectKeyFromObject(wcb), &b) == nil && b.Status.State == want && (want != v1alpha1.StateClosed || len(b.Status.History) == 0 || b.Status.History[len(b.Status.History)-1].ClosedAt != nil)
		}
	}
	waitFor(t, "the breaker is Closed", state(v1alpha1.StateClosed))

	// The outage: the circuit opens, and what is created meanwhile is
	// admitted without the webhook (once the API server skips it).
	hook.Down.Store(true)
	waitFor(t, "the circuit opened", state(v1alpha1.StateOpen))
	const n = 18
	create := func(name string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: sel}}
		waitFor(t, "the API server admits "+name, func() bool { return c.Create(ctx, cm.DeepCopy()) == nil })
		if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	for i := range n {
		if cm := create(fmt.Sprintf("cm-%02d", i)); len(cm.Data) > 0 {
			t.Fatalf("%s was mutated while the circuit was open: %v", cm.Name, cm.Data)
		}
	}
	hook.Down.Store(false)
	waitFor(t, "the circuit closed", state(v1alpha1.StateClosed))
	stopController()
	var b v1alpha1.WebhookCircuitBreaker
	if err := c.Get(ctx, client.ObjectKeyFromObject(wcb), &b); err != nil || len(b.Status.History) != 1 {
		t.Fatalf("the window: %v %+v", err, b.Status.History)
	}
	closed := b.Status.History[0].ClosedAt.Time
	t.Logf("the window: %s to %s", b.Status.History[0].OpenedAt.UTC().Format(time.RFC3339), closed.UTC().Format(time.RFC3339))

	// Twins, created through the recovered webhook after the window (which
	// the audit widens to whole seconds): what each object should be.
	time.Sleep(time.Until(closed.Truncate(time.Second).Add(2 * time.Second)))
	twin := create("twin")
	if !reflect.DeepEqual(twin.Data, map[string]string{defaulthook.Stage1: "yes"}) {
		t.Fatalf("the recovered webhook made a ConfigMap %v", twin.Data)
	}
	asTwin := func(when string) {
		t.Helper()
		for i := range n {
			var cm corev1.ConfigMap
			if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: fmt.Sprintf("cm-%02d", i)}, &cm); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cm.Data, twin.Data) || !reflect.DeepEqual(cm.Labels, twin.Labels) {
				t.Fatalf("%s: %s is %v %v, a ConfigMap created through the webhook %v %v", when, cm.Name, cm.Labels, cm.Data, twin.Labels, twin.Data)
			}
		}
	}
	remediated := func() int {
		evs, err := kube.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		count := 0
		for _, e := range evs.Items {
			if e.Regarding.Kind == "ConfigMap" && e.Reason == "Remediated" {
				count++
			}
		}
		return count
	}
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := dispatch(append([]string{"remediate", "stages", "--kubeconfig", kubeconfig, "--qps", "100"}, args...), &out); err != nil {
			t.Fatalf("remediate %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}

	dry := run()
	t.Logf("dry run:\n%s", dry)
	if !strings.Contains(dry, fmt.Sprintf("WouldRemediate: %d\n", n)) {
		t.Fatalf("the dry run:\n%s", dry)
	}
	for i, want := range []int{n, 0, 0} {
		out := run("--apply", "-o", "json")
		var rep struct{ Counts map[string]int }
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Counts["Remediated"] != want || rep.Counts["Failed"] != 0 || rep.Counts["Current"] != n-want {
			t.Errorf("--apply run %d: counts %v, want %d Remediated and %d Current", i+1, rep.Counts, want, n-want)
		}
		asTwin(fmt.Sprintf("after --apply run %d", i+1))
		if got := remediated(); got != n {
			t.Errorf("after --apply run %d: %d Remediated events on the ConfigMaps, want %d", i+1, got, n)
		}
	}
	again := run()
	t.Logf("a dry run after them:\n%s", again)
	for _, want := range []string{fmt.Sprintf("Current: %d\n", n), fmt.Sprintf("Note: %d objects were repaired in this window already", n), "already repaired in this window"} {
		if !strings.Contains(again, want) {
			t.Errorf("the dry run after the repair does not say %q", want)
		}
	}
	if strings.Contains(again, "WouldRemediate") {
		t.Error("the dry run after the repair would remediate again")
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(wcb), &b); err != nil {
		t.Fatal(err)
	}
	if r := b.Status.History[0].Audit.Remediation; r == nil || r.Remediated != 0 || r.Current != n {
		t.Errorf("the window's record of the latest run: %+v", r)
	}
}

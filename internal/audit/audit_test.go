package audit_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/selfsigned"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// policyHook is a real HTTPS admission webhook on 127.0.0.1:
// /validate denies objects labelled policy=forbidden; /mutate adds the
// label team=platform when it is missing; /broken answers 500.
type policyHook struct {
	url      string
	caBundle []byte
	reviews  atomic.Int64
	dryRun   atomic.Int64
}

func startHook(t testing.TB) *policyHook {
	t.Helper()
	ca, cert, err := selfsigned.Pair("policy-ca", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &policyHook{url: "https://" + ln.Addr().String(), caBundle: ca.PEM}
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, r *http.Request, decide func(obj map[string]any, resp *admissionv1.AdmissionResponse)) {
		h.reviews.Add(1)
		var review admissionv1.AdmissionReview
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		if review.Request.DryRun != nil && *review.Request.DryRun {
			h.dryRun.Add(1)
		}
		var obj map[string]any
		_ = json.Unmarshal(review.Request.Object.Raw, &obj)
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		decide(obj, resp)
		review.Response, review.Request = resp, nil
		_ = json.NewEncoder(w).Encode(review)
	}
	labelsOf := func(obj map[string]any) map[string]any {
		md, _ := obj["metadata"].(map[string]any)
		l, _ := md["labels"].(map[string]any)
		return l
	}
	mux.HandleFunc("POST /validate", func(w http.ResponseWriter, r *http.Request) {
		answer(w, r, func(obj map[string]any, resp *admissionv1.AdmissionResponse) {
			if labelsOf(obj)["policy"] == "forbidden" {
				resp.Allowed = false
				resp.Result = &metav1.Status{Message: "policy=forbidden is not allowed here", Code: 403}
			}
		})
	})
	mux.HandleFunc("POST /mutate", func(w http.ResponseWriter, r *http.Request) {
		answer(w, r, func(obj map[string]any, resp *admissionv1.AdmissionResponse) {
			if labelsOf(obj)["team"] == nil {
				resp.Patch = []byte(`[{"op":"add","path":"/metadata/labels/team","value":"platform"}]`)
				resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
			}
		})
	})
	mux.HandleFunc("POST /broken", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	})
	srv := &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return h
}

func (h *policyHook) webhook(path string, mutating bool) circuit.Webhook {
	kind := v1alpha1.ValidatingWebhookConfiguration
	if mutating {
		kind = v1alpha1.MutatingWebhookConfiguration
	}
	return circuit.Webhook{
		Configuration: "policy", Name: "policy.example.com", Kind: kind,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(h.url + path), CABundle: h.caBundle},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
		}},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
		SideEffects:       ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:    ptr.To[int32](5),
		ReviewVersions:    []string{"v1"},
	}
}

func deployment(ns, name string, labels map[string]string) *appsv1.Deployment {
	l := map[string]string{"app": name}
	for k, v := range labels {
		l[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}},
			},
		},
	}
}

// world is a cluster with objects before, inside and after an open window.
type world struct {
	env    *testenv.Env
	window audit.Window
}

// nextSecond waits until the API server stamps a later second than t, so
// that objects fall clearly before or after a window edge (the evidence has
// one-second resolution).
func nextSecond(ctx context.Context, t *testing.T, c client.Client, after time.Time) time.Time {
	t.Helper()
	for i := 0; ; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "tick-"}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		if ts := cm.CreationTimestamp.Time; ts.After(after) {
			return ts
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func setupWorld(t *testing.T) *world {
	t.Helper()
	env := testenv.Start(t, testenv.Options{})
	ctx := t.Context()
	c := env.Client
	for name, env := range map[string]string{"audited": "prod", "other": "dev"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"env": env}}}); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate := func(o client.Object) {
		t.Helper()
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	before := deployment("audited", "old-forbidden", map[string]string{"policy": "forbidden"})
	mustCreate(before)
	updated := deployment("audited", "updated", nil)
	mustCreate(updated)

	from := nextSecond(ctx, t, c, before.CreationTimestamp.Time)
	mustCreate(deployment("audited", "new-forbidden", map[string]string{"policy": "forbidden"}))
	mustCreate(deployment("audited", "new-ok", nil))
	mustCreate(deployment("other", "new-other-namespace", map[string]string{"policy": "forbidden"}))
	mustCreate(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "audited", Name: "not-in-the-rules", Labels: map[string]string{"policy": "forbidden"}}})
	updated.Labels["touched"] = "in-window"
	if err := c.Update(ctx, updated); err != nil {
		t.Fatal(err)
	}
	last := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(updated), last); err != nil {
		t.Fatal(err)
	}
	var to time.Time
	for _, mf := range last.ManagedFields {
		if mf.Time != nil && mf.Time.After(to) {
			to = mf.Time.Time
		}
	}
	nextSecond(ctx, t, c, to)
	mustCreate(deployment("audited", "after-forbidden", map[string]string{"policy": "forbidden"}))
	return &world{env: env, window: audit.Window{From: from, To: to}}
}

func (w *world) auditor(t *testing.T) *audit.Auditor {
	t.Helper()
	a, err := audit.NewAuditor(w.env.Config, 20, 20, &probe.HTTPProber{})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func verdicts(r *audit.Report) map[string]string {
	out := map[string]string{}
	for _, f := range r.Findings {
		out[f.Namespace+"/"+f.Name] = f.Operation + " " + string(f.Verdict)
	}
	return out
}

func TestAudit(t *testing.T) {
	w := setupWorld(t)
	hook := startHook(t)
	ctx := t.Context()

	t.Run("validating: the object it now denies is objected to", func(t *testing.T) {
		r, err := w.auditor(t).Audit(ctx, hook.webhook("/validate", false), w.window)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"audited/new-forbidden": "CREATE Objected",
			"audited/new-ok":        "CREATE NoObjection",
			"audited/updated":       "UPDATE NoObjection",
		}
		if got := verdicts(r); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("findings %v, want %v (before the window, after it, another namespace and other resources must not be listed)", got, want)
		}
		for _, f := range r.Findings {
			if f.Verdict == audit.Objected && f.Message != "policy=forbidden is not allowed here" {
				t.Errorf("denial message %q", f.Message)
			}
		}
		if r.Counts[audit.Objected] != 1 || r.Resources[0] != "deployments.apps" || r.Truncated {
			t.Fatalf("report %+v", r)
		}
		if hook.dryRun.Load() != hook.reviews.Load() {
			t.Fatal("a re-review was sent without dryRun")
		}
	})

	t.Run("mutating: the patch it would apply is reported", func(t *testing.T) {
		r, err := w.auditor(t).Audit(ctx, hook.webhook("/mutate", true), w.window)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range r.Findings {
			if f.Verdict != audit.WouldMutate || !strings.Contains(f.Patch, `"path":"/metadata/labels/team"`) {
				t.Fatalf("%s/%s: %s patch %q, want WouldMutate with the team label patch", f.Namespace, f.Name, f.Verdict, f.Patch)
			}
		}
		if r.Counts[audit.WouldMutate] != 3 {
			t.Fatalf("counts %v", r.Counts)
		}
	})

	t.Run("side effects: never re-reviewed", func(t *testing.T) {
		wh := hook.webhook("/validate", false)
		wh.SideEffects = ptr.To(admissionregistrationv1.SideEffectClassSome)
		before := hook.reviews.Load()
		r, err := w.auditor(t).Audit(ctx, wh, w.window)
		if err != nil {
			t.Fatal(err)
		}
		if r.Counts[audit.NotReviewed] != 3 || hook.reviews.Load() != before || !strings.Contains(strings.Join(r.Notes, " "), "sideEffects Some") {
			t.Fatalf("counts %v, reviews sent %d, notes %v", r.Counts, hook.reviews.Load()-before, r.Notes)
		}
	})

	t.Run("a failing webhook is not checked, not clean", func(t *testing.T) {
		r, err := w.auditor(t).Audit(ctx, hook.webhook("/broken", false), w.window)
		if err != nil {
			t.Fatal(err)
		}
		if r.Counts[audit.NotChecked] != 3 || r.Counts[audit.NoObjection] != 0 {
			t.Fatalf("counts %v", r.Counts)
		}
	})

	t.Run("matchConditions: evaluated, tripswitch's own ignored", func(t *testing.T) {
		wh := hook.webhook("/validate", false)
		wh.MatchConditions = []admissionregistrationv1.MatchCondition{
			{Name: "skip-new-ok", Expression: "object.metadata.name != 'new-ok'"},
			{Name: circuit.MatchConditionName, Expression: "false"},
		}
		r, err := w.auditor(t).Audit(ctx, wh, w.window)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"audited/new-forbidden": "CREATE Objected", "audited/updated": "UPDATE NoObjection"}
		if got := verdicts(r); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("findings %v, want %v", got, want)
		}
	})

	t.Run("pages and the cap", func(t *testing.T) {
		a := w.auditor(t)
		a.PageSize, a.MaxObjects = 1, 2
		r, err := a.Audit(ctx, hook.webhook("/validate", false), w.window)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Truncated || r.Found != 2 || !strings.Contains(strings.Join(r.Notes, " "), "cap of 2") {
			t.Fatalf("found %d truncated %v notes %v", r.Found, r.Truncated, r.Notes)
		}
	})

	t.Run("without read access the audit says so", func(t *testing.T) {
		cfg, err := w.env.UserConfig("no-audit-role")
		if err != nil {
			t.Fatal(err)
		}
		// Discovery is open to every authenticated user; listing deployments is not.
		a, err := audit.NewAuditor(cfg, 20, 20, &probe.HTTPProber{})
		if err != nil {
			t.Fatal(err)
		}
		// The webhook's namespaceSelector needs the namespaces first: the
		// error names what grants them, not only what was refused.
		_, err = a.Audit(ctx, hook.webhook("/validate", false), w.window)
		for _, want := range []string{"namespaces is forbidden", "list on namespaces", "audit.enabled=true", "component config/audit"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("got %v, want a forbidden error saying %q", err, want)
			}
		}
	})
}

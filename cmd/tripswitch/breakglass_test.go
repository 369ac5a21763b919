package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/breakglass"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// TestBreakGlassCommands runs `tripswitch status` and `tripswitch restore`
// as an operator would, against a real API server with no controller: the
// status lists what is open, restore --all restores what it may, names what
// it refused, and fails.
func TestBreakGlassCommands(t *testing.T) {
	env, kubeconfig := cluster(t)
	ctx, c := t.Context(), env.Client
	for _, name := range []string{"a", "b"} {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name: "w.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/")},
				SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
			}},
		}
		if err := c.Create(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		obj := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
			t.Fatal(err)
		}
		view, err := circuit.View(obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (circuit.Writer{Client: c, Budget: circuit.NoBudget{}}).Open(ctx, view, "w.example.com", v1alpha1.CircuitRecord{Breaker: "gone", BreakerUID: "u", Action: v1alpha1.OpenActionIgnore, OpenedAt: metav1.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// Someone puts b's policy back by hand, leaving the record.
	var b admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "b"}, &b); err != nil {
		t.Fatal(err)
	}
	b.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	if err := c.Update(ctx, &b); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := dispatch([]string{"status", "--kubeconfig", kubeconfig, "-o", "json"}, &out); err != nil {
		t.Fatal(err)
	}
	var listed []breakglass.Circuit
	if err := json.Unmarshal(out.Bytes(), &listed); err != nil || len(listed) != 2 || listed[0].Ref() != "a/w.example.com" {
		t.Fatalf("status -o json: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := dispatch([]string{"status", "--kubeconfig", kubeconfig}, &out); err != nil || !strings.Contains(out.String(), "a/w.example.com") || !strings.Contains(out.String(), "refused: someone changed") {
		t.Fatalf("status table: %v\n%s", err, out.String())
	}
	out.Reset()
	err := dispatch([]string{"restore", "--kubeconfig", kubeconfig, "--all"}, &out)
	if err == nil || !strings.Contains(err.Error(), "1 of 2 circuits not restored") || !strings.Contains(out.String(), "restored a/w.example.com") || !strings.Contains(out.String(), "not restored: refused") {
		t.Fatalf("restore --all: %v\n%s", err, out.String())
	}
	var a admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "a"}, &a); err != nil {
		t.Fatal(err)
	}
	if len(a.Annotations) != 0 || *a.Webhooks[0].FailurePolicy != admissionregistrationv1.Fail {
		t.Fatalf("a after restore: %v %s", a.Annotations, *a.Webhooks[0].FailurePolicy)
	}
	for args, want := range map[string]string{
		"restore":                       "CONFIGURATION/WEBHOOK, or pass --all",
		"restore --all a/w.example.com": "not both",
		"restore nothing":               `"nothing": want CONFIGURATION/WEBHOOK`,
		"restore --kind Other a/b":      `--kind: kind "Other": must be mutating or validating`,
		"status -o yaml":                "-o yaml: must be table or json",
	} {
		// Flags come before positional arguments, as Go's flag package wants.
		words := strings.Fields(args)
		full := append([]string{words[0], "--kubeconfig", kubeconfig}, words[1:]...)
		if err := dispatch(full, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("tripswitch %s: %v, want an error saying %q", args, err, want)
		}
	}
}

// cluster starts a control plane with the CRD and writes an administrator's
// kubeconfig for the commands to use.
func cluster(t *testing.T) (*testenv.Env, string) {
	t.Helper()
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	kc, err := env.AdminKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return env, kubeconfig
}

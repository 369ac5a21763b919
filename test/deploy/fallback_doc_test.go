package deploy

import (
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
)

// TestFallbackDocExample: every object in docs/fallback.md's YAML blocks is
// accepted by the real API server, and its fallback policies, written inert,
// are adopted by a record alone and armed and disarmed by the floor.
func TestFallbackDocExample(t *testing.T) {
	blocks := yamlBlocks(t, "docs", "fallback.md")
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := t.Context()
	kinds := map[string]int{}
	for _, b := range blocks {
		for _, o := range decode(t, []byte(b)) {
			if o.GetAPIVersion() == "" || o.GetKind() == "AdmissionConfiguration" {
				continue // the Helm values and the API server's own configuration
			}
			if err := env.Client.Create(ctx, o); err != nil {
				t.Fatalf("the API server rejects docs/fallback.md's %s: %v", key(o), err)
			}
			kinds[o.GetKind()]++
		}
	}
	for _, k := range []string{"ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
		"WebhookCircuitBreaker", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
		if kinds[k] != 1 {
			t.Errorf("docs/fallback.md has %d %s, want 1", kinds[k], k)
		}
	}
	var b v1alpha1.WebhookCircuitBreaker
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "policy-validator"}, &b); err != nil {
		t.Fatal(err)
	}
	w := floor.Writer{Client: env.Client}
	owner := floor.Owner{Breaker: b.Name, UID: b.UID}
	for _, fp := range []v1alpha1.FallbackPolicy{*b.Spec.WhileOpen.FallbackPolicy, {Kind: v1alpha1.MutatingAdmissionPolicy, Name: "default-cost-center"}} {
		p, err := w.Read(ctx, fp)
		if err != nil {
			t.Fatal(err)
		}
		if wrote, err := w.Disarm(ctx, p, owner, metav1.Now()); err != nil || !wrote || !floor.Inspect(p).Record.ConditionPreexisted {
			t.Fatalf("%s: adoption wrote %v, %v, record %+v", fp.Name, wrote, err, floor.Inspect(p).Record)
		}
		if _, err := w.Arm(ctx, p, owner, metav1.Now()); err != nil || !floor.Inspect(p).Armed() {
			t.Fatalf("%s: arm: %v", fp.Name, err)
		}
		if _, err := w.Disarm(ctx, p, owner, metav1.Now()); err != nil || !floor.Inspect(p).Inert() {
			t.Fatalf("%s: disarm: %v", fp.Name, err)
		}
	}
}

// yamlBlocks are the YAML code blocks of a Markdown file of the repository.
func yamlBlocks(t *testing.T, path ...string) []string {
	t.Helper()
	data, err := os.ReadFile(repoPath(t, path...))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for i, part := range strings.Split(string(data), "```") {
		if i%2 == 1 && strings.HasPrefix(part, "yaml\n") {
			blocks = append(blocks, strings.TrimPrefix(part, "yaml\n"))
		}
	}
	return blocks
}

// TestReadmeFallbackExample: the README's fallback example is accepted by
// the real API server as written (policy, binding, breaker), and its
// policy, written inert, is adopted by a record alone, then armed and
// disarmed by the floor.
func TestReadmeFallbackExample(t *testing.T) {
	var example string
	for _, b := range yamlBlocks(t, "README.md") {
		if strings.Contains(b, "fallbackPolicy:") {
			example = b
		}
	}
	if example == "" {
		t.Fatal("README.md has no fallback example")
	}
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := t.Context()
	kinds := map[string]int{}
	for _, o := range decode(t, []byte(example)) {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("the API server rejects the README's %s: %v", key(o), err)
		}
		kinds[o.GetKind()]++
	}
	for _, k := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "WebhookCircuitBreaker"} {
		if kinds[k] != 1 {
			t.Errorf("the README's example has %d %s, want 1", kinds[k], k)
		}
	}
	var b v1alpha1.WebhookCircuitBreaker
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "policy-validator"}, &b); err != nil {
		t.Fatal(err)
	}
	w := floor.Writer{Client: env.Client}
	p, err := w.Read(ctx, *b.Spec.WhileOpen.FallbackPolicy)
	if err != nil {
		t.Fatal(err)
	}
	owner := floor.Owner{Breaker: b.Name, UID: b.UID}
	if wrote, err := w.Disarm(ctx, p, owner, metav1.Now()); err != nil || !wrote || !floor.Inspect(p).Record.ConditionPreexisted {
		t.Fatalf("adoption wrote %v, %v", wrote, err)
	}
	if _, err := w.Arm(ctx, p, owner, metav1.Now()); err != nil || !floor.Inspect(p).Armed() {
		t.Fatalf("arm: %v", err)
	}
	if _, err := w.Disarm(ctx, p, owner, metav1.Now()); err != nil || !floor.Inspect(p).Inert() {
		t.Fatalf("disarm: %v", err)
	}
}

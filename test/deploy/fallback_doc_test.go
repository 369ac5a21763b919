package deploy

import (
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
	"github.com/tripswitch-dev/tripswitch/internal/testenv"
)

// TestFallbackDocExample: every object in docs/fallback.md's YAML blocks is
// accepted by the real API server, and its fallback policies, written inert,
// are adopted by a record alone and armed and disarmed by the floor.
func TestFallbackDocExample(t *testing.T) {
	data, err := os.ReadFile(repoPath(t, "docs", "fallback.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for i, part := range strings.Split(string(data), "```") {
		if i%2 == 1 && strings.HasPrefix(part, "yaml\n") {
			blocks = append(blocks, strings.TrimPrefix(part, "yaml\n"))
		}
	}
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

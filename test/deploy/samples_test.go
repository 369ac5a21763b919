package deploy

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// TestSamplesAreValid: the API server accepts every sample breaker, the
// optional audit and API server signal settings included, and rejects an
// API server signal window outside 10s..10m with the CRD's own message.
func TestSamplesAreValid(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := t.Context()
	samples := kustomizeBuild(t, "config/samples")
	if len(samples) < 2 {
		t.Fatalf("%d samples", len(samples))
	}
	for _, o := range samples {
		if err := env.Client.Create(ctx, o, client.DryRunAll); err != nil {
			t.Errorf("the API server rejects sample %s: %v", key(o), err)
		}
	}
	bad := find(samples, "WebhookCircuitBreaker", "policy-validator").DeepCopy()
	if err := unstructured.SetNestedField(bad.Object, "5s", "spec", "apiServerSignal", "window"); err != nil {
		t.Fatal(err)
	}
	err := env.Client.Create(ctx, bad, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "apiServerSignal.window must be a duration from 10s to 10m") {
		t.Fatalf("window 5s: got %v", err)
	}
}

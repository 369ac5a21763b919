package v1alpha1_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

func breaker(name string) *v1alpha1.WebhookCircuitBreaker {
	return &v1alpha1.WebhookCircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                          v1alpha1.Target{Kind: v1alpha1.ValidatingWebhookConfiguration, ConfigurationName: "c", WebhookName: "w.tripswitch.test"},
			AllowAdmissionWithoutValidation: true,
		},
	}
}

// TestFallbackAndLimitFieldsOnTheAPIServer: the CRD's defaults for the
// issue-34 fields resolve to what Resolve gives without them, and each bad
// value is refused with a message naming its field.
func TestFallbackAndLimitFieldsOnTheAPIServer(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := t.Context()

	b := breaker("defaults")
	b.Spec.WhileOpen = &v1alpha1.WhileOpenSpec{FallbackPolicy: &v1alpha1.FallbackPolicy{Kind: v1alpha1.ValidatingAdmissionPolicy, Name: "require-x"}}
	local := b.DeepCopy()
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.WebhookCircuitBreaker
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "defaults"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.OnMaxOpen != v1alpha1.DefaultOnMaxOpen || got.Spec.MaxOpenDuration != nil {
		t.Fatalf("defaults: onMaxOpen %q maxOpenDuration %v", got.Spec.OnMaxOpen, got.Spec.MaxOpenDuration)
	}
	server, goSide := got.Spec.Resolve(), local.Spec.Resolve()
	if server.OnMaxOpen != goSide.OnMaxOpen || server.MaxOpen != 0 || !reflect.DeepEqual(server.Fallback, goSide.Fallback) || server.Fallback.Name != "require-x" {
		t.Fatalf("resolved on the server %+v, in Go %+v", server, goSide)
	}

	ok := breaker("closes")
	ok.Spec.MaxOpenDuration = &metav1.Duration{Duration: 30 * time.Minute}
	ok.Spec.OnMaxOpen = v1alpha1.OnMaxOpenClose
	if err := env.Client.Create(ctx, ok); err != nil {
		t.Fatalf("maxOpenDuration 30m with onMaxOpen Close: %v", err)
	}
	if r := ok.Spec.Resolve(); r.MaxOpen != 30*time.Minute || r.OnMaxOpen != v1alpha1.OnMaxOpenClose {
		t.Fatalf("resolved %+v", r)
	}

	for name, tc := range map[string]struct {
		spec map[string]any
		want string
	}{
		"close without a duration": {map[string]any{"onMaxOpen": "Close"}, "onMaxOpen: Close needs maxOpenDuration"},
		"unknown onMaxOpen":        {map[string]any{"onMaxOpen": "Reopen"}, "spec.onMaxOpen"},
		"duration too short":       {map[string]any{"maxOpenDuration": "10s"}, "maxOpenDuration must be a duration from 1m to 720h"},
		"duration too long":        {map[string]any{"maxOpenDuration": "800h"}, "maxOpenDuration must be a duration from 1m to 720h"},
		"duration not a duration":  {map[string]any{"maxOpenDuration": "soon"}, "maxOpenDuration must be a duration from 1m to 720h"},
		"fallback of another kind": {map[string]any{"whileOpen": map[string]any{"fallbackPolicy": map[string]any{"kind": "Deployment", "name": "x"}}}, "spec.whileOpen.fallbackPolicy.kind"},
		"fallback without a name":  {map[string]any{"whileOpen": map[string]any{"fallbackPolicy": map[string]any{"kind": "MutatingAdmissionPolicy", "name": ""}}}, "spec.whileOpen.fallbackPolicy.name"},
	} {
		spec := map[string]any{
			"target":                          map[string]any{"kind": "ValidatingWebhookConfiguration", "configurationName": "c", "webhookName": "w.tripswitch.test"},
			"allowAdmissionWithoutValidation": true,
		}
		for k, v := range tc.spec {
			spec[k] = v
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "tripswitch.dev/v1alpha1", "kind": "WebhookCircuitBreaker",
			"metadata": map[string]any{"name": "bad"}, "spec": spec,
		}}
		err := env.Client.Create(ctx, u)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want Invalid naming %q", name, err, tc.want)
		}
		for _, noise := range []string{"no such key", "type conversion error"} {
			if err != nil && strings.Contains(err.Error(), noise) {
				t.Errorf("%s: the message leaks %q: %v", name, noise, err)
			}
		}
	}
}

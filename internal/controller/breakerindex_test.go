package controller

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

func breaker(name string, kind v1alpha1.TargetKind, cfg, hook string) *v1alpha1.WebhookCircuitBreaker {
	return &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{Target: v1alpha1.Target{Kind: kind, ConfigurationName: cfg, WebhookName: hook}}}
}

// TestList: the breakers filed under a key, through the index and without
// one (every breaker listed and filtered), alike; an unknown index is an
// error, not every breaker.
func TestList(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{
		breaker("a", v1alpha1.MutatingWebhookConfiguration, "inject", "hook.example.com"),
		breaker("b", v1alpha1.MutatingWebhookConfiguration, "inject", "hook.example.com"),
		breaker("c", v1alpha1.MutatingWebhookConfiguration, "inject-copy", "hook.example.com"),
		breaker("d", v1alpha1.ValidatingWebhookConfiguration, "inject", "hook.example.com"),
		breaker("e", v1alpha1.MutatingWebhookConfiguration, "inject", "other.example.com"),
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...)
	for field, key := range map[string]func(v1alpha1.Target) string{byTarget: v1alpha1.Target.Key, byWebhook: v1alpha1.Target.SignalKey} {
		b = b.WithIndex(&v1alpha1.WebhookCircuitBreaker{}, field, func(o client.Object) []string {
			return []string{key(o.(*v1alpha1.WebhookCircuitBreaker).Spec.Target)}
		})
	}
	c := b.Build()
	a := objs[0].(*v1alpha1.WebhookCircuitBreaker).Spec.Target
	for _, tc := range []struct {
		field, key string
		want       []string
	}{
		{byTarget, a.Key(), []string{"a", "b"}},
		{byWebhook, a.SignalKey(), []string{"a", "b", "c"}},
	} {
		for _, indexed := range []bool{true, false} {
			list, err := listBreakers(context.Background(), c, indexed, tc.field, tc.key)
			if err != nil {
				t.Fatalf("%s (indexed %v): %v", tc.field, indexed, err)
			}
			var got []string
			for _, p := range list {
				got = append(got, p.Name)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s %q (indexed %v) = %v, want %v", tc.field, tc.key, indexed, got, tc.want)
			}
		}
	}
	if _, err := listBreakers(context.Background(), c, false, "spec.nothing", "x"); err == nil {
		t.Error("an unknown index listed breakers, want an error")
	}
}

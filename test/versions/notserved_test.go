package versions_test

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/selfsigned"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestFallbackKindNotServedIsSaid: on a release that does not serve
// MutatingAdmissionPolicy at admissionregistration.k8s.io/v1, the
// controller runs; a breaker whose fallback is one says so (FloorArmed
// False, reason FloorWriteFailed, a Warning event, both naming the release
// that serves it) and does not fail its webhook open without the floor it
// was asked for; a breaker beside it, without a fallback, opens its circuit
// as anywhere. Where the kind is served, internal/controller's
// TestFallbackFloorThroughACycle/MutatingAdmissionPolicy runs instead.
func TestFallbackKindNotServedIsSaid(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := t.Context()
	gk := schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: string(v1alpha1.MutatingAdmissionPolicy)}
	if _, err := env.Client.RESTMapper().RESTMapping(gk, "v1"); err == nil {
		t.Skipf("this API server serves %s at v1: internal/controller's TestFallbackFloorThroughACycle covers it", gk.Kind)
	} else if !meta.IsNoMatchError(err) {
		t.Fatalf("discover %s: %v", gk.Kind, err)
	}

	// Both webhooks refuse connections: every probe fails at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "https://" + l.Addr().String() + "/mutate"
	_ = l.Close()
	ca, err := selfsigned.NewCA("versions-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"with-floor", "without-floor"} {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name:                    "mutate.versions.tripswitch.test",
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(down), CABundle: ca.PEM},
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				AdmissionReviewVersions: []string{"v1"},
				ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"tripswitch.test/never": "true"}},
			}},
		}
		wcb := &v1alpha1.WebhookCircuitBreaker{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.WebhookCircuitBreakerSpec{
				Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: name, WebhookName: "mutate.versions.tripswitch.test"},
				AllowAdmissionWithoutMutation: true,
			},
		}
		if name == "with-floor" {
			wcb.Spec.WhileOpen = &v1alpha1.WhileOpenSpec{FallbackPolicy: &v1alpha1.FallbackPolicy{Kind: v1alpha1.MutatingAdmissionPolicy, Name: "floor"}}
		}
		for _, o := range []client.Object{cfg, wcb} {
			if err := env.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := configuration(t, env, "with-floor")

	runController(t, env)

	eventually(t, time.Minute, "the breaker without a fallback opens its circuit", func(ctx context.Context) (bool, string) {
		var b v1alpha1.WebhookCircuitBreaker
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "without-floor"}, &b); err != nil {
			return false, err.Error()
		}
		return b.Status.State == v1alpha1.StateOpen, string(b.Status.State)
	})
	wantSaid := "served there from Kubernetes " + floor.ServedFrom(v1alpha1.MutatingAdmissionPolicy)
	eventually(t, time.Minute, "the breaker with a MutatingAdmissionPolicy fallback says it is not served", func(ctx context.Context) (bool, string) {
		var b v1alpha1.WebhookCircuitBreaker
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "with-floor"}, &b); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionFloorArmed)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "FloorWriteFailed" && strings.Contains(c.Message, wantSaid), condition(c)
	})
	eventually(t, time.Minute, "a Warning event says so", func(ctx context.Context) (bool, string) {
		var events eventsv1.EventList
		if err := env.Client.List(ctx, &events); err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.Regarding.Name == "with-floor" && e.Type == "Warning" && e.Reason == "FloorWriteFailed" && strings.Contains(e.Note, wantSaid) {
				return true, ""
			}
		}
		return false, "no such event among " + strconv.Itoa(len(events.Items))
	})
	var b v1alpha1.WebhookCircuitBreaker
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "with-floor"}, &b); err != nil {
		t.Fatal(err)
	}
	if b.Status.State == v1alpha1.StateOpen {
		t.Errorf("the breaker whose floor cannot be armed is Open: it must not fail open without it")
	}
	if after := configuration(t, env, "with-floor"); after != before {
		t.Errorf("the webhook whose floor cannot be armed was changed:\nbefore %s\nafter  %s", before, after)
	}
	t.Logf("state %s; FloorArmed %s; Ready %s", b.Status.State, condition(meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionFloorArmed)),
		condition(meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionReady)))
}

// runController runs the manager as cmd/tripswitch does, one replica, until
// the test ends.
func runController(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctrl.SetLogger(logr.Discard())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controller.Setup(mgr, controller.Options{Prober: &probe.HTTPProber{}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
}

// configuration is a webhook configuration's webhooks and annotations.
func configuration(t *testing.T, env *testenv.Env, name string) string {
	t.Helper()
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, &cfg); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(struct {
		W []admissionregistrationv1.MutatingWebhook
		A map[string]string
	}{cfg.Webhooks, cfg.Annotations})
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func condition(c *metav1.Condition) string {
	if c == nil {
		return "no condition"
	}
	return string(c.Status) + "/" + c.Reason + ": " + c.Message
}

// eventually polls cond until it holds or limit passes, then fails t with
// cond's last word.
func eventually(t *testing.T, limit time.Duration, what string, cond func(context.Context) (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, last := cond(t.Context())
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, not yet: %s (last: %s)", limit, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

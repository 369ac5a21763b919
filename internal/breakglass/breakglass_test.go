package breakglass_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/breakglass"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

func hook(name string) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name:                    name,
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/" + name), CABundle: []byte("ca-" + name)},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"never": "matches"}},
	}
}

// open opens webhook's circuit on the named configuration as the controller
// would, recording breaker (name, uid) as its owner.
func open(t *testing.T, c client.Client, kind v1alpha1.TargetKind, name, webhook string, action v1alpha1.OpenAction, breaker string, uid types.UID) {
	t.Helper()
	obj, err := circuit.NewObject(kind)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKey{Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	cfg, err := circuit.View(obj)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := (circuit.Writer{Client: c, Budget: circuit.NoBudget{}}).Open(t.Context(), cfg, webhook, v1alpha1.CircuitRecord{
		Breaker: breaker, BreakerUID: uid, Action: action, OpenedAt: metav1.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if action == v1alpha1.OpenActionBypass {
		// In a half-open trial: a restore must end it too.
		if _, err := (circuit.Writer{Client: c, Budget: circuit.NoBudget{}}).StartTrial(t.Context(), cfg, rec, 6, metav1.Now()); err != nil {
			t.Fatal(err)
		}
	}
}

func webhooksJSON(t *testing.T, c client.Client, name string) string {
	t.Helper()
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(t.Context(), client.ObjectKey{Name: name}, &cfg); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(struct {
		W []admissionregistrationv1.MutatingWebhook
		A map[string]string
	}{cfg.Webhooks, cfg.Annotations})
	return string(b)
}

// TestStatusAndRestoreWithoutTheController: no controller runs. Circuits
// recorded open are listed from their annotations, restored exactly with the
// one-patch protocol, and a circuit someone else changed is refused.
func TestStatusAndRestoreWithoutTheController(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx, c := t.Context(), env.Client

	for _, name := range []string{"bg-bypass", "bg-altered"} {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"team": "platform"}},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{hook("other.example.com"), hook("target.example.com")},
		}
		if err := c.Create(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	original := webhooksJSON(t, c, "bg-bypass")
	// A breaker that still exists owns one circuit; the other's is gone.
	owner := &v1alpha1.WebhookCircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "owner"},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "bg-bypass", WebhookName: "target.example.com"},
			AllowAdmissionWithoutMutation: true,
		},
	}
	if err := c.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	open(t, c, v1alpha1.MutatingWebhookConfiguration, "bg-bypass", "target.example.com", v1alpha1.OpenActionBypass, "owner", owner.UID)
	open(t, c, v1alpha1.MutatingWebhookConfiguration, "bg-altered", "target.example.com", v1alpha1.OpenActionIgnore, "gone", "uid")
	// An administrator puts Fail back by hand, leaving the record.
	var altered admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "bg-altered"}, &altered); err != nil {
		t.Fatal(err)
	}
	altered.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	if err := c.Update(ctx, &altered); err != nil {
		t.Fatal(err)
	}
	alteredBefore := webhooksJSON(t, c, "bg-altered")

	circuits, err := breakglass.List(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(circuits) != 2 {
		t.Fatalf("listed %+v, want two open circuits", circuits)
	}
	alt, bypass := circuits[0], circuits[1] // sorted by configuration name
	if bypass.Ref() != "bg-bypass/target.example.com" || bypass.Action != v1alpha1.OpenActionBypass || !bypass.BreakerExists || bypass.Problem != "" || bypass.Since.IsZero() ||
		bypass.Trial != "6.25%" || bypass.TrialSince.IsZero() {
		t.Fatalf("bypass circuit %+v", bypass)
	}
	if alt.Ref() != "bg-altered/target.example.com" || alt.BreakerExists || !strings.Contains(alt.Problem, "someone changed") {
		t.Fatalf("altered circuit %+v", alt)
	}

	if err := breakglass.Restore(ctx, c, "", "bg-bypass", "target.example.com"); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got := webhooksJSON(t, c, "bg-bypass"); got != original {
		t.Fatalf("after restore the configuration is not its original:\n%s\nwant\n%s", got, original)
	}
	err = breakglass.Restore(ctx, c, v1alpha1.MutatingWebhookConfiguration, "bg-altered", "target.example.com")
	if !errors.Is(err, breakglass.ErrRefused) || !strings.Contains(err.Error(), "someone changed what tripswitch set") {
		t.Fatalf("restore over an administrator's change: %v, want a refusal", err)
	}
	if got := webhooksJSON(t, c, "bg-altered"); got != alteredBefore {
		t.Fatal("a refused restore changed the configuration")
	}
	if err := breakglass.Restore(ctx, c, "", "bg-bypass", "target.example.com"); err == nil || !strings.Contains(err.Error(), "no circuit record") {
		t.Fatalf("restoring twice: %v", err)
	}
	if err := breakglass.Restore(ctx, c, "", "nothing-here", "x"); err == nil || !strings.Contains(err.Error(), "no webhook configuration named nothing-here") {
		t.Fatalf("restoring a missing configuration: %v", err)
	}
}

package controller_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestGeneratedRoleSufficesWithResourceNames runs a full cycle as a user bound
// only to the generated ClusterRole plus webhook configuration access for the
// one approved name, and checks that any other configuration is out of reach.
func TestGeneratedRoleSufficesWithResourceNames(t *testing.T) {
	b := newBed(t)
	// What config/rbac/webhook_configurations.yaml and the Helm chart add
	// for each approved configuration.
	restricted := restrictedClient(t, b, rbacv1.PolicyRule{
		APIGroups: []string{admissionregistrationv1.GroupName}, Resources: []string{"mutatingwebhookconfigurations"},
		ResourceNames: []string{b.cfg}, Verbs: []string{"get", "list", "watch", "patch"},
	})

	orig := b.createConfig(nil)
	wcb := b.createBreaker(b.cfg, nil)
	r := b.reconciler(restricted)
	b.drive(r, wcb.Name, probe.Unhealthy)
	if !hasRecord(b.getConfig()) {
		t.Fatal("circuit did not open under the generated role")
	}
	b.drive(r, wcb.Name, probe.Healthy)
	if cfg := b.getConfig(); hasRecord(cfg) || webhookJSON(t, cfg, target) != webhookJSON(t, orig, target) {
		t.Fatal("circuit did not close under the generated role")
	}

	var other admissionregistrationv1.MutatingWebhookConfiguration
	other.Name = "not-approved"
	if err := restricted.Get(b.ctx, client.ObjectKeyFromObject(&other), &other); !apierrors.IsForbidden(err) {
		t.Fatalf("get of an unapproved configuration: %v, want Forbidden", err)
	}
	var list admissionregistrationv1.MutatingWebhookConfigurationList
	if err := restricted.List(b.ctx, &list); !apierrors.IsForbidden(err) {
		t.Fatalf("cluster-wide list of configurations: %v, want Forbidden", err)
	}
}

// restrictedClient is a client for a controller user bound to the generated
// role plus extra: without extra it approves no webhook configuration.
func restrictedClient(t *testing.T, b *bed, extra ...rbacv1.PolicyRule) client.Client {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(data, &role); err != nil {
		t.Fatal(err)
	}
	role.ObjectMeta = metav1.ObjectMeta{Name: b.cfg}
	role.Rules = append(role.Rules, extra...)
	user := "system:serviceaccount:tripswitch-system:" + b.cfg
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: b.cfg},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.cfg},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}},
	}
	for _, obj := range []client.Object{&role, binding} {
		if err := b.c.Create(b.ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := controlPlane(t).UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: controlPlane(t).Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A breaker for a configuration RBAC does not approve says so, naming what
// to change; it gets no finalizer, so deleting it completes with the
// controller running or not. An older breaker that got a finalizer but never
// read its target is released on delete.
func TestBreakerTheControllerMayNotRead(t *testing.T) {
	b := newBed(t)
	restricted := restrictedClient(t, b)
	b.createConfig(nil)
	wcb := b.createBreaker(b.cfg, nil)
	r := b.reconciler(restricted)
	r.Client = restricted
	b.settle(r, wcb.Name)
	got := b.getBreaker(wcb.Name)
	ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != policy.ReasonNotApproved || got.Status.State != v1alpha1.StateUnknown {
		t.Fatalf("state %s, Ready %+v; want Unknown and Ready False (NotApproved)", got.Status.State, ready)
	}
	for _, want := range []string{"approvedWebhookConfigurations.mutating", b.cfg, "config/rbac/webhook_configurations.yaml"} {
		if !strings.Contains(ready.Message, want) {
			t.Errorf("message %q does not name %q", ready.Message, want)
		}
	}
	if len(got.Finalizers) != 0 {
		t.Fatalf("finalizers %v on a breaker whose target tripswitch may not read", got.Finalizers)
	}
	// Deleted with no controller at all: gone at once.
	if err := b.c.Delete(b.ctx, got); err != nil {
		t.Fatal(err)
	}
	var gone v1alpha1.WebhookCircuitBreaker
	if err := b.c.Get(b.ctx, client.ObjectKeyFromObject(got), &gone); !apierrors.IsNotFound(err) {
		t.Fatalf("after delete: %v, want NotFound", err)
	}

	// An older breaker with a finalizer, its target never read: released.
	old := b.createBreaker(b.cfg+"-old", func(w *v1alpha1.WebhookCircuitBreaker) { w.Finalizers = []string{controller.Finalizer} })
	if err := b.c.Delete(b.ctx, old); err != nil {
		t.Fatal(err)
	}
	_ = b.trySettle(r, old.Name)
	if err := b.c.Get(b.ctx, client.ObjectKeyFromObject(old), &gone); !apierrors.IsNotFound(err) {
		t.Fatalf("a never-read breaker's delete: %v (finalizers %v), want it released", err, gone.Finalizers)
	}
}

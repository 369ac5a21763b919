package targetwatch_test

import (
	"context"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/targetwatch"
)

const mutating = v1alpha1.MutatingWebhookConfiguration

// TestTargets, on a real API server, as a user RBAC allows only get, list
// and watch on the two configurations by name (as tripswitch's approval
// does): a configuration is served from its watch once the watch has
// listed it; every breaker that targets it hears of each change to it and
// of its deletion, and nothing else; a configuration that does not exist is
// served as not found; a watch's first list wakes its breakers whatever it
// holds (they wait for it); a watch no breaker needs stops.
func TestTargets(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx := t.Context()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	const watched, absent = "tw-watched", "tw-absent"
	create := func(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
		t.Helper()
		cfg, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name: "w.tripswitch.test", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9/")},
				SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tripswitch.test/never": "true"}},
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	create(watched)
	create("tw-other") // not approved: its watch never lists

	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "tw-reader"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"},
		ResourceNames: []string{watched, absent}, Verbs: []string{"get", "list", "watch"},
	}}}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tw-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "tw-reader"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "tw-reader"}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := env.UserConfig("tw-reader")
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan string, 100)
	targets := targetwatch.New(kubernetes.NewForConfigOrDie(cfg), func(b string) { changes <- b })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = targets.Start(runCtx); close(done) }()
	t.Cleanup(func() { stop(); <-done })

	// heard waits until each of want has heard of a change, and fails on
	// any other breaker.
	heard := func(want ...string) {
		t.Helper()
		left := slices.Clone(want)
		deadline := time.After(30 * time.Second)
		for len(left) > 0 {
			select {
			case b := <-changes:
				if !slices.Contains(want, b) {
					t.Fatalf("%s heard of a change to a configuration it does not target", b)
				}
				left = slices.DeleteFunc(left, func(s string) bool { return s == b })
			case <-deadline:
				t.Fatalf("%v never heard of the change", left)
			}
		}
	}
	get := func(breaker, name string) (*admissionregistrationv1.MutatingWebhookConfiguration, bool, bool) {
		obj, found, cached := targets.Get(breaker, mutating, name)
		if !found {
			return nil, found, cached
		}
		return obj.(*admissionregistrationv1.MutatingWebhookConfiguration), found, cached
	}

	if _, _, cached := get("one", watched); cached {
		t.Fatal("served from a watch that had just started")
	}
	// RBAC does not approve tw-other: its watch never lists, and says so.
	if _, _, cached := get("stranger", "tw-other"); cached {
		t.Fatal("a configuration RBAC does not approve was served")
	}
	heard("one") // the first list brought the configuration
	if targets.Listing(mutating, watched) {
		t.Fatal("still listing after the first list was heard")
	}
	got, found, cached := get("one", watched)
	if !found || !cached || got.Name != watched {
		t.Fatalf("after the first list: found %v, cached %v", found, cached)
	}
	get("two", watched)
	if users := targets.Users(mutating, watched); !slices.Equal(slices.Sorted(slices.Values(users)), []string{"one", "two"}) {
		t.Fatalf("users %v, want one and two", users)
	}
	// The copy served is the caller's own.
	got.Labels = map[string]string{"scribbled": "yes"}
	if again, _, _ := get("one", watched); again.Labels["scribbled"] != "" {
		t.Fatal("Get serves the store's own object")
	}

	live, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, watched, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live.Labels = map[string]string{"edited": "yes"}
	if live, err = admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	heard("one", "two")
	if got, _, _ := get("one", watched); got.ResourceVersion != live.ResourceVersion || got.Labels["edited"] != "yes" {
		t.Fatalf("after the edit: resourceVersion %s, labels %v; want %s", got.ResourceVersion, got.Labels, live.ResourceVersion)
	}

	// A configuration that does not exist: its first list wakes its
	// breakers all the same, and it is not found, from the watch.
	get("lonely", absent)
	heard("lonely")
	if _, found, cached := get("lonely", absent); found || !cached {
		t.Fatalf("a configuration that does not exist: found %v, cached %v", found, cached)
	}
	create(absent)
	heard("lonely")
	if _, found, _ := get("lonely", absent); !found {
		t.Fatal("a created configuration is not served")
	}

	if err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, watched, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	heard("one", "two")
	if _, found, cached := get("one", watched); found || !cached {
		t.Fatalf("after deletion: found %v, cached %v", found, cached)
	}

	if !targets.Listing(mutating, "tw-other") {
		t.Fatal("the watch of a configuration RBAC does not approve is not listing")
	}
	if _, _, cached := get("stranger", "tw-other"); cached {
		t.Fatal("a configuration RBAC does not approve was served")
	}

	targets.Forget("one")
	targets.Forget("two")
	if users := targets.Users(mutating, watched); len(users) != 0 {
		t.Fatalf("users after both forgot: %v", users)
	}
	if _, _, cached := get("three", watched); cached {
		t.Fatal("a stopped watch still serves")
	}
}

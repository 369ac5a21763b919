package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
)

// installed is a control plane with an install's objects applied, and a
// client acting as tripswitch's ServiceAccount.
type installed struct {
	env   *testenv.Env
	admin client.Client
	sa    client.Client
	// ns is the controller's namespace.
	ns string
	// servesMAP: the API server serves MutatingAdmissionPolicy at
	// admissionregistration.k8s.io/v1 (not before 1.36; the compatibility
	// suite runs this test on older releases too).
	servesMAP bool
}

// install starts a control plane, validates the chart's objects with a
// server-side dry run, and creates objs (config/default, or an overlay of
// it, installing into ns as user) for real.
func install(t *testing.T, objs []*unstructured.Unstructured, ns, user string) *installed {
	t.Helper()
	return installWith(t, testenv.Options{}, objs, ns, user)
}

// installWith is install on a control plane started with opts.
func installWith(t *testing.T, opts testenv.Options, objs []*unstructured.Unstructured, ns, user string) *installed {
	t.Helper()
	opts.AddToScheme = append(opts.AddToScheme, v1alpha1.AddToScheme)
	env := testenv.Start(t, opts)
	ctx := t.Context()
	nsObj := find(objs, "Namespace", ns)
	if nsObj == nil {
		t.Fatal("the install has no Namespace " + ns)
	}
	if err := env.Client.Create(ctx, nsObj); err != nil {
		t.Fatalf("create %s: %v", key(nsObj), err)
	}
	for _, o := range crdsFirst(helmTemplateIn(t, ns, chartValues())) {
		if err := env.Client.Create(ctx, o, client.DryRunAll); err != nil {
			t.Fatalf("the API server rejects the chart's %s: %v", key(o), err)
		}
	}
	for _, o := range crdsFirst(without(objs, "Namespace")) {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("the API server rejects the install's %s: %v", key(o), err)
		}
	}
	cfg, err := env.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	_, err = env.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: "MutatingAdmissionPolicy"}, "v1")
	if err != nil && !meta.IsNoMatchError(err) {
		t.Fatal(err)
	}
	return &installed{env: env, admin: env.Client, sa: sa, ns: ns, servesMAP: err == nil}
}

func crdsFirst(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	return append(ofKind(objs, "CustomResourceDefinition"), without(objs, "CustomResourceDefinition")...)
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// webhook is a mutating webhook entry on 127.0.0.1 (never called here).
func webhook(name string) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name:                    name,
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/" + name), CABundle: []byte("not-a-real-ca")},
		Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{"CREATE"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		// Nothing may be created in the test namespace by the webhook's rules.
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"never": "matches"}},
	}
}

func (in *installed) mutating(t *testing.T, name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"owner.example.com/team": "platform"}},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{webhook("target.example.com"), webhook("other.example.com")},
	}
	if err := in.admin.Create(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (in *installed) validating(t *testing.T, name string) {
	t.Helper()
	m := webhook("target.example.com")
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: m.Name, ClientConfig: m.ClientConfig, Rules: m.Rules, SideEffects: m.SideEffects,
			AdmissionReviewVersions: m.AdmissionReviewVersions, NamespaceSelector: m.NamespaceSelector,
		}},
	}
	if err := in.admin.Create(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
}

// cycle opens and closes target's circuit as the ServiceAccount, with the
// controller's own write protocol.
func (in *installed) cycle(ctx context.Context, kind v1alpha1.TargetKind, name string, action v1alpha1.OpenAction) error {
	read := func() (*circuit.Configuration, error) {
		obj, err := circuit.NewObject(kind)
		if err != nil {
			return nil, err
		}
		if err := in.sa.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
			return nil, err
		}
		return circuit.View(obj)
	}
	cfg, err := read()
	if err != nil {
		return err
	}
	w := circuit.Writer{Client: in.sa, Budget: circuit.NoBudget{}}
	rec, err := w.Open(ctx, cfg, "target.example.com", v1alpha1.CircuitRecord{
		Breaker: "deploy-test", BreakerUID: "uid", Action: action, OpenedAt: metav1.Now(),
	})
	if err != nil {
		return err
	}
	if action == v1alpha1.OpenActionBypass {
		// A half-open trial, a failed one, and a second trial: each a write
		// the guard must allow (its sample expression included).
		for _, step := range []func() error{
			func() (err error) { rec, err = w.StartTrial(ctx, cfg, rec, 6, metav1.Now()); return err },
			func() (err error) { rec, err = w.EndTrial(ctx, cfg, rec, metav1.Now()); return err },
			func() (err error) { rec, err = w.StartTrial(ctx, cfg, rec, 100, metav1.Now()); return err },
		} {
			if cfg, err = read(); err != nil {
				return err
			}
			if err := step(); err != nil {
				return err
			}
		}
	}
	if cfg, err = read(); err != nil {
		return err
	}
	return w.Close(ctx, cfg, "target.example.com", &rec)
}

// TestInstalledPermissions applies config/default (and dry-runs the chart)
// on a real API server, then acts as tripswitch's ServiceAccount: a full
// open/close cycle on an approved configuration works with both actions and
// the admission guard installed; everything else is forbidden by RBAC or
// denied by the guard with its message.
func TestInstalledPermissions(t *testing.T) {
	testInstalledPermissions(t, install(t, kustomizeBuild(t, "config/default"), namespace, username()))
}

// TestOverlayPermissions: the same on an overlay of config/default into
// namespace platform-guard with namePrefix guard- (the ServiceAccount is
// platform-guard/guard-tripswitch): the bindings grant it what they grant
// config/default's, and the admission guard constrains it.
func TestOverlayPermissions(t *testing.T) {
	objs := overlay(t, "namespace: platform-guard\nnamePrefix: guard-\nresources:\n  - {{config}}/default\n")
	testInstalledPermissions(t, install(t, objs, "platform-guard", "system:serviceaccount:platform-guard:guard-tripswitch"))
}

func testInstalledPermissions(t *testing.T, in *installed) {
	ctx := t.Context()
	namespace := in.ns
	in.mutating(t, approvedMutating)
	in.mutating(t, "not-approved")
	in.validating(t, approvedValidating)
	in.fallbackPolicies(t)

	// The guard takes effect once the API server has loaded it: probe with a
	// label change (which it denies), undoing any that got through first.
	caBundle := func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
		c.Webhooks[0].ClientConfig.CABundle = []byte("attacker-ca")
	}
	label := func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
		c.Labels = map[string]string{"probe": "guard"}
	}
	unlabel := func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Labels = nil }
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := in.saEdit(ctx, approvedMutating, label)
		if err != nil && strings.Contains(err.Error(), "may not change labels") {
			break
		}
		if err == nil {
			if err := edit(ctx, in.admin, approvedMutating, unlabel); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission guard never denied the ServiceAccount a label change: last error %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	t.Run("open and close pass for both actions", func(t *testing.T) {
		for _, action := range []v1alpha1.OpenAction{v1alpha1.OpenActionIgnore, v1alpha1.OpenActionBypass} {
			if err := in.cycle(ctx, v1alpha1.MutatingWebhookConfiguration, approvedMutating, action); err != nil {
				t.Fatalf("%s cycle as the ServiceAccount: %v", action, err)
			}
			// The validating policy's rules evaluate too (an evaluation error
			// would deny this, the guard failing closed).
			if err := in.cycle(ctx, v1alpha1.ValidatingWebhookConfiguration, approvedValidating, action); err != nil {
				t.Fatalf("%s cycle on a validating configuration as the ServiceAccount: %v", action, err)
			}
		}
		var now admissionregistrationv1.MutatingWebhookConfiguration
		if err := in.admin.Get(ctx, client.ObjectKey{Name: approvedMutating}, &now); err != nil {
			t.Fatal(err)
		}
		if len(now.Annotations) != 1 || *now.Webhooks[0].FailurePolicy != admissionregistrationv1.Fail || len(now.Webhooks[0].MatchConditions) != 0 {
			t.Fatalf("after two cycles the configuration is not back to its original: %+v", now)
		}
	})

	t.Run("the floor's writes pass for both policy kinds", func(t *testing.T) {
		if err := in.floorCycle(ctx, v1alpha1.ValidatingAdmissionPolicy, approvedValidatingFallback); err != nil {
			t.Fatalf("floor cycle on a ValidatingAdmissionPolicy as the ServiceAccount: %v", err)
		}
		if !in.servesMAP {
			t.Logf("this API server does not serve MutatingAdmissionPolicy at v1: its floor is not tried")
		} else if err := in.floorCycle(ctx, v1alpha1.MutatingAdmissionPolicy, approvedMutatingFallback); err != nil {
			t.Fatalf("floor cycle on a MutatingAdmissionPolicy as the ServiceAccount: %v", err)
		}
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := in.admin.Get(ctx, client.ObjectKey{Name: approvedValidatingFallback}, &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Annotations) != 1 || len(p.Spec.MatchConditions) != 1 {
			t.Fatalf("after a cycle and a release the policy is not as written: %+v", p)
		}
	})

	t.Run("without the static guard, RBAC alone does not stop a rewrite of an approved policy", func(t *testing.T) {
		// kube-apiserver applies no policy created through the API to
		// admission policies: config/admission-guard-static is the guard
		// (TestStaticFallbackGuard), loaded from a file at start-up.
		err := in.saEditVAP(ctx, approvedValidatingFallback, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Message = "rewritten by the ServiceAccount"
		})
		if err != nil {
			t.Fatalf("an approved policy's rewrite by the ServiceAccount was refused without the static guard: %v (if the API server now guards policies with API-created policies, move the guard into config/admission-guard)", err)
		}
	})

	t.Run("the guard denies everything else", func(t *testing.T) {
		for name, edit := range map[string]struct {
			edit func(*admissionregistrationv1.MutatingWebhookConfiguration)
			msg  string
		}{
			"caBundle": {caBundle, "failurePolicy and its own tripswitch.dev/circuit-open matchCondition"},
			"rules":    {func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Webhooks[0].Rules = nil }, "every other webhook field must stay as it was"},
			"another webhook's timeout": {func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
				c.Webhooks[1].TimeoutSeconds = ptr.To[int32](30)
			}, "every other webhook field must stay as it was"},
			"someone else's annotation": {func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
				c.Annotations["owner.example.com/team"] = "attacker"
			}, "only its own tripswitch.dev/circuit.* annotations"},
			"a new foreign annotation": {func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Annotations["example.com/x"] = "y" }, "only its own tripswitch.dev/circuit.* annotations"},
			"a label":                  {func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Labels = map[string]string{"a": "b"} }, "may not change labels"},
			"a webhook removed":        {func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Webhooks = c.Webhooks[:1] }, "may not add, remove, rename or reorder webhooks"},
			"failurePolicy without a record": {func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
				c.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			}, "only together with its recovery record"},
			"its matchCondition made true": {func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
				c.Annotations[circuit.AnnotationKey("target.example.com")] = "{}"
				c.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "tripswitch.dev/circuit-open", Expression: "true"}}
			}, "must have the expression false"},
			"its matchCondition made a selective skip": {func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
				c.Annotations[circuit.AnnotationKey("target.example.com")] = "{}"
				c.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "tripswitch.dev/circuit-open",
					Expression: circuit.SamplePrefix + "(0)') || object.metadata.name.matches('^evil" + circuit.SampleSuffix}}
			}, "must have the expression false"},
		} {
			err := in.saEdit(ctx, approvedMutating, edit.edit)
			if err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), edit.msg) {
				t.Errorf("%s: %v, want a denial saying %q", name, err, edit.msg)
			}
		}
		var v admissionregistrationv1.ValidatingWebhookConfiguration
		if err := in.sa.Get(ctx, client.ObjectKey{Name: approvedValidating}, &v); err != nil {
			t.Fatal(err)
		}
		base := v.DeepCopy()
		v.Webhooks[0].ClientConfig.CABundle = []byte("attacker-ca")
		if err := in.sa.Patch(ctx, &v, client.MergeFrom(base)); err == nil || !strings.Contains(err.Error(), "every other webhook field must stay as it was") {
			t.Errorf("caBundle change on a validating configuration: %v, want the guard's denial", err)
		}
		// The guard constrains only tripswitch: an administrator may still edit.
		if err := edit(ctx, in.admin, approvedMutating, caBundle); err != nil {
			t.Fatalf("an administrator's caBundle change was denied: %v", err)
		}
	})

	t.Run("RBAC forbids the rest", func(t *testing.T) {
		forbidden := map[string]error{
			"patch an unapproved configuration": in.saEdit(ctx, "not-approved", func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
				c.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			}),
			"get an unapproved configuration":    in.sa.Get(ctx, client.ObjectKey{Name: "not-approved"}, &admissionregistrationv1.MutatingWebhookConfiguration{}),
			"delete an approved configuration":   in.sa.Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: approvedMutating}}),
			"create a configuration":             in.sa.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "new"}}),
			"list all configurations":            in.sa.List(ctx, &admissionregistrationv1.MutatingWebhookConfigurationList{}),
			"list validating configurations":     in.sa.List(ctx, &admissionregistrationv1.ValidatingWebhookConfigurationList{}),
			"list configmaps":                    in.sa.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(namespace)),
			"list secrets":                       in.sa.List(ctx, &corev1.SecretList{}, client.InNamespace(namespace)),
			"get a secret":                       in.sa.Get(ctx, client.ObjectKey{Namespace: "default", Name: "x"}, &corev1.Secret{}),
			"list configmaps cluster-wide":       in.sa.List(ctx, &corev1.ConfigMapList{}),
			"create a configmap":                 in.sa.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}}),
			"get an unapproved fallback policy":  in.sa.Get(ctx, client.ObjectKey{Name: "not-approved-fallback"}, &admissionregistrationv1.ValidatingAdmissionPolicy{}),
			"list validating policies":           in.sa.List(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyList{}),
			"delete an approved fallback policy": in.sa.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: approvedValidatingFallback}}),
			"create a policy binding": in.sa.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: approvedValidatingFallback, ValidationActions: []admissionregistrationv1.ValidationAction{"Deny"}}}),
		}
		if in.servesMAP {
			forbidden["list mutating policies"] = in.sa.List(ctx, &admissionregistrationv1.MutatingAdmissionPolicyList{})
		}
		for what, err := range forbidden {
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s as the ServiceAccount: %v, want Forbidden", what, err)
			}
		}
		// Leader election records core/v1 events about its Lease in the
		// controller's namespace: a correct install logs no forbidden event.
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "tripswitch.leader"},
			InvolvedObject: corev1.ObjectReference{Kind: "Lease", Namespace: namespace, Name: "tripswitch.dev", APIVersion: "coordination.k8s.io/v1"},
			Reason:         "LeaderElection", Message: "became leader", Type: corev1.EventTypeNormal}
		if err := in.sa.Create(ctx, ev); err != nil {
			t.Errorf("the leader-election event in %s as the ServiceAccount: %v", namespace, err)
		}
		// Events about a (cluster-scoped) breaker go to "default".
		bev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "breaker.transition"},
			EventTime: metav1.NowMicro(), ReportingController: "tripswitch.dev/controller", ReportingInstance: "tripswitch-0",
			Action: "Open", Reason: "CircuitOpened", Type: corev1.EventTypeNormal, Note: "opened",
			Regarding: corev1.ObjectReference{Kind: "WebhookCircuitBreaker", Name: "b", APIVersion: "tripswitch.dev/v1alpha1"}}
		if err := in.sa.Create(ctx, bev); err != nil {
			t.Errorf("an event about a breaker in default as the ServiceAccount: %v", err)
		}
		// Watching the approved configuration by name is allowed.
		var list admissionregistrationv1.MutatingWebhookConfigurationList
		if err := in.sa.List(ctx, &list, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", approvedMutating)}); err != nil || len(list.Items) != 1 {
			t.Errorf("list of the approved configuration by name: %v (%d items)", err, len(list.Items))
		}
	})
}

// fallbackPolicies creates, as an administrator, the approved fallback
// policies (live, as an operator writes them) and one that is not approved.
func (in *installed) fallbackPolicies(t *testing.T) {
	t.Helper()
	rules := &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{"CREATE"},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
		},
	}}}
	// Nothing in the test is named so: the policies never apply.
	never := []admissionregistrationv1.MatchCondition{{Name: "never", Expression: "object.metadata.name == 'never-created'"}}
	vap := func(name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
		return &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"owner.example.com/team": "platform"}},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConstraints: rules, MatchConditions: never,
				Validations: []admissionregistrationv1.Validation{{Expression: "has(object.metadata.labels)"}}},
		}
	}
	policies := []client.Object{vap(approvedValidatingFallback), vap("not-approved-fallback")}
	if in.servesMAP {
		policies = append(policies, &admissionregistrationv1.MutatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: approvedMutatingFallback},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{MatchConstraints: rules, MatchConditions: never,
				ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
				Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
					ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: `Object{metadata: Object.metadata{labels: {"floor": "armed"}}}`}}}},
		})
	}
	for _, o := range policies {
		if err := in.admin.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// floorCycle adopts, arms, disarms and releases a fallback policy as the
// ServiceAccount, with the floor's own writes.
func (in *installed) floorCycle(ctx context.Context, kind v1alpha1.FallbackPolicyKind, name string) error {
	w := floor.Writer{Client: in.sa}
	owner := floor.Owner{Breaker: "deploy-test", UID: "uid"}
	for _, step := range []func(*floor.Policy) (bool, error){
		func(p *floor.Policy) (bool, error) { return w.Disarm(ctx, p, owner, metav1.Now()) },
		func(p *floor.Policy) (bool, error) { return w.Arm(ctx, p, owner, metav1.Now()) },
		func(p *floor.Policy) (bool, error) { return w.Disarm(ctx, p, owner, metav1.Now()) },
		func(p *floor.Policy) (bool, error) { return w.Release(ctx, p, owner) },
	} {
		p, err := w.Read(ctx, v1alpha1.FallbackPolicy{Kind: kind, Name: name})
		if err != nil {
			return err
		}
		if wrote, err := step(p); err != nil || !wrote {
			return fmt.Errorf("wrote %v: %w", wrote, err)
		}
	}
	return nil
}

// saEditVAP reads the validating policy name as the ServiceAccount, applies
// change, and writes it back with a merge patch.
func (in *installed) saEditVAP(ctx context.Context, name string, change func(*admissionregistrationv1.ValidatingAdmissionPolicy)) error {
	var p admissionregistrationv1.ValidatingAdmissionPolicy
	if err := in.sa.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
		return err
	}
	base := p.DeepCopy()
	change(&p)
	return in.sa.Patch(ctx, &p, client.MergeFrom(base))
}

// testFallbackGuard: with config/admission-guard-static loaded, the
// ServiceAccount's floor writes pass and every other change to a fallback
// policy is denied with the message of the rule it breaks.
func testFallbackGuard(t *testing.T, in *installed) {
	ctx := t.Context()
	in.fallbackPolicies(t)
	// The fallback guard is loaded on its own: wait for its denial too.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := in.saEditVAP(ctx, approvedValidatingFallback, func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Labels = map[string]string{"probe": "guard"}
		})
		if err != nil && strings.Contains(err.Error(), "may not change labels") {
			break
		}
		if err == nil {
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			if err := in.admin.Get(ctx, client.ObjectKey{Name: approvedValidatingFallback}, &p); err != nil {
				t.Fatal(err)
			}
			p.Labels = nil
			if err := in.admin.Update(ctx, &p); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fallback guard never denied the ServiceAccount a label change: last error %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Adopted (inert, with a record): the state an edit would start from.
	w := floor.Writer{Client: in.sa}
	p, err := w.Read(ctx, v1alpha1.FallbackPolicy{Kind: v1alpha1.ValidatingAdmissionPolicy, Name: approvedValidatingFallback})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Disarm(ctx, p, floor.Owner{Breaker: "deploy-test", UID: "uid"}, metav1.Now()); err != nil {
		t.Fatal(err)
	}
	ours := func(p *admissionregistrationv1.ValidatingAdmissionPolicy) int {
		for j, c := range p.Spec.MatchConditions {
			if c.Name == floor.MatchConditionName {
				return j
			}
		}
		return -1
	}
	for name, edit := range map[string]struct {
		edit func(*admissionregistrationv1.ValidatingAdmissionPolicy)
		msg  string
	}{
		"its validations": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.Validations[0].Expression = "true"
		}, "every other field of the spec must stay as it was"},
		"its failurePolicy": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		}, "every other field of the spec must stay as it was"},
		"the operator's matchCondition": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConditions[0].Expression = "true"
		}, "every other field of the spec must stay as it was"},
		"its condition made true": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConditions[ours(p)].Expression = "true"
			p.Annotations[floor.AnnotationKey] += " "
		}, "must have the expression false"},
		"armed without its record": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Spec.MatchConditions = p.Spec.MatchConditions[:ours(p)]
		}, "only together with its record"},
		"someone else's annotation": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Annotations["owner.example.com/team"] = "attacker"
		}, "only its own tripswitch.dev/floor annotation"},
		"a circuit annotation": {func(p *admissionregistrationv1.ValidatingAdmissionPolicy) {
			p.Annotations[circuit.AnnotationKey("x.example.com")] = "{}"
		}, "only its own tripswitch.dev/floor annotation"},
	} {
		err := in.saEditVAP(ctx, approvedValidatingFallback, edit.edit)
		if err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), edit.msg) {
			t.Errorf("%s: %v, want a denial saying %q", name, err, edit.msg)
		}
	}
	var m admissionregistrationv1.MutatingAdmissionPolicy
	if err := in.sa.Get(ctx, client.ObjectKey{Name: approvedMutatingFallback}, &m); err != nil {
		t.Fatal(err)
	}
	base := m.DeepCopy()
	m.Spec.Mutations[0].ApplyConfiguration.Expression = `Object{metadata: Object.metadata{labels: {"floor": "attacker"}}}`
	if err := in.sa.Patch(ctx, &m, client.MergeFrom(base)); err == nil || !strings.Contains(err.Error(), "every other field of the spec must stay as it was") {
		t.Errorf("a mutation changed on a MutatingAdmissionPolicy: %v, want the guard's denial", err)
	}
	// The guard constrains only tripswitch.
	var p2 admissionregistrationv1.ValidatingAdmissionPolicy
	if err := in.admin.Get(ctx, client.ObjectKey{Name: approvedValidatingFallback}, &p2); err != nil {
		t.Fatal(err)
	}
	p2.Spec.Validations[0].Message = "edited by an administrator"
	if err := in.admin.Update(ctx, &p2); err != nil {
		t.Fatalf("an administrator's edit of the policy was denied: %v", err)
	}

	// The floor's own writes pass: release the adoption above, then a cycle.
	p, err = w.Read(ctx, v1alpha1.FallbackPolicy{Kind: v1alpha1.ValidatingAdmissionPolicy, Name: approvedValidatingFallback})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Release(ctx, p, floor.Owner{Breaker: "deploy-test", UID: "uid"}); err != nil {
		t.Fatalf("release through the static guard: %v", err)
	}
	if err := in.floorCycle(ctx, v1alpha1.ValidatingAdmissionPolicy, approvedValidatingFallback); err != nil {
		t.Errorf("a floor cycle on a ValidatingAdmissionPolicy through the static guard: %v", err)
	}
	if err := in.floorCycle(ctx, v1alpha1.MutatingAdmissionPolicy, approvedMutatingFallback); err != nil {
		t.Errorf("a floor cycle on a MutatingAdmissionPolicy through the static guard: %v", err)
	}
}

// TestStaticFallbackGuard: config/default on an API server that loads
// config/admission-guard-static from its admission configuration.
func TestStaticFallbackGuard(t *testing.T) {
	dir := t.TempDir()
	static := filepath.Join(dir, "static")
	if err := os.Mkdir(static, 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(repoPath(t, "config", "admission-guard-static", "fallback-policies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(static, "fallback-policies.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	admission := "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n" +
		"  - name: ValidatingAdmissionPolicy\n    configuration:\n      apiVersion: apiserver.config.k8s.io/v1\n" +
		"      kind: ValidatingAdmissionPolicyConfiguration\n      staticManifestsDir: " + static + "\n"
	if err := os.WriteFile(filepath.Join(dir, "admission.yaml"), []byte(admission), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := testenv.Options{APIServerFlags: map[string]string{"admission-control-config-file": filepath.Join(dir, "admission.yaml")}}
	testFallbackGuard(t, installWith(t, opts, kustomizeBuild(t, "config/default"), namespace, username()))
}

// saEdit reads name as the ServiceAccount, applies change, and writes it back
// with a merge patch.
func (in *installed) saEdit(ctx context.Context, name string, change func(*admissionregistrationv1.MutatingWebhookConfiguration)) error {
	return edit(ctx, in.sa, name, change)
}

func edit(ctx context.Context, c client.Client, name string, change func(*admissionregistrationv1.MutatingWebhookConfiguration)) error {
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &cfg); err != nil {
		return err
	}
	base := cfg.DeepCopy()
	change(&cfg)
	return c.Patch(ctx, &cfg, client.MergeFrom(base))
}

// TestRemediationPermissions: config/default with the audit and remediation
// components, on a real API server, asked as tripswitch's ServiceAccount:
// it may patch the listed resource and evict Pods, and nothing more (no
// update, no delete, no Pod writes, no patch of what is not listed).
func TestRemediationPermissions(t *testing.T) {
	objs := overlay(t, "resources:\n  - {{config}}/default\ncomponents:\n  - {{config}}/audit\n  - {{config}}/remediation\n")
	in := install(t, objs, namespace, username())
	for _, tc := range []struct {
		group, resource, subresource, verb string
		allowed                            bool
	}{
		{"apps", "deployments", "", "patch", true},
		{"apps", "deployments", "", "get", true},
		{"", "pods", "eviction", "create", true},
		{"apps", "deployments", "", "update", false},
		{"apps", "deployments", "", "delete", false},
		{"", "pods", "", "delete", false},
		{"", "pods", "", "patch", false},
		{"", "pods", "", "create", false},
		{"", "configmaps", "", "patch", false},
	} {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "shop", Group: tc.group, Resource: tc.resource, Subresource: tc.subresource, Verb: tc.verb}}}
		if err := in.sa.Create(t.Context(), review); err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != tc.allowed {
			t.Errorf("%s %s/%s (group %q): allowed %v, want %v", tc.verb, tc.resource, tc.subresource, tc.group, review.Status.Allowed, tc.allowed)
		}
	}
}

package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/breakglass"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// floorBed is a webhook that fails every ConfigMap labelled for the test
// (its URL answers nothing, failurePolicy Fail) and its fallback policy,
// written inert (with tripswitch's condition) as docs/fallback.md advises.
type floorBed struct {
	*bed
	kind   v1alpha1.FallbackPolicyKind
	cfgObj client.Object
	policy client.Object
	n      int
}

const floorLabel = "tripswitch.test/floor"

func newFloorBed(t *testing.T, kind v1alpha1.FallbackPolicyKind) *floorBed {
	b := &floorBed{bed: newBed(t), kind: kind}
	rule := []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{floorLabel: b.cfg}}
	cc := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9/" + b.cfg), CABundle: []byte("not-a-real-ca")}
	constraints := &admissionregistrationv1.MatchResources{ObjectSelector: sel, ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: rule[0]}}}
	inert := []admissionregistrationv1.MatchCondition{{Name: "operator-own", Expression: "true"}, {Name: floor.MatchConditionName, Expression: floor.MatchConditionExpression}}
	var binding client.Object
	switch kind {
	case v1alpha1.ValidatingAdmissionPolicy:
		b.cfgObj = &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: b.cfg},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: target, ClientConfig: cc, Rules: rule, ObjectSelector: sel, TimeoutSeconds: ptr.To(int32(2)),
				SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}}}}
		b.policy = &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: b.cfg, Annotations: map[string]string{"team": "platform"}},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: ptr.To(admissionregistrationv1.Fail), MatchConstraints: constraints, MatchConditions: inert,
				Validations: []admissionregistrationv1.Validation{{Expression: "'x' in object.metadata.?labels.orValue({})", Message: "fallback: label x is required"}}}}
		binding = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: b.cfg},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: b.cfg, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
	case v1alpha1.MutatingAdmissionPolicy:
		b.cfgObj = &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: b.cfg},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: target, ClientConfig: cc, Rules: rule, ObjectSelector: sel, TimeoutSeconds: ptr.To(int32(2)),
				SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}}}}
		b.policy = &admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: b.cfg, Annotations: map[string]string{"team": "platform"}},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{FailurePolicy: ptr.To(admissionregistrationv1.Fail), MatchConstraints: constraints, MatchConditions: inert,
				ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
				Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
					ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: `Object{metadata: Object.metadata{labels: {"fallback": "applied"}}}`}}}}}
		binding = &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: b.cfg},
			Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: b.cfg}}
	}
	for _, o := range []client.Object{b.cfgObj, b.policy, binding} {
		if err := b.c.Create(b.ctx, o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
		t.Cleanup(func() { _ = b.c.Delete(context.Background(), o) })
	}
	return b
}

func (b *floorBed) breaker() *v1alpha1.WebhookCircuitBreaker {
	targetKind := v1alpha1.ValidatingWebhookConfiguration
	if b.kind == v1alpha1.MutatingAdmissionPolicy {
		targetKind = v1alpha1.MutatingWebhookConfiguration
	}
	return b.createBreaker(b.cfg, func(w *v1alpha1.WebhookCircuitBreaker) {
		w.Spec.Target.Kind = targetKind
		w.Spec.AllowAdmissionWithoutMutation = targetKind == v1alpha1.MutatingWebhookConfiguration
		w.Spec.AllowAdmissionWithoutValidation = targetKind == v1alpha1.ValidatingWebhookConfiguration
		w.Spec.OpenAction = v1alpha1.OpenActionBypass
		w.Spec.WhileOpen = &v1alpha1.WhileOpenSpec{FallbackPolicy: &v1alpha1.FallbackPolicy{Kind: b.kind, Name: b.cfg}}
	})
}

// snapshot is the exact stored form of what must be byte-identical across a
// cycle: the configuration's webhooks and annotations, the policy's spec and
// annotations.
func (b *floorBed) snapshot() (cfg, pol string) {
	b.t.Helper()
	for i, o := range []client.Object{b.cfgObj, b.policy} {
		if err := b.c.Get(b.ctx, types.NamespacedName{Name: b.cfg}, o); err != nil {
			b.t.Fatal(err)
		}
		var v any
		switch x := o.(type) {
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			v = x.Webhooks
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			v = x.Webhooks
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			v = x.Spec
		case *admissionregistrationv1.MutatingAdmissionPolicy:
			v = x.Spec
		}
		data, _ := json.Marshal(map[string]any{"v": v, "annotations": o.GetAnnotations()})
		if i == 0 {
			cfg = string(data)
		} else {
			pol = string(data)
		}
	}
	return cfg, pol
}

// admit creates a ConfigMap the webhook matches (label x when withX) and
// returns it as admitted, the API server's time and its answer.
func (b *floorBed) admit(withX bool) (*corev1.ConfigMap, time.Duration, error) {
	b.n++
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", b.cfg, b.n), Labels: map[string]string{floorLabel: b.cfg}}}
	if withX {
		cm.Labels["x"] = "yes"
	}
	start := time.Now()
	err := b.c.Create(b.ctx, cm)
	return cm, time.Since(start), err
}

// until polls ok (the API server loads webhook and policy changes through
// informers, so a write takes effect shortly after it returns).
func until(t *testing.T, what string, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		good, last := ok()
		if good {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened; last: %s", what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func isWebhookFailure(err error) bool {
	return err != nil && strings.Contains(err.Error(), "failed calling webhook")
}

// TestFallbackFloorThroughACycle: for each policy kind, on the real API
// server, the controller adopts the policy (inert: the webhook's failures
// still deny), arms it before opening the webhook (then only the fallback
// applies: the VAP denies what it must and admits the rest; the MAP labels
// what is admitted), and after the close the policy is inert again and both
// objects are byte-identical to before; the status and the breaker's
// deletion know the floor.
func TestFallbackFloorThroughACycle(t *testing.T) {
	for _, kind := range []v1alpha1.FallbackPolicyKind{v1alpha1.ValidatingAdmissionPolicy, v1alpha1.MutatingAdmissionPolicy} {
		t.Run(string(kind), func(t *testing.T) {
			b := newFloorBed(t, kind)
			wcb := b.breaker()
			r := b.reconciler(b.c)
			b.drive(r, wcb.Name, probe.Healthy)
			got := b.getBreaker(wcb.Name)
			if f := got.Status.Floor; f == nil || f.Armed || f.Policy != string(kind)+"/"+b.cfg || !meta.IsStatusConditionFalse(got.Status.Conditions, v1alpha1.ConditionFloorArmed) {
				t.Fatalf("closed: status.floor %+v conditions %+v", f, got.Status.Conditions)
			}
			cfg0, pol0 := b.snapshot()
			if !strings.Contains(pol0, floor.AnnotationKey) {
				t.Fatalf("not adopted: %s", pol0)
			}
			until(t, "closed: the failing webhook denies", func() (bool, string) {
				_, _, err := b.admit(true)
				return isWebhookFailure(err), fmt.Sprint(err)
			})

			b.drive(r, wcb.Name, probe.Unhealthy)
			got = b.getBreaker(wcb.Name)
			if got.Status.State != v1alpha1.StateOpen || got.Status.Floor == nil || !got.Status.Floor.Armed ||
				!meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionFloorArmed) {
				t.Fatalf("open: state %s floor %+v", got.Status.State, got.Status.Floor)
			}
			var slowest time.Duration
			switch kind {
			case v1alpha1.ValidatingAdmissionPolicy:
				until(t, "open: the fallback denies an object without x", func() (bool, string) {
					_, _, err := b.admit(false)
					return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "fallback: label x is required"), fmt.Sprint(err)
				})
				until(t, "open: the fallback admits an object with x", func() (bool, string) {
					_, _, err := b.admit(true)
					return err == nil, fmt.Sprint(err)
				})
				for range 10 {
					_, took, err := b.admit(false)
					if !apierrors.IsInvalid(err) {
						t.Fatalf("open: an object without x: %v", err)
					}
					slowest = max(slowest, took)
				}
			case v1alpha1.MutatingAdmissionPolicy:
				until(t, "open: the fallback labels what it admits", func() (bool, string) {
					cm, _, err := b.admit(false)
					return err == nil && cm.Labels["fallback"] == "applied", fmt.Sprint(err, cm.Labels)
				})
				for range 10 {
					cm, took, err := b.admit(false)
					if err != nil || cm.Labels["fallback"] != "applied" {
						t.Fatalf("open: admitted without the fallback's label: %v %v", err, cm.Labels)
					}
					slowest = max(slowest, took)
				}
			}
			t.Logf("%s while open: slowest of 10 answers %v", kind, slowest)

			b.drive(r, wcb.Name, probe.Healthy)
			cfg1, pol1 := b.snapshot()
			if cfg1 != cfg0 || pol1 != pol0 {
				t.Fatalf("after the cycle:\nconfiguration %s\n         was %s\npolicy %s\n   was %s", cfg1, cfg0, pol1, pol0)
			}
			until(t, "closed again: the failing webhook denies, the fallback is inert", func() (bool, string) {
				_, _, err := b.admit(false)
				return isWebhookFailure(err), fmt.Sprint(err)
			})

			// Deleting the breaker gives the policy back as written: inert,
			// without the record.
			if err := b.c.Delete(b.ctx, wcb); err != nil {
				t.Fatal(err)
			}
			b.settle(r, wcb.Name)
			_, pol2 := b.snapshot()
			if strings.Contains(pol2, floor.AnnotationKey) || !strings.Contains(pol2, floor.MatchConditionName) {
				t.Fatalf("after delete: %s", pol2)
			}
		})
	}
}

// crashing fails the first patch of one kind of object after it has been
// made, as a controller killed between its two writes would leave things.
type crashing struct {
	client.Client
	on     func(client.Object) bool
	failed bool
}

var errCrash = errors.New("killed between the two writes")

func (c *crashing) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	if !c.failed && c.on(obj) {
		c.failed = true
		return errCrash // before the write: the process dies holding only the first
	}
	return c.Client.Patch(ctx, obj, p, opts...)
}

// TestFloorCrashBetweenTheWrites, ten cycles: a controller that dies after
// arming and before opening leaves the floor armed and the webhook closed;
// one that dies after closing and before disarming leaves the floor armed
// and the webhook closed too: stricter, never looser. A fresh reconciler
// finishes the step either way, and each cycle ends byte-identical to
// before it. (The death is a write refused in flight; the kill -9 of a
// real process is left to an e2e test.)
func TestFloorCrashBetweenTheWrites(t *testing.T) {
	b := newFloorBed(t, v1alpha1.ValidatingAdmissionPolicy)
	wcb := b.breaker()
	b.drive(b.reconciler(b.c), wcb.Name, probe.Healthy)
	cfg0, pol0 := b.snapshot()
	isConfig := func(o client.Object) bool {
		_, ok := o.(*admissionregistrationv1.ValidatingWebhookConfiguration)
		return ok
	}
	isPolicy := func(o client.Object) bool { _, ok := o.(*admissionregistrationv1.ValidatingAdmissionPolicy); return ok }
	// untilCrash reconciles through c until its one fault has struck.
	untilCrash := func(c *crashing) {
		r := b.reconciler(c)
		for i := 0; i < 12 && !c.failed; i++ {
			_, _ = r.Reconcile(b.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: wcb.Name}})
		}
		if !c.failed {
			t.Fatal("the write to fail was never made")
		}
	}
	state := func() (open, armed bool) {
		cfg, pol := b.snapshot()
		return strings.Contains(cfg, circuit.AnnotationKey(target)), !strings.Contains(pol, `"`+floor.MatchConditionName+`"`)
	}

	for cycle := range 10 {
		// Opening: armed, then the webhook write dies.
		b.health.set(wcb.Name, probe.Unhealthy)
		untilCrash(&crashing{Client: b.c, on: isConfig})
		if open, armed := state(); open || !armed {
			t.Fatalf("cycle %d, killed while opening: webhook open %v, floor armed %v; want closed and armed", cycle, open, armed)
		}
		b.settle(b.reconciler(b.c), wcb.Name)
		if open, armed := state(); !open || !armed {
			t.Fatalf("cycle %d, after the restart: webhook open %v, floor armed %v", cycle, open, armed)
		}

		// Closing: the webhook is restored, then the disarm dies.
		b.health.set(wcb.Name, probe.Healthy)
		untilCrash(&crashing{Client: b.c, on: isPolicy})
		if open, armed := state(); open || !armed {
			t.Fatalf("cycle %d, killed while closing: webhook open %v, floor armed %v; want closed and armed", cycle, open, armed)
		}
		b.settle(b.reconciler(b.c), wcb.Name)
		if cfg, pol := b.snapshot(); cfg != cfg0 || pol != pol0 {
			t.Fatalf("cycle %d did not converge to before:\n%s\n%s\nwant\n%s\n%s", cycle, cfg, pol, cfg0, pol0)
		}
	}
}

// TestBreakGlassKnowsTheFloor: `tripswitch status` shows an open circuit's
// floor armed, and `tripswitch restore` restores the webhook, then disarms
// the floor, without the controller; both objects are as before the open.
func TestBreakGlassKnowsTheFloor(t *testing.T) {
	b := newFloorBed(t, v1alpha1.ValidatingAdmissionPolicy)
	wcb := b.breaker()
	r := b.reconciler(b.c)
	b.drive(r, wcb.Name, probe.Healthy)
	cfg0, pol0 := b.snapshot()
	b.drive(r, wcb.Name, probe.Unhealthy)
	circuits, err := breakglass.List(b.ctx, b.c)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range circuits {
		if c.Configuration == b.cfg {
			found = true
			if want := "ValidatingAdmissionPolicy/" + b.cfg + " armed"; c.Floor != want {
				t.Fatalf("status: floor %q, want %q", c.Floor, want)
			}
		}
	}
	if !found {
		t.Fatal("status does not list the open circuit")
	}
	if err := breakglass.Restore(b.ctx, b.c, v1alpha1.ValidatingWebhookConfiguration, b.cfg, target); err != nil {
		t.Fatal(err)
	}
	if cfg, pol := b.snapshot(); cfg != cfg0 || pol != pol0 {
		t.Fatalf("after restore:\n%s\n%s\nwant\n%s\n%s", cfg, pol, cfg0, pol0)
	}
}

// TestChangingTheFallbackPolicyGivesTheOldOneBack: a breaker whose
// spec.whileOpen.fallbackPolicy names another policy gives the one it held
// back as it found it; while the circuit is open only once the new one is
// armed (a new one that cannot be armed keeps the old one armed, listed in
// status.floor.previous); removing the fallback while open gives it back
// too; after the breaker is deleted both policies are byte-identical to how
// the operator wrote them.
func TestChangingTheFallbackPolicyGivesTheOldOneBack(t *testing.T) {
	b := newFloorBed(t, v1alpha1.ValidatingAdmissionPolicy)
	one := b.cfg
	two := b.cfg + "-two"
	second := b.policy.DeepCopyObject().(*admissionregistrationv1.ValidatingAdmissionPolicy)
	second.ObjectMeta = metav1.ObjectMeta{Name: two}
	if err := b.c.Create(b.ctx, second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.c.Delete(context.Background(), second) })
	policy := func(name string) string {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := b.c.Get(b.ctx, types.NamespacedName{Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(map[string]any{"spec": p.Spec, "annotations": p.Annotations})
		return string(data)
	}
	armed := func(name string) bool { return !strings.Contains(policy(name), `"`+floor.MatchConditionName+`"`) }
	adopted := func(name string) bool { return strings.Contains(policy(name), floor.AnnotationKey) }
	orig1, orig2 := policy(one), policy(two)
	name := func(n string) string { return string(v1alpha1.ValidatingAdmissionPolicy) + "/" + n }
	point := func(n string) {
		t.Helper()
		wcb := b.getBreaker(b.cfg)
		if n == "" {
			wcb.Spec.WhileOpen = nil
		} else {
			wcb.Spec.WhileOpen = &v1alpha1.WhileOpenSpec{FallbackPolicy: &v1alpha1.FallbackPolicy{Kind: v1alpha1.ValidatingAdmissionPolicy, Name: n}}
		}
		if err := b.c.Update(b.ctx, wcb); err != nil {
			t.Fatal(err)
		}
	}

	wcb := b.breaker()
	r := b.reconciler(b.c)
	b.drive(r, wcb.Name, probe.Healthy)
	if !adopted(one) || armed(one) || adopted(two) {
		t.Fatalf("closed: one %s, two %s", policy(one), policy(two))
	}

	// Closed: one is given back as written, two adopted inert.
	point(two)
	b.settle(r, wcb.Name)
	if policy(one) != orig1 || !adopted(two) || armed(two) {
		t.Fatalf("after the change while closed:\none %s\n was %s\ntwo %s", policy(one), orig1, policy(two))
	}
	if f := b.getBreaker(wcb.Name).Status.Floor; f == nil || f.Policy != name(two) || len(f.Previous) != 0 {
		t.Fatalf("status.floor %+v", f)
	}

	// Open: two armed; pointed at one, one is armed and two given back.
	b.drive(r, wcb.Name, probe.Unhealthy)
	if !armed(two) {
		t.Fatalf("open: two %s", policy(two))
	}
	point(one)
	b.settle(r, wcb.Name)
	if !armed(one) || policy(two) != orig2 {
		t.Fatalf("after the change while open:\none %s\ntwo %s\n was %s", policy(one), policy(two), orig2)
	}

	// Open, pointed at a policy that does not exist: one stays armed and
	// is listed as previous until the new one can be armed.
	missing := b.cfg + "-missing"
	point(missing)
	b.settle(r, wcb.Name)
	f := b.getBreaker(wcb.Name).Status.Floor
	if !armed(one) || f == nil || f.Policy != name(missing) || fmt.Sprint(f.Previous) != fmt.Sprint([]string{name(one)}) || !strings.Contains(f.Message, "not found") {
		t.Fatalf("pointed at a missing policy while open: one armed %v, status.floor %+v", armed(one), f)
	}
	third := b.policy.DeepCopyObject().(*admissionregistrationv1.ValidatingAdmissionPolicy)
	third.ObjectMeta = metav1.ObjectMeta{Name: missing}
	if err := b.c.Create(b.ctx, third); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.c.Delete(context.Background(), third) })
	orig3 := policy(missing)
	b.settle(r, wcb.Name)
	if !armed(missing) || policy(one) != orig1 {
		t.Fatalf("once the new policy exists: it armed %v; one %s", armed(missing), policy(one))
	}
	if f := b.getBreaker(wcb.Name).Status.Floor; f == nil || len(f.Previous) != 0 || !f.Armed {
		t.Fatalf("status.floor %+v", f)
	}

	// The fallback removed while open: given back at once (the operator
	// chose no floor).
	point("")
	b.settle(r, wcb.Name)
	if policy(missing) != orig3 || b.getBreaker(wcb.Name).Status.Floor != nil {
		t.Fatalf("fallback removed: policy %s, status.floor %+v", policy(missing), b.getBreaker(wcb.Name).Status.Floor)
	}

	// Closed again and deleted: every policy as the operator wrote it.
	point(two)
	b.drive(r, wcb.Name, probe.Healthy)
	if err := b.c.Delete(b.ctx, b.getBreaker(wcb.Name)); err != nil {
		t.Fatal(err)
	}
	b.settle(r, wcb.Name)
	if policy(one) != orig1 || policy(two) != orig2 || policy(missing) != orig3 {
		t.Fatalf("after delete:\n%s\n%s\n%s", policy(one), policy(two), policy(missing))
	}
}

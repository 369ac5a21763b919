package floor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
)

var owner = floor.Owner{Breaker: "policy-validator", UID: "uid-floor"}

// operatorCondition is the operator's own matchCondition: the policy covers
// ConfigMaps named floor-*, so the rest of the control plane is untouched.
var operatorCondition = admissionregistrationv1.MatchCondition{Name: "floor-objects", Expression: "object.metadata.name.startsWith('floor-')"}

var rules = &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
	RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	},
}}}

var seq atomic.Int64

// create creates a ConfigMap floor-<n> (with label x when labelled) and
// returns it as admitted, how long the API server took, and its answer.
func create(ctx context.Context, c client.Client, labelled bool) (*corev1.ConfigMap, time.Duration, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("floor-%d", seq.Add(1))}}
	if labelled {
		cm.Labels = map[string]string{"x": "yes"}
	}
	start := time.Now()
	err := c.Create(ctx, cm)
	return cm, time.Since(start), err
}

// eventually polls until ok holds: the API server loads policy changes
// through an informer, so a write takes effect shortly after it returns.
func eventually(t *testing.T, what string, ok func() (bool, string)) {
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

// snapshot is what must be byte-identical across a cycle: the spec and the
// annotations (the record included).
func snapshot(t *testing.T, p *floor.Policy) string {
	t.Helper()
	var spec any
	switch o := p.Object.(type) {
	case *admissionregistrationv1.ValidatingAdmissionPolicy:
		spec = o.Spec
	case *admissionregistrationv1.MutatingAdmissionPolicy:
		spec = o.Spec
	}
	data, err := json.Marshal(map[string]any{"spec": spec, "annotations": p.Object.GetAnnotations()})
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func read(t *testing.T, w floor.Writer, kind v1alpha1.FallbackPolicyKind, name string) *floor.Policy {
	t.Helper()
	p, err := w.Read(t.Context(), v1alpha1.FallbackPolicy{Kind: kind, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFloorOnTheAPIServer: for each policy kind, a live policy the operator
// wrote (with a matchCondition of its own and an annotation) is adopted
// inert by the first disarm, applies in milliseconds once armed, and is
// byte-identical after the disarm that follows; every write is idempotent,
// a stale one is refused, and a release gives the policy back as found.
func TestFloorOnTheAPIServer(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	w := floor.Writer{Client: env.Client}
	ctx := t.Context()

	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "require-x", Annotations: map[string]string{"owner.example.com/team": "platform"}},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: rules,
			MatchConditions:  []admissionregistrationv1.MatchCondition{operatorCondition},
			Validations:      []admissionregistrationv1.Validation{{Expression: "'x' in object.metadata.?labels.orValue({})", Message: "floor: label x is required"}},
		},
	}
	vapb := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "require-x"},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "require-x", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	mp := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "set-floor-label"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			FailurePolicy:      ptr.To(admissionregistrationv1.Fail),
			MatchConstraints:   rules,
			MatchConditions:    []admissionregistrationv1.MatchCondition{operatorCondition},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: `Object{metadata: Object.metadata{labels: {"floor": "armed"}}}`}}},
		},
	}
	mpb := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "set-floor-label"},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "set-floor-label"},
	}

	denies := func() (bool, string) {
		_, _, err := create(ctx, env.Client, false)
		return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "floor: label x is required"), fmt.Sprint(err)
	}
	admits := func() (bool, string) {
		_, _, err := create(ctx, env.Client, false)
		return err == nil, fmt.Sprint(err)
	}
	labels := func() (bool, string) {
		cm, _, err := create(ctx, env.Client, true)
		return err == nil && cm.Labels["floor"] == "armed", fmt.Sprint(err, cm.Labels)
	}
	unlabelled := func() (bool, string) {
		cm, _, err := create(ctx, env.Client, true)
		return err == nil && cm.Labels["floor"] == "", fmt.Sprint(err, cm.Labels)
	}

	for _, tc := range []struct {
		kind            v1alpha1.FallbackPolicyKind
		policy, binding client.Object
		applies, inert  func() (bool, string)
	}{
		{v1alpha1.ValidatingAdmissionPolicy, vap, vapb, denies, admits},
		{v1alpha1.MutatingAdmissionPolicy, mp, mpb, labels, unlabelled},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			if !served(t, env, tc.kind) {
				// An older release: the floor says so, plainly, and that is all.
				_, err := w.Read(ctx, v1alpha1.FallbackPolicy{Kind: tc.kind, Name: tc.policy.GetName()})
				if !errors.Is(err, floor.ErrNotServed) || !strings.Contains(err.Error(), "served there from Kubernetes "+floor.ServedFrom(tc.kind)) {
					t.Fatalf("read a %s where it is not served: %v; want ErrNotServed, naming the release that serves it", tc.kind, err)
				}
				t.Logf("%s is not served here: %v", tc.kind, err)
				return
			}
			if err := env.Client.Create(ctx, tc.policy); err != nil {
				t.Fatal(err)
			}
			if err := env.Client.Create(ctx, tc.binding); err != nil {
				t.Fatal(err)
			}
			name := tc.policy.GetName()
			asWritten := read(t, w, tc.kind, name)
			original := snapshot(t, asWritten)
			eventually(t, "the operator's live policy applies", tc.applies)

			// Adoption: the first write makes the policy inert and records it.
			p := read(t, w, tc.kind, name)
			if wrote, err := w.Disarm(ctx, p, owner, metav1.Now()); err != nil || !wrote {
				t.Fatalf("adopt: wrote %v, %v", wrote, err)
			}
			s := floor.Inspect(p)
			if !s.Inert() || s.Record == nil || s.Record.Armed || s.Record.ConditionPreexisted || s.Record.Policy != string(tc.kind)+"/"+name {
				t.Fatalf("after adoption: %+v %+v", s, s.Record)
			}
			if p.MatchConditions[0] != operatorCondition {
				t.Fatalf("adoption moved the operator's condition: %v", p.MatchConditions)
			}
			eventually(t, "the adopted policy is inert", tc.inert)
			inert := snapshot(t, p)
			if wrote, err := w.Disarm(ctx, p, owner, metav1.Now()); err != nil || wrote {
				t.Fatalf("a second disarm wrote %v, %v", wrote, err)
			}

			// A write from a stale read is refused: re-read and decide again.
			stale := read(t, w, tc.kind, name)
			stale.Object.SetResourceVersion("1")
			if _, err := w.Arm(ctx, stale, owner, metav1.Now()); !floor.IsStale(err) {
				t.Fatalf("arm from a stale read: %v, want a conflict", err)
			}
			// Another breaker may not take the floor over.
			if _, err := w.Arm(ctx, read(t, w, tc.kind, name), floor.Owner{Breaker: "other", UID: "uid-other"}, metav1.Now()); err == nil {
				t.Fatal("another breaker armed the floor")
			}

			// Armed: the policy applies, in milliseconds and in process.
			p = read(t, w, tc.kind, name)
			if wrote, err := w.Arm(ctx, p, owner, metav1.Now()); err != nil || !wrote {
				t.Fatalf("arm: wrote %v, %v", wrote, err)
			}
			if s := floor.Inspect(p); !s.Armed() || !s.Record.Armed || s.Record.ArmedAt == nil || s.Drifted() {
				t.Fatalf("after arm: %+v %+v", s, s.Record)
			}
			if wrote, err := w.Arm(ctx, p, owner, metav1.Now()); err != nil || wrote {
				t.Fatalf("a second arm wrote %v, %v", wrote, err)
			}
			eventually(t, "the armed policy applies", tc.applies)
			var slowest time.Duration
			for range 10 {
				cm, took, err := create(ctx, env.Client, tc.kind == v1alpha1.MutatingAdmissionPolicy)
				slowest = max(slowest, took)
				if tc.kind == v1alpha1.ValidatingAdmissionPolicy && !apierrors.IsInvalid(err) {
					t.Fatalf("armed VAP admitted an unlabelled ConfigMap: %v", err)
				}
				if tc.kind == v1alpha1.MutatingAdmissionPolicy && (err != nil || cm.Labels["floor"] != "armed") {
					t.Fatalf("armed MAP: %v, labels %v", err, cm.Labels)
				}
			}
			if slowest > 500*time.Millisecond {
				t.Errorf("the slowest answer under the armed policy took %v: the API server runs it in process", slowest)
			}
			if tc.kind == v1alpha1.ValidatingAdmissionPolicy {
				if _, _, err := create(ctx, env.Client, true); err != nil {
					t.Fatalf("armed VAP denied a labelled ConfigMap: %v", err)
				}
			}
			t.Logf("%s armed: slowest of 10 answers %v", tc.kind, slowest)

			// Disarmed: inert again, and byte-identical to before the cycle.
			p = read(t, w, tc.kind, name)
			if wrote, err := w.Disarm(ctx, p, owner, metav1.Now()); err != nil || !wrote {
				t.Fatalf("disarm: wrote %v, %v", wrote, err)
			}
			if got := snapshot(t, p); got != inert {
				t.Fatalf("after a cycle the policy differs:\nbefore %s\nafter  %s", inert, got)
			}
			eventually(t, "the disarmed policy is inert", tc.inert)

			// Release: as the operator wrote it, live again, no record.
			if wrote, err := w.Release(ctx, p, owner); err != nil || !wrote {
				t.Fatalf("release: wrote %v, %v", wrote, err)
			}
			if got := snapshot(t, p); got != original {
				t.Fatalf("after release the policy is not as written:\nwritten %s\nnow     %s", original, got)
			}
			if wrote, err := w.Release(ctx, p, owner); err != nil || wrote {
				t.Fatalf("a second release wrote %v, %v", wrote, err)
			}
		})
	}
}

// served reports whether the API server serves kind at
// admissionregistration.k8s.io/v1, and checks that it does exactly from the
// release floor.ServedFrom names.
func served(t *testing.T, env *testenv.Env, kind v1alpha1.FallbackPolicyKind) bool {
	t.Helper()
	_, mapErr := env.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: string(kind)}, "v1")
	if mapErr != nil && !meta.IsNoMatchError(mapErr) {
		t.Fatalf("discover %s: %v", kind, mapErr)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	minor, _ := strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	from, _ := strconv.Atoi(strings.TrimPrefix(floor.ServedFrom(kind), "1."))
	if got, want := mapErr == nil, minor >= from; got != want {
		t.Fatalf("%s served by %s: %v; floor.ServedFrom says from %s", kind, v.GitVersion, got, floor.ServedFrom(kind))
	}
	return minor >= from
}

// TestFloorAdoptsAPolicyWrittenInert: a policy the operator wrote with
// tripswitch's condition already on it (so it never enforces before
// tripswitch adopts it) is adopted with a record alone, and a release
// leaves it inert.
func TestFloorAdoptsAPolicyWrittenInert(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	w := floor.Writer{Client: env.Client}
	ctx := t.Context()
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "written-inert"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: rules,
			MatchConditions:  []admissionregistrationv1.MatchCondition{{Name: floor.MatchConditionName, Expression: "false"}},
			Validations:      []admissionregistrationv1.Validation{{Expression: "false"}},
		},
	}
	if err := env.Client.Create(ctx, vap); err != nil {
		t.Fatal(err)
	}
	p := read(t, w, v1alpha1.ValidatingAdmissionPolicy, vap.Name)
	if wrote, err := w.Disarm(ctx, p, owner, metav1.Now()); err != nil || !wrote {
		t.Fatalf("adopt: %v %v", wrote, err)
	}
	if s := floor.Inspect(p); !s.Record.ConditionPreexisted || len(p.MatchConditions) != 1 {
		t.Fatalf("adopted: %+v %v", s.Record, p.MatchConditions)
	}
	if _, err := w.Arm(ctx, p, owner, metav1.Now()); err != nil {
		t.Fatal(err)
	}
	if p.MatchConditions != nil {
		t.Fatalf("armed, the policy keeps conditions %v", p.MatchConditions)
	}
	// Someone else puts the condition back while armed: tripswitch does not
	// fight it, but drops its record and adopts the policy anew.
	o := p.Object.(*admissionregistrationv1.ValidatingAdmissionPolicy).DeepCopy()
	o.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: floor.MatchConditionName, Expression: "false"}}
	if err := env.Client.Update(ctx, o); err != nil {
		t.Fatal(err)
	}
	p = read(t, w, v1alpha1.ValidatingAdmissionPolicy, vap.Name)
	if _, err := w.Arm(ctx, p, owner, metav1.Now()); !errors.Is(err, floor.ErrExternalChange) {
		t.Fatalf("arm over an external change: %v", err)
	}
	if wrote, err := w.Drop(ctx, p, owner); err != nil || !wrote || floor.Inspect(p).Record != nil || !floor.Inspect(p).Inert() {
		t.Fatalf("drop: %v %v %+v", wrote, err, floor.Inspect(p))
	}
	if _, err := w.Arm(ctx, p, owner, metav1.Now()); err != nil || !floor.Inspect(p).Record.ConditionPreexisted {
		t.Fatalf("re-adopted and armed: %v %+v", err, floor.Inspect(p).Record)
	}
	// Released while armed (say the breaker was deleted mid-outage, after
	// its webhook was restored): back to inert, as written.
	if _, err := w.Release(ctx, p, owner); err != nil {
		t.Fatal(err)
	}
	if s := floor.Inspect(p); !s.Inert() || s.Record != nil || len(p.Object.GetAnnotations()) != 0 {
		t.Fatalf("released: %+v annotations %v", s, p.Object.GetAnnotations())
	}
}

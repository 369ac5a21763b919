package floor

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

var (
	me  = Owner{Breaker: "b", UID: "uid-1"}
	now = metav1.NewTime(time.Unix(1700000000, 0).UTC())
)

func cond(name, expr string) admissionregistrationv1.MatchCondition {
	return admissionregistrationv1.MatchCondition{Name: name, Expression: expr}
}

func policy(annotations map[string]string, conds ...admissionregistrationv1.MatchCondition) *Policy {
	o := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "42", Annotations: annotations},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicySpec{MatchConditions: conds},
	}
	p, _ := View(o)
	return p
}

// apply applies data as the API server's patcher would and views the result.
func apply(t *testing.T, p *Policy, data []byte) *Policy {
	t.Helper()
	doc, err := json.Marshal(p.Object)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(data)
	if err != nil {
		t.Fatalf("malformed patch: %v\n%s", err, data)
	}
	out, err := patch.Apply(doc)
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, data)
	}
	var o admissionregistrationv1.ValidatingAdmissionPolicy
	if err := json.Unmarshal(out, &o); err != nil {
		t.Fatal(err)
	}
	v, _ := View(&o)
	return v
}

func names(p *Policy) string {
	var n []string
	for _, c := range p.MatchConditions {
		n = append(n, c.Name)
	}
	return strings.Join(n, ",")
}

// Every patch begins with the resourceVersion precondition, and a removal
// tests the name and expression of what it removes.
func TestPatchesArePreconditioned(t *testing.T) {
	p := policy(map[string]string{}, cond("a", "true"), cond(MatchConditionName, "false"), cond("c", "true"))
	data, err := ArmPatch(p, me, now)
	if err != nil {
		t.Fatal(err)
	}
	var ops []map[string]any
	if err := json.Unmarshal(data, &ops); err != nil {
		t.Fatal(err)
	}
	if ops[0]["op"] != "replace" || ops[0]["path"] != "/metadata/resourceVersion" || ops[0]["value"] != "42" {
		t.Fatalf("first op %v", ops[0])
	}
	want := `{"op":"test","path":"/spec/matchConditions/1/name","value":"tripswitch.dev/circuit-open"}`
	if !strings.Contains(string(data), want) || !strings.Contains(string(data), `"path":"/spec/matchConditions/1/expression","value":"false"`) {
		t.Fatalf("no tests of the removed condition: %s", data)
	}
}

// A cycle of adopt, arm and disarm puts the condition back in its place and
// the record back as adopted, from each starting shape.
func TestCycleRestoresPlaceAndRecord(t *testing.T) {
	for name, start := range map[string]*Policy{
		"no conditions, no annotations": policy(nil),
		"operator conditions":           policy(map[string]string{"k": "v"}, cond("a", "true"), cond("b", "true")),
		"written inert, in the middle":  policy(nil, cond("a", "true"), cond(MatchConditionName, "false"), cond("c", "true")),
		"written inert, alone":          policy(nil, cond(MatchConditionName, "false")),
	} {
		t.Run(name, func(t *testing.T) {
			data, err := DisarmPatch(start, me, now)
			if err != nil {
				t.Fatal(err)
			}
			adopted := apply(t, start, data)
			s := Inspect(adopted)
			if !s.Inert() || s.Record == nil || s.Record.Armed || s.Record.BreakerUID != me.UID {
				t.Fatalf("adopted: %+v", s)
			}
			if again, err := DisarmPatch(adopted, me, now); again != nil || err != nil {
				t.Fatalf("disarm of a disarmed floor: %s %v", again, err)
			}
			data, err = ArmPatch(adopted, me, metav1.NewTime(now.Add(time.Hour)))
			if err != nil {
				t.Fatal(err)
			}
			armed := apply(t, adopted, data)
			if s := Inspect(armed); !s.Armed() || !s.Record.Armed || s.Drifted() {
				t.Fatalf("armed: %+v %v", s, names(armed))
			}
			if armed.MatchConditions != nil && strings.Contains(names(armed), MatchConditionName) {
				t.Fatalf("armed keeps the condition: %v", names(armed))
			}
			if again, err := ArmPatch(armed, me, now); again != nil || err != nil {
				t.Fatalf("arm of an armed floor: %s %v", again, err)
			}
			data, err = DisarmPatch(armed, me, metav1.NewTime(now.Add(2*time.Hour)))
			if err != nil {
				t.Fatal(err)
			}
			back := apply(t, armed, data)
			a, _ := json.Marshal(adopted.Object)
			b, _ := json.Marshal(back.Object)
			if string(a) != string(b) {
				t.Fatalf("a cycle changed the policy:\n%s\n%s", a, b)
			}
			// Release gives back exactly what was found.
			data, err = ReleasePatch(back, me)
			if err != nil {
				t.Fatal(err)
			}
			released := apply(t, back, data)
			if names(released) != names(start) || Inspect(released).Record != nil {
				t.Fatalf("released: %q, want %q", names(released), names(start))
			}
		})
	}
}

// What the floor must never write over is refused with the reason.
func TestRefusals(t *testing.T) {
	other := `{"policy":"ValidatingAdmissionPolicy/p","breaker":"x","breakerUID":"uid-2","adoptedAt":"2023-11-14T22:13:20Z"}`
	full := make([]admissionregistrationv1.MatchCondition, maxMatchConditions)
	for i := range full {
		full[i] = cond("c"+strings.Repeat("x", i), "true")
	}
	for name, tc := range map[string]struct {
		p    *Policy
		who  Owner
		want error
	}{
		"another breaker's record": {policy(map[string]string{AnnotationKey: other}), me, ErrOwnedByOther},
		"corrupt record":           {policy(map[string]string{AnnotationKey: "{"}), me, ErrCorruptRecord},
		"record without uid":       {policy(map[string]string{AnnotationKey: `{"policy":"x"}`}), me, ErrCorruptRecord},
		"foreign condition":        {policy(nil, cond(MatchConditionName, "true")), me, ErrForeignCondition},
		"no room":                  {policy(nil, full...), me, ErrTooManyConditions},
		"no owner uid":             {policy(nil), Owner{Breaker: "b"}, nil},
	} {
		_, err := DisarmPatch(tc.p, tc.who, now)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: disarm %v, want %v", name, err, tc.want)
		}
		if name == "no room" {
			continue // arming removes, so needs no room
		}
		if _, err := ArmPatch(tc.p, tc.who, now); err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: arm %v, want %v", name, err, tc.want)
		}
	}
}

// A record that disagrees with the policy (someone re-added or removed the
// condition) shows as drift: Arm, Disarm and Release refuse it, and Drop
// removes the record alone, after which the policy is adopted anew.
func TestDrift(t *testing.T) {
	for name, tc := range map[string]struct {
		armed bool
		conds []admissionregistrationv1.MatchCondition
	}{
		"re-added while armed":   {true, []admissionregistrationv1.MatchCondition{cond(MatchConditionName, "false")}},
		"removed while disarmed": {false, nil},
		"removed, others remain": {false, []admissionregistrationv1.MatchCondition{cond("a", "true")}},
	} {
		rec := v1alpha1.FloorRecord{Policy: "ValidatingAdmissionPolicy/p", Breaker: "b", BreakerUID: me.UID, Armed: tc.armed}
		data, _ := json.Marshal(rec)
		p := policy(map[string]string{AnnotationKey: string(data), "k": "v"}, tc.conds...)
		if s := Inspect(p); !s.Drifted() {
			t.Fatalf("%s: not drifted: %+v", name, s)
		}
		for op, f := range map[string]func() ([]byte, error){
			"arm":     func() ([]byte, error) { return ArmPatch(p, me, now) },
			"disarm":  func() ([]byte, error) { return DisarmPatch(p, me, now) },
			"release": func() ([]byte, error) { return ReleasePatch(p, me) },
		} {
			if _, err := f(); !errors.Is(err, ErrExternalChange) {
				t.Errorf("%s: %s: %v, want ErrExternalChange", name, op, err)
			}
		}
		if _, err := DropPatch(p, Owner{Breaker: "x", UID: "uid-2"}); !errors.Is(err, ErrOwnedByOther) {
			t.Errorf("%s: another breaker dropped the record: %v", name, err)
		}
		patch, err := DropPatch(p, me)
		if err != nil {
			t.Fatal(err)
		}
		dropped := apply(t, p, patch)
		if s := Inspect(dropped); s.Record != nil || names(dropped) != names(p) || dropped.Object.GetAnnotations()["k"] != "v" {
			t.Fatalf("%s: dropped %+v %q", name, s, names(dropped))
		}
		if patch, err := DisarmPatch(dropped, me, now); err != nil || patch == nil {
			t.Fatalf("%s: adoption after the drop: %s %v", name, patch, err)
		}
	}
}

func TestViewAndNewObject(t *testing.T) {
	for _, k := range []v1alpha1.FallbackPolicyKind{v1alpha1.ValidatingAdmissionPolicy, v1alpha1.MutatingAdmissionPolicy} {
		obj, err := NewObject(k)
		if err != nil {
			t.Fatal(err)
		}
		if p, err := View(obj); err != nil || p.Kind != k {
			t.Fatalf("%s: %v %v", k, p, err)
		}
	}
	if _, err := NewObject("Deployment"); err == nil || !strings.Contains(err.Error(), "whileOpen.fallbackPolicy.kind") {
		t.Fatalf("bad kind: %v", err)
	}
	if _, err := View(&admissionregistrationv1.ValidatingWebhookConfiguration{}); err == nil {
		t.Fatal("viewed a webhook configuration as a policy")
	}
}

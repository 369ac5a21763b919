package circuit

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

const target = "slow.tripswitch.test"

func testConfig(annotations map[string]string, mutate func(*admissionregistrationv1.MutatingWebhook)) *admissionregistrationv1.MutatingWebhookConfiguration {
	hook := func(name string, ca string) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:          name,
			ClientConfig:  admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:8443/mutate"), CABundle: []byte(ca)},
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
		}
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "cfg", ResourceVersion: "42", Annotations: annotations},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{hook("first.tripswitch.test", "ca-1"), hook(target, "ca-2"), hook("third.tripswitch.test", "ca-3")},
	}
	if mutate != nil {
		mutate(&cfg.Webhooks[1])
	}
	return cfg
}

func openRecord(action v1alpha1.OpenAction) v1alpha1.CircuitRecord {
	return v1alpha1.CircuitRecord{Breaker: "b", BreakerUID: "uid-1", Action: action, OpenedAt: metav1.NewTime(time.Unix(1700000000, 0).UTC()), Reason: "3 failed probes"}
}

// applyPatch applies a JSON Patch to obj the way the API server's patcher does
// and returns the result; resourceVersion is dropped as the server would
// replace it.
func applyPatch(t *testing.T, obj *admissionregistrationv1.MutatingWebhookConfiguration, data []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	doc, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(data)
	if err != nil {
		t.Fatalf("patch is malformed: %v\n%s", err, data)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("apply patch: %v\n%s", err, data)
	}
	var got admissionregistrationv1.MutatingWebhookConfiguration
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

func mustView(t *testing.T, obj *admissionregistrationv1.MutatingWebhookConfiguration) *Configuration {
	t.Helper()
	cfg, err := View(obj)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestOpenThenCloseRestoresTheExactObject(t *testing.T) {
	cases := []struct {
		name        string
		action      v1alpha1.OpenAction
		annotations map[string]string
		mutate      func(*admissionregistrationv1.MutatingWebhook)
		wantOpen    func(*testing.T, admissionregistrationv1.MutatingWebhook)
	}{
		{
			name: "ignore on a webhook with no annotations", action: v1alpha1.OpenActionIgnore,
			wantOpen: wantPolicy(admissionregistrationv1.Ignore),
		},
		{
			name: "ignore keeps other annotations", action: v1alpha1.OpenActionIgnore,
			annotations: map[string]string{"team": "platform", "a/b~c": "x"},
			wantOpen:    wantPolicy(admissionregistrationv1.Ignore),
		},
		{
			name: "ignore on a webhook whose failurePolicy is unset", action: v1alpha1.OpenActionIgnore,
			mutate:   func(w *admissionregistrationv1.MutatingWebhook) { w.FailurePolicy = nil },
			wantOpen: wantPolicy(admissionregistrationv1.Ignore),
		},
		{
			name: "bypass on a webhook without matchConditions", action: v1alpha1.OpenActionBypass,
			wantOpen: wantConditions(MatchConditionName),
		},
		{
			name: "bypass appends after existing matchConditions", action: v1alpha1.OpenActionBypass,
			mutate: func(w *admissionregistrationv1.MutatingWebhook) {
				w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "only-prod", Expression: "true"}}
			},
			wantOpen: wantConditions("only-prod", MatchConditionName),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			orig := testConfig(tc.annotations, tc.mutate)
			data, rec, err := OpenPatch(mustView(t, orig), target, openRecord(tc.action))
			if err != nil {
				t.Fatal(err)
			}
			opened := applyPatch(t, orig, data)
			tc.wantOpen(t, opened.Webhooks[1])
			for _, i := range []int{0, 2} {
				if !reflect.DeepEqual(opened.Webhooks[i], orig.Webhooks[i]) {
					t.Errorf("open changed webhook %d: %+v", i, opened.Webhooks[i])
				}
			}
			st := Inspect(mustView(t, opened), target)
			if st.RecordErr != nil || st.Record == nil || !equality.Semantic.DeepEqual(*st.Record, rec) {
				t.Fatalf("record read back = %+v, %v; want %+v", st.Record, st.RecordErr, rec)
			}
			if !st.Intact() {
				t.Fatal("freshly opened circuit is not intact")
			}
			data, err = ClosePatch(mustView(t, opened), target, st.Record)
			if err != nil {
				t.Fatal(err)
			}
			closed := applyPatch(t, opened, data)
			if !equality.Semantic.DeepEqual(closed, orig) {
				t.Errorf("close did not restore the original:\n got %+v\nwant %+v", closed, orig)
			}
		})
	}
}

func wantPolicy(p admissionregistrationv1.FailurePolicyType) func(*testing.T, admissionregistrationv1.MutatingWebhook) {
	return func(t *testing.T, w admissionregistrationv1.MutatingWebhook) {
		t.Helper()
		if w.FailurePolicy == nil || *w.FailurePolicy != p {
			t.Errorf("failurePolicy = %v, want %s", w.FailurePolicy, p)
		}
		if len(w.MatchConditions) != 0 {
			t.Errorf("Ignore added matchConditions %+v", w.MatchConditions)
		}
	}
}

func wantConditions(names ...string) func(*testing.T, admissionregistrationv1.MutatingWebhook) {
	return func(t *testing.T, w admissionregistrationv1.MutatingWebhook) {
		t.Helper()
		var got []string
		for _, c := range w.MatchConditions {
			got = append(got, c.Name)
		}
		if !reflect.DeepEqual(got, names) {
			t.Errorf("matchConditions = %v, want %v", got, names)
		}
		if last := w.MatchConditions[len(w.MatchConditions)-1]; last.Expression != "false" {
			t.Errorf("bypass condition expression = %q, want false", last.Expression)
		}
		if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("Bypass changed failurePolicy to %v", w.FailurePolicy)
		}
	}
}

func TestPatchesCarryPreconditions(t *testing.T) {
	orig := testConfig(nil, nil)
	data, _, err := OpenPatch(mustView(t, orig), target, openRecord(v1alpha1.OpenActionIgnore))
	if err != nil {
		t.Fatal(err)
	}
	var ops []map[string]any
	if err := json.Unmarshal(data, &ops); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"op": "replace", "path": "/metadata/resourceVersion", "value": "42"},
		{"op": "test", "path": "/webhooks/1/name", "value": target},
	}
	if !reflect.DeepEqual(ops[:2], want) {
		t.Errorf("first operations = %v, want %v", ops[:2], want)
	}

	// The same patch applied to a list where another webhook moved into index 1 fails.
	moved := testConfig(nil, nil)
	moved.Webhooks[0], moved.Webhooks[1] = moved.Webhooks[1], moved.Webhooks[0]
	doc, _ := json.Marshal(moved)
	p, _ := jsonpatch.DecodePatch(data)
	if _, err := p.Apply(doc); err == nil {
		t.Error("open patch applied to a reordered webhook list")
	}
}

func TestCloseRefusesAChangedValue(t *testing.T) {
	orig := testConfig(nil, nil)
	data, _, err := OpenPatch(mustView(t, orig), target, openRecord(v1alpha1.OpenActionIgnore))
	if err != nil {
		t.Fatal(err)
	}
	opened := applyPatch(t, orig, data)
	opened.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Fail) // an administrator's edit
	st := Inspect(mustView(t, opened), target)
	if st.Intact() {
		t.Fatal("record reported intact after an administrator changed the policy")
	}
	if _, err := ClosePatch(mustView(t, opened), target, st.Record); err == nil {
		t.Fatal("ClosePatch restored over an administrator's change")
	}
	data, err = DropPatch(mustView(t, opened), target)
	if err != nil {
		t.Fatal(err)
	}
	dropped := applyPatch(t, opened, data)
	if _, ok := dropped.Annotations[AnnotationKey(target)]; ok {
		t.Error("drop left the record")
	}
	if *dropped.Webhooks[1].FailurePolicy != admissionregistrationv1.Fail {
		t.Error("drop changed the administrator's policy")
	}
}

func TestBypassRefusesWhenItCannotAddItsCondition(t *testing.T) {
	foreign := testConfig(nil, func(w *admissionregistrationv1.MutatingWebhook) {
		w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: MatchConditionName, Expression: "false"}}
	})
	if _, _, err := OpenPatch(mustView(t, foreign), target, openRecord(v1alpha1.OpenActionBypass)); !errors.Is(err, ErrCannotBypass) {
		t.Errorf("open over an unrecorded bypass condition: err = %v, want ErrCannotBypass", err)
	}
	full := testConfig(nil, func(w *admissionregistrationv1.MutatingWebhook) {
		for i := range maxMatchConditions {
			w.MatchConditions = append(w.MatchConditions, admissionregistrationv1.MatchCondition{Name: "c" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), Expression: "true"})
		}
	})
	if _, _, err := OpenPatch(mustView(t, full), target, openRecord(v1alpha1.OpenActionBypass)); !errors.Is(err, ErrCannotBypass) {
		t.Errorf("open with %d matchConditions: err = %v, want ErrCannotBypass", maxMatchConditions, err)
	}
	if _, _, err := OpenPatch(mustView(t, testConfig(nil, nil)), "missing.tripswitch.test", openRecord(v1alpha1.OpenActionIgnore)); !errors.Is(err, ErrWebhookNotFound) {
		t.Errorf("open of a missing webhook: err = %v, want ErrWebhookNotFound", err)
	}
}

func TestFailsOpenWithoutRecord(t *testing.T) {
	adminIgnore := Inspect(mustView(t, testConfig(nil, func(w *admissionregistrationv1.MutatingWebhook) {
		w.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	})), target)
	if !adminIgnore.FailsOpenWithoutRecord(v1alpha1.OpenActionIgnore) {
		t.Error("an administrator's Ignore is not recognised as already failing open")
	}
	if adminIgnore.FailsOpenWithoutRecord(v1alpha1.OpenActionBypass) {
		t.Error("Ignore counted as an existing bypass")
	}
	if Inspect(mustView(t, testConfig(nil, nil)), target).FailsOpenWithoutRecord(v1alpha1.OpenActionIgnore) {
		t.Error("a Fail webhook counted as failing open")
	}
}

func TestAnnotationKeyIsAlwaysValid(t *testing.T) {
	long := strings.Repeat("segment.", 30) + "tripswitch.test"
	for _, name := range []string{target, "a.b.c", long, long + "x"} {
		key := AnnotationKey(name)
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			t.Errorf("AnnotationKey(%q) = %q is invalid: %v", name, key, errs)
		}
	}
	if AnnotationKey(long) == AnnotationKey(long+"x") {
		t.Error("two long webhook names share one annotation key")
	}
	if got, want := AnnotationKey(target), "tripswitch.dev/circuit."+target; got != want {
		t.Errorf("AnnotationKey(%q) = %q, want %q", target, got, want)
	}
}

func TestReadRecordRejectsGarbage(t *testing.T) {
	valid := `{"webhook":"` + target + `","breaker":"b","breakerUID":"u","action":"Ignore","setFailurePolicy":"Ignore","openedAt":"2026-01-01T00:00:00Z"}`
	cases := map[string]string{
		"not JSON":                       "{",
		"another webhook's record":       strings.Replace(valid, target, "other.tripswitch.test", 1),
		"no breaker UID":                 strings.Replace(valid, `"u"`, `""`, 1),
		"unknown action":                 strings.Replace(valid, `"action":"Ignore"`, `"action":"Explode"`, 1),
		"Ignore without what it set":     strings.Replace(valid, `"setFailurePolicy":"Ignore",`, "", 1),
		"Bypass without its condition":   strings.Replace(valid, `"action":"Ignore"`, `"action":"Bypass"`, 1),
		"original policy is not a value": strings.Replace(valid, `"action"`, `"originalFailurePolicy":"Sometimes","action"`, 1),
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			rec, err := ReadRecord(map[string]string{AnnotationKey(target): raw}, target)
			if !errors.Is(err, ErrCorruptRecord) || rec != nil {
				t.Errorf("ReadRecord = %+v, %v; want ErrCorruptRecord", rec, err)
			}
		})
	}
	rec, err := ReadRecord(map[string]string{AnnotationKey(target): valid}, target)
	if err != nil || rec == nil || rec.BreakerUID != "u" {
		t.Errorf("valid record: %+v, %v", rec, err)
	}
	if rec, err := ReadRecord(nil, target); rec != nil || err != nil {
		t.Errorf("no annotations: %+v, %v", rec, err)
	}
}

func FuzzReadRecord(f *testing.F) {
	f.Add(`{"webhook":"` + target + `","breakerUID":"u","action":"Bypass","matchCondition":"x"}`)
	f.Add(`null`)
	f.Add(`{"action":"Ignore","originalFailurePolicy":null}`)
	f.Fuzz(func(t *testing.T, raw string) {
		rec, err := ReadRecord(map[string]string{AnnotationKey(target): raw}, target)
		if err != nil && !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("error does not wrap ErrCorruptRecord: %v", err)
		}
		if err == nil && (rec == nil || rec.Webhook != target || rec.BreakerUID == "") {
			t.Fatalf("accepted an inconsistent record %+v from %q", rec, raw)
		}
	})
}

// One patch opening two webhooks leaves the configuration as opening them
// one after the other would, with or without annotations before; each
// circuit then closes on its own, back to the exact original.
func TestOpenAllIsOpeningEachInTurn(t *testing.T) {
	for _, annotations := range []map[string]string{nil, {"team": "platform"}} {
		orig := testConfig(annotations, nil)
		first, third := openRecord(v1alpha1.OpenActionIgnore), openRecord(v1alpha1.OpenActionBypass)
		first.Webhook, first.Breaker, first.BreakerUID = "first.tripswitch.test", "b1", "uid-1"
		third.Webhook, third.Breaker, third.BreakerUID = "third.tripswitch.test", "b3", "uid-3"
		data, recs, err := OpenAllPatch(mustView(t, orig), []v1alpha1.CircuitRecord{first, third})
		if err != nil {
			t.Fatal(err)
		}
		together := applyPatch(t, orig, data)

		one, _, err := OpenPatch(mustView(t, orig), first.Webhook, first)
		if err != nil {
			t.Fatal(err)
		}
		step := applyPatch(t, orig, one)
		step.ResourceVersion = orig.ResourceVersion // the server would bump it between the two
		two, _, err := OpenPatch(mustView(t, step), third.Webhook, third)
		if err != nil {
			t.Fatal(err)
		}
		inTurn := applyPatch(t, step, two)
		if !equality.Semantic.DeepEqual(together, inTurn) {
			t.Fatalf("annotations %v: one patch gave\n%+v\nopening in turn\n%+v", annotations, together, inTurn)
		}
		closed := together
		for i, rec := range recs {
			st := Inspect(mustView(t, closed), rec.Webhook)
			if st.Record == nil || st.Record.BreakerUID != rec.BreakerUID || !st.Intact() {
				t.Fatalf("record %d read back: %+v, intact %v", i, st.Record, st.Intact())
			}
			data, err := ClosePatch(mustView(t, closed), rec.Webhook, st.Record)
			if err != nil {
				t.Fatal(err)
			}
			closed = applyPatch(t, closed, data)
		}
		if len(annotations) == 0 {
			closed.Annotations = nil // the emptied map: the API server drops it too
		}
		if !equality.Semantic.DeepEqual(closed, orig) {
			t.Errorf("closing each did not restore the original:\n got %+v\nwant %+v", closed, orig)
		}
	}
	cfg := mustView(t, testConfig(nil, nil))
	rec := openRecord(v1alpha1.OpenActionIgnore)
	rec.Webhook = target
	if _, _, err := OpenAllPatch(cfg, []v1alpha1.CircuitRecord{rec, rec}); err == nil {
		t.Error("a webhook named twice was opened")
	}
	if _, _, err := OpenAllPatch(cfg, nil); err == nil {
		t.Error("an empty open was built")
	}
}

// One patch closing two circuits restores both, as closing each in turn
// does; a record whose change is no longer intact refuses the whole patch.
func TestCloseAllIsClosingEachInTurn(t *testing.T) {
	orig := testConfig(nil, func(w *admissionregistrationv1.MutatingWebhook) {
		w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "only-prod", Expression: "true"}}
	})
	first, second := openRecord(v1alpha1.OpenActionIgnore), openRecord(v1alpha1.OpenActionBypass)
	first.Webhook, first.BreakerUID = "first.tripswitch.test", "uid-1"
	second.Webhook, second.BreakerUID = target, "uid-2"
	data, recs, err := OpenAllPatch(mustView(t, orig), []v1alpha1.CircuitRecord{first, second})
	if err != nil {
		t.Fatal(err)
	}
	opened := applyPatch(t, orig, data)
	data, err = CloseAllPatch(mustView(t, opened), recs)
	if err != nil {
		t.Fatal(err)
	}
	closed := applyPatch(t, opened, data)
	closed.Annotations = nil // the emptied map
	if !equality.Semantic.DeepEqual(closed, orig) {
		t.Fatalf("one close patch did not restore the original:\n got %+v\nwant %+v", closed, orig)
	}
	altered := opened.DeepCopy()
	altered.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Fail) // an administrator's edit
	if _, err := CloseAllPatch(mustView(t, altered), recs); err == nil {
		t.Fatal("closed over an administrator's edit")
	}
}

package remediate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	jsonpatchv4 "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func configMap(annotations map[string]any) *unstructured.Unstructured {
	md := map[string]any{"name": "cm", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"}
	if annotations != nil {
		md["annotations"] = annotations
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md}}
}

// TestRepairOpRecordsTheRepairAfterTheReview: whatever the review's
// operations do to metadata.annotations, the object they leave carries the
// repair, and another webhook's repair is kept.
func TestRepairOpRecordsTheRepairAfterTheReview(t *testing.T) {
	window := time.Date(2026, 12, 2, 0, 42, 20, 0, time.UTC)
	rep := Repair{Window: window, UID: "u-1", From: "7", At: window.Add(time.Hour)}
	other := `{"other/hook.example.com":{"window":"2026-11-01T00:00:00Z","uid":"u-1","from":"3","at":"2026-11-01T01:00:00Z"}}`
	for _, tc := range []struct {
		name        string
		annotations map[string]any
		review      string
		wantOthers  map[string]string // annotations besides RepairedKey
		wantHooks   []string
	}{
		{name: "no annotations, and the review adds none", review: `[{"op":"add","path":"/data","value":{"a":"b"}}]`,
			wantHooks: []string{"cfg/hook.example.com"}},
		{name: "no annotations, and the review adds the map", review: `[{"op":"add","path":"/metadata/annotations","value":{"x":"1"}}]`,
			wantOthers: map[string]string{"x": "1"}, wantHooks: []string{"cfg/hook.example.com"}},
		{name: "annotations the review replaces as a whole", annotations: map[string]any{"old": "1"},
			review: `[{"op":"replace","path":"/metadata/annotations","value":{"new":"2"}}]`, wantOthers: map[string]string{"new": "2"}, wantHooks: []string{"cfg/hook.example.com"}},
		{name: "annotations the review removes", annotations: map[string]any{"old": "1"},
			review: `[{"op":"remove","path":"/metadata/annotations"}]`, wantHooks: []string{"cfg/hook.example.com"}},
		{name: "another webhook's repair is kept", annotations: map[string]any{RepairedKey: other},
			review: `[{"op":"add","path":"/data","value":{"a":"b"}}]`, wantHooks: []string{"cfg/hook.example.com", "other/hook.example.com"}},
		{name: "an unreadable record is replaced", annotations: map[string]any{RepairedKey: "{not json"},
			review: `[{"op":"add","path":"/data","value":{"a":"b"}}]`, wantHooks: []string{"cfg/hook.example.com"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := configMap(tc.annotations)
			op, err := repairOp(obj, tc.review, "cfg/hook.example.com", rep)
			if err != nil {
				t.Fatal(err)
			}
			var ops []json.RawMessage
			if err := json.Unmarshal([]byte(tc.review), &ops); err != nil {
				t.Fatal(err)
			}
			all, _ := json.Marshal(append(ops, json.RawMessage(mustJSON(t, op))))
			p, err := jsonpatchv4.DecodePatch(all)
			if err != nil {
				t.Fatalf("%s: %v", all, err)
			}
			raw, _ := obj.MarshalJSON()
			out, err := p.Apply(raw)
			if err != nil {
				t.Fatalf("the review's operations and then %s do not apply: %v", mustJSON(t, op), err)
			}
			after := &unstructured.Unstructured{}
			if err := after.UnmarshalJSON(out); err != nil {
				t.Fatal(err)
			}
			got := repairs(after)
			if r, ok := got["cfg/hook.example.com"]; !ok || !r.Window.Equal(window) || r.UID != "u-1" || r.From != "7" {
				t.Fatalf("the repair recorded: %+v", got)
			}
			var hooks []string
			for h := range got {
				hooks = append(hooks, h)
			}
			slices.Sort(hooks)
			if fmt.Sprint(hooks) != fmt.Sprint(tc.wantHooks) {
				t.Errorf("webhooks recorded %v, want %v", hooks, tc.wantHooks)
			}
			others := after.GetAnnotations()
			delete(others, RepairedKey)
			if fmt.Sprint(others) != fmt.Sprint(tc.wantOthers) && !(len(others) == 0 && len(tc.wantOthers) == 0) {
				t.Errorf("other annotations %v, want %v", others, tc.wantOthers)
			}
		})
	}
	if _, err := repairOp(configMap(nil), `[{"op":"replace","path":"/data/missing","value":"x"}]`, "cfg/h", rep); err == nil || !strings.Contains(err.Error(), "does not apply") {
		t.Errorf("a review patch that does not apply: %v", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRepairedFor: a repair covers its own window and earlier ones, on the
// object it was written to.
func TestRepairedFor(t *testing.T) {
	window := time.Date(2026, 12, 2, 0, 42, 20, 0, time.UTC)
	record := func(uid string, w time.Time) *unstructured.Unstructured {
		v, _ := json.Marshal(map[string]Repair{"cfg/h": {Window: w, UID: types.UID("u-" + uid), From: "7", At: w.Add(time.Hour)}})
		return configMap(map[string]any{RepairedKey: string(v)})
	}
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		from time.Time
		want bool
	}{
		{"repaired for this window", record("1", window), window, true},
		{"this window, its opening time with sub-second precision", record("1", window), window.Add(300 * time.Millisecond), true},
		{"repaired for a later window, which reviewed it after this one", record("1", window.Add(time.Hour)), window, true},
		{"repaired for an earlier window: this one is not repaired", record("1", window), window.Add(time.Hour), false},
		{"the record copied onto another object", record("2", window), window, false},
		{"no record", configMap(nil), window, false},
	} {
		if _, got := repairedFor(tc.obj, "cfg/h", tc.from); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, ok := repairedFor(record("1", window), "other/h", window); ok {
		t.Error("another webhook's repair counted")
	}
}

// TestChanges: what every write changes, and the repair's own record, are
// no change.
func TestChanges(t *testing.T) {
	before := configMap(map[string]any{"keep": "1"})
	same := before.DeepCopy()
	same.SetResourceVersion("8")
	same.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "tripswitch-remediate"}})
	a := same.GetAnnotations()
	a[RepairedKey] = "{}"
	same.SetAnnotations(a)
	if changes(before, same) {
		t.Error("a new resourceVersion, managedFields and the repair record are a change")
	}
	bare, recorded := configMap(nil), configMap(map[string]any{RepairedKey: "{}"})
	if changes(bare, recorded) {
		t.Error("the repair record alone, as the only annotation, is a change")
	}
	data := same.DeepCopy()
	data.Object["data"] = map[string]any{"mutation-stage-2": "yes"}
	if !changes(before, data) {
		t.Error("new data is no change")
	}
}

// TestDeniedBy: only the API server's answer that this webhook denied the
// request, not its failure, nor another webhook's or a policy's denial.
func TestDeniedBy(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	status := func(code int32, msg string) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code, Message: msg}}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the webhook's denial, with its message", status(http.StatusForbidden, `admission webhook "policy.example.com" denied the request: policy=forbidden is not allowed here`), true},
		{"the webhook's denial, with its reason only and no code", status(http.StatusBadRequest, `admission webhook "policy.example.com" denied the request: the configmap contains unwanted key and value`), true},
		{"the webhook's denial without explanation", status(http.StatusBadRequest, `admission webhook "policy.example.com" denied the request without explanation`), true},
		{"wrapped", fmt.Errorf("patch: %w", status(http.StatusForbidden, `admission webhook "policy.example.com" denied the request: no`)), true},
		{"another webhook's denial", status(http.StatusForbidden, `admission webhook "other.example.com" denied the request: no`), false},
		{"a webhook whose name this one's begins", status(http.StatusForbidden, `admission webhook "policy.example.com.evil" denied the request: no`), false},
		{"the webhook failed", status(http.StatusInternalServerError, `Internal error occurred: failed calling webhook "policy.example.com": failed to call webhook: Post "https://127.0.0.1:1/validate": dial tcp: connection refused`), false},
		{"a ValidatingAdmissionPolicy's denial", status(http.StatusUnprocessableEntity, `configmaps "a" is invalid: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no`), false},
		{"RBAC", apierrors.NewForbidden(cm, "a", errors.New(`User "u" cannot patch resource "configmaps"`)), false},
		{"a conflict", apierrors.NewConflict(cm, "a", errors.New("the object has been modified")), false},
		{"not the API server's answer", errors.New(`admission webhook "policy.example.com" denied the request: no`), false},
	} {
		if got := deniedBy(tc.err, "policy.example.com"); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

package remediate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestReapplyPatch(t *testing.T) {
	for _, tc := range []struct {
		name, patch, rv string
		want, wantErr   string
	}{
		{name: "the review's operations follow the resourceVersion precondition, unchanged",
			patch: `[{"op":"add","path":"/metadata/labels/injected","value":"true"},{"op":"add","path":"/data/mode","value":"default"}]`, rv: "42",
			want: `[{"op":"replace","path":"/metadata/resourceVersion","value":"42"},{"op":"add","path":"/metadata/labels/injected","value":"true"},{"op":"add","path":"/data/mode","value":"default"}]`},
		{name: "no resourceVersion: no unconditional patch", patch: `[{"op":"add","path":"/a","value":1}]`, wantErr: "no resourceVersion"},
		{name: "a patch that is not a JSON patch is refused", patch: `{"metadata":{}}`, rv: "1", wantErr: "not a JSON patch"},
		{name: "an empty patch is refused", patch: `[]`, rv: "1", wantErr: "empty"},
		{name: "an operation on the whole object is refused", patch: `[{"op":"replace","path":"","value":{}}]`, rv: "1", wantErr: "not an operation on a field"},
		{name: "an operation without op is refused", patch: `[{"path":"/a","value":1}]`, rv: "1", wantErr: "not an operation on a field"},
		{name: "an operation that is not RFC 6902's is refused", patch: `[{"op":"merge","path":"/a","value":1}]`, rv: "1", wantErr: "not an operation on a field"},
		{name: "a path that is not a JSON pointer is refused", patch: `[{"op":"add","path":"a","value":1}]`, rv: "1", wantErr: "not an operation on a field"},
		{name: "replacing all of metadata is refused: it would replace the precondition", patch: `[{"op":"replace","path":"/metadata","value":{}}]`, rv: "1", wantErr: "precondition"},
		{name: "moving the resourceVersion away is refused", patch: `[{"op":"move","from":"/metadata/resourceVersion","path":"/metadata/annotations/x"}]`, rv: "1", wantErr: "precondition"},
		{name: "an operation on the precondition is refused", patch: `[{"op":"replace","path":"/metadata/resourceVersion","value":"9"}]`, rv: "1", wantErr: "precondition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReapplyPatch(tc.patch, tc.rv)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %s, %v; want an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s, %v\nwant %s", got, err, tc.want)
			}
		})
	}
}

func TestLabelPatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"no labels: the whole map is added", nil,
			`[{"op":"replace","path":"/metadata/resourceVersion","value":"7"},{"op":"add","path":"/metadata/labels","value":{"tripswitch.dev/admitted-without":"policy.example.com"}}]`},
		{"other labels: one key is added, its slash escaped", map[string]string{"app": "x"},
			`[{"op":"replace","path":"/metadata/resourceVersion","value":"7"},{"op":"add","path":"/metadata/labels/tripswitch.dev~1admitted-without","value":"policy.example.com"}]`},
		{"already labelled: nothing to do", map[string]string{LabelKey: "policy.example.com"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LabelPatch(tc.labels, "policy.example.com", "7")
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s, %v\nwant %s", got, err, tc.want)
			}
		})
	}
}

func TestLabelValueIsAlwaysValid(t *testing.T) {
	long := strings.Repeat("segment.", 12) + "example.com"
	for _, name := range []string{"policy.example.com", long, "-odd-.name.io", strings.Repeat("a", 63), strings.Repeat("a", 64)} {
		v := LabelValue(name)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("LabelValue(%q) = %q: %v", name, v, errs)
		}
		if len(name) <= 63 && len(validation.IsValidLabelValue(name)) == 0 && v != name {
			t.Errorf("LabelValue(%q) = %q, want the name itself", name, v)
		}
	}
	if LabelValue(long) == LabelValue(long+"x") {
		t.Error("two long names share a label value")
	}
}

func pod(owner map[string]any) *unstructured.Unstructured {
	md := map[string]any{"name": "p", "namespace": "ns", "uid": "u"}
	if owner != nil {
		md["ownerReferences"] = []any{owner}
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md}}
}

func TestRollable(t *testing.T) {
	ref := func(apiVersion, kind string, controller bool) map[string]any {
		return map[string]any{"apiVersion": apiVersion, "kind": kind, "name": "o", "uid": "o-uid", "controller": controller}
	}
	for _, tc := range []struct {
		name  string
		owner map[string]any
		ok    bool
		why   string
	}{
		{"a ReplicaSet's Pod is rolled", ref("apps/v1", "ReplicaSet", true), true, ""},
		{"a StatefulSet's Pod is rolled", ref("apps/v1", "StatefulSet", true), true, ""},
		{"a DaemonSet's Pod is rolled", ref("apps/v1", "DaemonSet", true), true, ""},
		{"a Job's Pod is rolled", ref("batch/v1", "Job", true), true, ""},
		{"a bare Pod is never deleted", nil, false, "bare Pod"},
		{"an owner that is not the controller makes no difference", ref("apps/v1", "ReplicaSet", false), false, "bare Pod"},
		{"an unknown controller is not trusted to recreate it", ref("example.com/v1", "Rollout", true), false, "does not roll"},
		{"a same-named kind of another group is not trusted", ref("example.com/v1", "ReplicaSet", true), false, "does not roll"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, ok, why := rollable(pod(tc.owner))
			if ok != tc.ok || !strings.Contains(why, tc.why) {
				t.Fatalf("rollable: %v %q, want %v %q", ok, why, tc.ok, tc.why)
			}
		})
	}
}

// TestScheduleLimits: with n at once, never more run together, never two of
// one owner, every item runs once, and an error starts nothing more.
func TestScheduleLimits(t *testing.T) {
	var items []*Item
	for i := range 12 {
		items = append(items, &Item{Name: fmt.Sprint(i), owner: types.UID(fmt.Sprint("owner-", i%3))})
	}
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("%d at once", n), func(t *testing.T) {
			var mu sync.Mutex
			running, peak, ran := 0, 0, 0
			owners := map[types.UID]bool{}
			err := schedule(items, n, func(it *Item) error {
				mu.Lock()
				if owners[it.owner] {
					t.Errorf("two of %s at once", it.owner)
				}
				owners[it.owner] = true
				running++
				ran++
				peak = max(peak, running)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				running--
				delete(owners, it.owner)
				mu.Unlock()
				return nil
			})
			if err != nil || ran != len(items) || peak > min(n, 3) || peak == 0 {
				t.Fatalf("err %v, ran %d of %d, peak %d (limit %d, 3 owners)", err, ran, len(items), peak, n)
			}
		})
	}
	t.Run("an error starts nothing more", func(t *testing.T) {
		var started atomic.Int32
		err := schedule(items, 1, func(it *Item) error {
			if started.Add(1) == 2 {
				return fmt.Errorf("forbidden")
			}
			return nil
		})
		if err == nil || started.Load() != 2 {
			t.Fatalf("err %v after %d started, want the error after 2", err, started.Load())
		}
	})
}

// FuzzReapplyPatch: whatever a webhook returns, the patch sent is either
// refused or exactly the precondition followed by the webhook's
// operations, none of which touches the precondition.
func FuzzReapplyPatch(f *testing.F) {
	f.Add(`[{"op":"add","path":"/metadata/labels/a","value":"b"}]`, "1")
	f.Add(`[{"op":"replace","path":"/metadata/resourceVersion","value":"2"}]`, "1")
	f.Add(`[{"op":"remove","path":"/spec"},{"op":"test","path":"/x","value":null}]`, "9")
	f.Add(`[]`, "")
	f.Add(`[{"op":"","path":"0"}]`, "\xff") // found by the fuzzer: not an operation, and an rv JSON cannot carry
	f.Add(`[{"op":"move","from":"/metadata/resourceVersion","path":"/a"}]`, "1")
	f.Fuzz(func(t *testing.T, patch, rv string) {
		out, err := ReapplyPatch(patch, rv)
		if err != nil {
			return
		}
		var got, in []map[string]any
		if json.Unmarshal(out, &got) != nil || json.Unmarshal([]byte(patch), &in) != nil {
			t.Fatalf("%s from %s", out, patch)
		}
		if len(got) != len(in)+1 || !reflect.DeepEqual(got[0], map[string]any{"op": "replace", "path": "/metadata/resourceVersion", "value": rv}) {
			t.Fatalf("%s from %s", out, patch)
		}
		if !reflect.DeepEqual(got[1:], in) {
			t.Fatalf("the webhook's operations changed: %s from %s", out, patch)
		}
		for _, op := range in {
			for _, k := range []string{"path", "from"} {
				if p, _ := op[k].(string); strings.HasPrefix(p, "/metadata/resourceVersion") || p == "/metadata" || k == "path" && !strings.HasPrefix(p, "/") {
					t.Fatalf("an operation with %s %q passed", k, p)
				}
			}
		}
	})
}

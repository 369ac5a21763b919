package clusterlimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

var t0 = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

func cand(name string, after time.Duration) Candidate {
	return Candidate{Breaker: name, UID: types.UID("uid-" + name), ThresholdAt: t0.Add(after)}
}

func open(name string) Open { return Open{Breaker: name, UID: types.UID("uid-" + name), OpenedAt: t0} }

func names(cs []Candidate) string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Breaker)
	}
	return strings.Join(n, ",")
}

func refused(rs []Refusal) string {
	var n []string
	for _, r := range rs {
		n = append(n, fmt.Sprintf("%s#%d", r.Breaker, r.Position))
	}
	return strings.Join(n, ",")
}

func TestDecide(t *testing.T) {
	five := []Candidate{cand("e", 5), cand("c", 3), cand("a", 1), cand("d", 4), cand("b", 2)}
	for _, tc := range []struct {
		name             string
		max              int
		open             []Open
		want             []Candidate
		allowed, refused string
		count            int
	}{
		{"no limit", 0, []Open{open("x")}, five, "a,b,c,d,e", "", 1},
		{"five failing, two may: the first two to fail", 2, nil, five, "a,b", "c#1,d#2,e#3", 0},
		{"one slot left", 2, []Open{open("x")}, five, "a", "b#1,c#2,d#3,e#4", 1},
		{"full", 2, []Open{open("x"), open("y")}, five, "", "a#1,b#2,c#3,d#4,e#5", 2},
		{"over the limit (lowered): nobody new", 1, []Open{open("x"), open("y")}, []Candidate{cand("a", 0)}, "", "a#1", 2},
		{"already open: allowed, takes no new place", 2, []Open{open("a"), open("b")}, []Candidate{cand("a", 0), cand("c", 1)}, "a", "c#1", 2},
		{"as circuits close, opening resumes in order", 2, []Open{open("a")}, []Candidate{cand("c", 3), cand("d", 4), cand("e", 5)}, "c", "d#1,e#2", 1},
		{"ties by name", 1, nil, []Candidate{cand("zeta", 0), cand("alpha", 0), cand("mid", 0)}, "alpha", "mid#1,zeta#2", 0},
		{"a corrupt record counts", 2, []Open{open("x"), {}}, []Candidate{cand("a", 0)}, "", "a#1", 2},
		{"one breaker's two records count once", 2, []Open{open("x"), open("x")}, []Candidate{cand("a", 0)}, "a", "", 1},
		{"a candidate named twice", 1, nil, []Candidate{cand("a", 0), cand("a", 0)}, "a", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.max, tc.open, tc.want)
			if names(d.Allowed) != tc.allowed || refused(d.Refused) != tc.refused || d.OpenCount != tc.count {
				t.Fatalf("allowed %q refused %q open %d, want %q %q %d", names(d.Allowed), refused(d.Refused), d.OpenCount, tc.allowed, tc.refused, tc.count)
			}
		})
	}
}

// The order is the candidates', never the caller's: two leaders that list
// the breakers differently decide the same.
func TestDecideIsDeterministic(t *testing.T) {
	a := Decide(2, nil, []Candidate{cand("a", 1), cand("b", 1), cand("c", 0)})
	b := Decide(2, nil, []Candidate{cand("c", 0), cand("b", 1), cand("a", 1)})
	if names(a.Allowed) != "c,a" || names(a.Allowed) != names(b.Allowed) || refused(a.Refused) != refused(b.Refused) {
		t.Fatalf("%s/%s vs %s/%s", names(a.Allowed), refused(a.Refused), names(b.Allowed), refused(b.Refused))
	}
	ok, pos, msg := a.Position("uid-b")
	if ok || pos != 1 || !strings.Contains(msg, "0 of at most 2 circuits are open") || !strings.Contains(msg, "number 1 in line") {
		t.Fatalf("position of b: %v %d %q", ok, pos, msg)
	}
	if ok, _, _ := a.Position("uid-c"); !ok {
		t.Fatal("c is not allowed")
	}
	if ok, pos, _ := a.Position("uid-nobody"); ok || pos != 0 {
		t.Fatal("a non-candidate has a position")
	}
}

func config(name string, ann map[string]string) *circuit.Configuration {
	cfg, _ := circuit.View(&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}})
	return cfg
}

func record(t *testing.T, webhook, breaker string) (string, string) {
	t.Helper()
	rec := v1alpha1.CircuitRecord{Webhook: webhook, Breaker: breaker, BreakerUID: types.UID("uid-" + breaker), Action: v1alpha1.OpenActionIgnore,
		SetFailurePolicy: "Ignore", OpenedAt: metav1.NewTime(t0)}
	data, err := jsonMarshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return circuit.AnnotationKey(webhook), data
}

// Records reads every record on every configuration, long webhook names
// included, and counts what it cannot read.
func TestRecords(t *testing.T) {
	long := strings.Repeat("long", 20) + ".tripswitch.test"
	k1, v1 := record(t, "a.tripswitch.test", "a")
	k2, v2 := record(t, long, "b")
	k3, _ := record(t, "c.tripswitch.test", "c")
	cfgs := []*circuit.Configuration{
		config("one", map[string]string{k1: v1, k2: v2, "owner.example.com/team": "x"}),
		config("two", map[string]string{k3: "{not json"}),
		config("three", nil),
	}
	open, errs := Records(cfgs)
	if len(open) != 3 || open[0].Breaker == open[1].Breaker || open[2].UID != "" {
		t.Fatalf("open %+v", open)
	}
	if len(errs) != 1 || !errors.Is(errs[0], circuit.ErrCorruptRecord) || !strings.Contains(errs[0].Error(), "on two") {
		t.Fatalf("errs %v", errs)
	}
	for _, o := range open[:2] {
		if !o.OpenedAt.Equal(t0) {
			t.Fatalf("openedAt %v", o.OpenedAt)
		}
	}
	d := Decide(3, open, []Candidate{cand("d", 0)})
	if d.OpenCount != 3 || len(d.Refused) != 1 {
		t.Fatalf("%+v", d)
	}
}

func jsonMarshal(v any) (string, error) {
	data, err := json.Marshal(v)
	return string(data), err
}

package budget_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/budget"
)

var begin = budget.Begin{At: metav1.Unix(1_800_000_000, 0), Evidence: v1alpha1.EvidenceAPIServer, UID: "cfg"}

func spend(t *testing.T, w *v1alpha1.OutageWindow, gen int64, write budget.Write) (*v1alpha1.OutageWindow, error) {
	t.Helper()
	at := begin.At
	return budget.Spend(w, gen, write, begin, &at, v1alpha1.OpenActionIgnore)
}

// One outage's writes, as the docs promise them: the open and its close,
// or the open and the drop of an undone record; two more per trial.
func TestAWindowAllowsWhatAnOutageCosts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []budget.Write
		// refused is the index of the first write refused, -1: none.
		refused int
	}{
		{"open and close", []budget.Write{budget.Open, budget.Close}, -1},
		{"open and drop", []budget.Write{budget.Open, budget.Drop}, -1},
		{"a second open is refused, however the first ended", []budget.Write{budget.Open, budget.Drop, budget.Open}, 2},
		{"a second open after a close is refused too", []budget.Write{budget.Open, budget.Close, budget.Open}, 2},
		{"trials pay for themselves", []budget.Write{budget.Open, budget.TrialStart, budget.TrialEnd, budget.TrialStart, budget.TrialEnd, budget.TrialStart, budget.Close}, -1},
		{"a trial undone, then dropped", []budget.Write{budget.Open, budget.TrialStart, budget.Drop}, -1},
		{"closes beyond the limit and its slack are refused", []budget.Write{budget.Open, budget.Close, budget.Close, budget.Close}, 3},
		{"a close with no open is allowed once (a record from before windows were kept)", []budget.Write{budget.Close}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w *v1alpha1.OutageWindow
			for i, write := range tc.writes {
				next, err := spend(t, w, 1, write)
				if (err != nil) != (i == tc.refused) {
					t.Fatalf("write %d (%s): err %v, want refused %v; window %+v", i, write, err, i == tc.refused, w)
				}
				if err != nil {
					if !errors.Is(err, budget.ErrExhausted) {
						t.Fatalf("refusal %v does not wrap ErrExhausted", err)
					}
					return
				}
				w = next
			}
		})
	}
}

// The window begins at its first write, on the evidence and configuration
// given, and keeps them; the open's record and what it holds follow.
func TestSpendKeepsTheWindow(t *testing.T) {
	w, err := spend(t, nil, 4, budget.Open)
	if err != nil {
		t.Fatal(err)
	}
	if !w.StartedAt.Equal(&begin.At) || w.Evidence != v1alpha1.EvidenceAPIServer || w.ConfigurationUID != "cfg" || !w.Held ||
		w.Opens != 1 || w.Writes != 1 || w.Budget != 2 || w.Generation != 4 || w.Action != v1alpha1.OpenActionIgnore {
		t.Fatalf("after the open: %+v", w)
	}
	w2, err := spend(t, w, 4, budget.TrialStart)
	if err != nil || w2.Trials != 1 || w2.Budget != 4 || w2.Writes != 2 || !w2.Held {
		t.Fatalf("after a trial's start: %+v, %v", w2, err)
	}
	if w.Trials != 0 {
		t.Fatal("Spend changed the window it was given")
	}
	w3, err := spend(t, w2, 4, budget.Drop)
	if err != nil || w3.Held || w3.Writes != 3 {
		t.Fatalf("after the drop: %+v, %v", w3, err)
	}
}

// An operator's edit of the spec (a new generation) counts afresh: an open
// the old spec made does not refuse the new spec's.
func TestANewGenerationCountsAfresh(t *testing.T) {
	w, _ := spend(t, nil, 1, budget.Open)
	w, _ = spend(t, w, 1, budget.Close)
	if _, err := spend(t, w, 1, budget.Open); err == nil {
		t.Fatal("a second open in the same generation was allowed")
	}
	next, err := spend(t, w, 2, budget.Open)
	if err != nil || next.Opens != 1 || next.Writes != 1 || next.Generation != 2 || !next.StartedAt.Equal(&begin.At) {
		t.Fatalf("the new generation's open: %+v, %v", next, err)
	}
}

// A record on the configuration with no window in the status implies one:
// its open made and held.
func TestInfer(t *testing.T) {
	rec := &v1alpha1.CircuitRecord{Action: v1alpha1.OpenActionBypass, OpenedAt: begin.At}
	w := budget.Infer(rec, "cfg", 3)
	if w.Opens != 1 || !w.Held || w.Generation != 3 || w.ConfigurationUID != "cfg" || w.Writes != 1 || w.Budget != 2 {
		t.Fatalf("inferred %+v", w)
	}
	if err := budget.Allow(w, 3, budget.Open); err == nil {
		t.Fatal("an inferred window allows a second open")
	}
	rec.Trial = &v1alpha1.TrialRecord{}
	if w := budget.Infer(rec, "cfg", 3); w.Trials != 1 || w.Budget != 4 {
		t.Fatalf("inferred from a trial's record: %+v", w)
	}
}

// Whatever sequence of writes is asked for, the writes a window lets
// through stay within its limit plus one write of slack for a close, there
// is never more than one open per generation, and every refusal wraps
// ErrExhausted. Seeded; the seed is in the failure.
func TestNoSequenceExceedsTheBudget(t *testing.T) {
	writes := []budget.Write{budget.Open, budget.Close, budget.Drop, budget.TrialStart, budget.TrialEnd}
	for seed := uint64(0); seed < 2000; seed++ {
		r := rand.New(rand.NewPCG(seed, seed))
		var w *v1alpha1.OutageWindow
		var allowed, opens int32
		gen := int64(1)
		var trace []budget.Write
		for range 40 {
			if r.IntN(20) == 0 {
				gen++ // an operator's edit
				allowed, opens = 0, 0
			}
			write := writes[r.IntN(len(writes))]
			trace = append(trace, write)
			next, err := budget.Spend(w, gen, write, budget.Begin{At: metav1.NewTime(time.Unix(int64(seed), 0))}, nil, v1alpha1.OpenActionIgnore)
			if err != nil {
				if !errors.Is(err, budget.ErrExhausted) {
					t.Fatalf("seed %d: %v", seed, err)
				}
				continue
			}
			w = next
			allowed++
			if write == budget.Open {
				opens++
			}
			if opens > 1 || allowed > budget.Limit(w)+1 {
				t.Fatalf("seed %d: %d opens, %d writes let through, limit %d: %v", seed, opens, allowed, budget.Limit(w), trace)
			}
		}
	}
}

func ExampleSpend() {
	at := metav1.Unix(1_800_000_000, 0)
	b := budget.Begin{At: at, Evidence: v1alpha1.EvidenceProbes, UID: "cfg"}
	w, _ := budget.Spend(nil, 1, budget.Open, b, &at, v1alpha1.OpenActionIgnore)
	w, _ = budget.Spend(w, 1, budget.Drop, b, nil, "")
	_, err := budget.Spend(w, 1, budget.Open, b, nil, v1alpha1.OpenActionIgnore)
	fmt.Println(w.Writes, "of", w.Budget, "writes;", errors.Is(err, budget.ErrExhausted))
	// Output: 2 of 2 writes; true
}

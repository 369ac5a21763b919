package breaker

import (
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// fillLogs gives each of w's lanes a sorted log of up to laneLog−1
// failures, what a sync reads of a log (all of them if full),
// each having seen at most maxSeen successes since the last sync, with many
// ties across lanes, and counts maxSeen successes on lane 0.
func fillLogs(w *countWindow, r *rand.Rand, maxSeen uint64, full bool) {
	w.lanes[0].good.Add(maxSeen)
	for i := range w.lanes {
		l := &w.lanes[i]
		n := r.IntN(laneLog)
		if full {
			n = laneLog - 1
		}
		seen := make([]uint64, n)
		for k := range seen {
			seen[k] = r.Uint64N(maxSeen + 1)
		}
		slices.Sort(seen)
		for k, s := range seen {
			l.seen[k] = uint16(s)
		}
		l.word.Store(l.word.Load() + uint64(n))
	}
}

// seal's merge places every lane's failures as a scan of every lane's head
// for the smallest seen (the lowest lane of equal ones) did: the ring and
// its totals match a reference built from all the failures sorted so.
func TestSealMergesLanesInOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, lanes := range []int{2, 3, 8, 64} {
		for round := range 200 {
			size := 1 + r.IntN(4000)
			c := Config{WindowSize: size, MinimumNumberOfCalls: 1, FailureRateThreshold: 50}
			w := newCountWindowLanes(&c, true, lanes)
			maxSeen := uint64(r.IntN(300))
			fillLogs(w, r, maxSeen, false)
			type entry struct {
				s    uint64
				lane int
			}
			var all []entry
			for i := range w.lanes {
				n := uint32(w.lanes[i].word.Load())
				for k := range n {
					all = append(all, entry{uint64(w.lanes[i].seen[k]), i})
				}
			}
			slices.SortStableFunc(all, func(a, b entry) int {
				if a.s != b.s {
					return int(a.s) - int(b.s)
				}
				return a.lane - b.lane
			})
			var want []uint8
			done := uint64(0)
			for _, e := range all {
				for ; done < e.s; done++ {
					want = append(want, outcomePresent)
				}
				want = append(want, outcomePresent|outcomeFailure)
			}
			for ; done < maxSeen; done++ {
				want = append(want, outcomePresent)
			}
			if len(want) > size {
				want = want[len(want)-size:]
			}
			w.mu.Lock()
			w.seal()
			var got []uint8
			n := int(w.tot.calls)
			for i := range n {
				got = append(got, w.ring[(w.pos-n+i+2*size)%size])
			}
			w.unseal(-1)
			w.mu.Unlock()
			if !slices.Equal(got, want) {
				t.Fatalf("%d lanes, round %d: ring %v, want %v", lanes, round, got, want)
			}
			var failures int64
			for _, o := range want {
				failures += int64(o & outcomeFailure)
			}
			if w.tot.failures != failures {
				t.Fatalf("%d lanes, round %d: %d failures, want %d", lanes, round, w.tot.failures, failures)
			}
		}
	}
}

// A sync at 64 lanes, each holding a full log: the merge is O(F log lanes)
// and allocates nothing.
func BenchmarkSeal64Lanes(b *testing.B) {
	c := Config{WindowSize: 10_000, MinimumNumberOfCalls: 1, FailureRateThreshold: 50}
	w := newCountWindowLanes(&c, true, 64)
	r := rand.New(rand.NewPCG(3, 4))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i := range w.lanes { // unsealed (an even generation), with no failures
			l := &w.lanes[i]
			l.word.Store((l.word.Load()>>32 | 1 + 1) << 32)
		}
		fillLogs(w, r, 60, true)
		b.StartTimer()
		w.mu.Lock()
		w.seal()
		w.mu.Unlock()
	}
}

// A sync's store of base is off the line that fast successes read.
func TestCountWindowBaseOffTheHotLine(t *testing.T) {
	var w countWindow
	hot := []uintptr{unsafe.Offsetof(w.lanes), unsafe.Offsetof(w.mask), unsafe.Offsetof(w.budgets), unsafe.Offsetof(w.warm), unsafe.Offsetof(w.min)}
	for _, o := range hot {
		if o/cacheLine != 0 {
			t.Fatalf("a hot field at offset %d, beyond the first line", o)
		}
	}
	if b := unsafe.Offsetof(w.base); b < cacheLine {
		t.Fatalf("base at offset %d, on the hot line", b)
	}
}

package breaker

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// refRing is the last size outcomes in the order they happened.
type refRing struct {
	size     int
	outcomes []bool // true: failure
}

func (r *refRing) push(failure bool) {
	r.outcomes = append(r.outcomes, failure)
	if len(r.outcomes) > r.size {
		r.outcomes = r.outcomes[len(r.outcomes)-r.size:]
	}
}

func (r *refRing) failures() int64 {
	n := int64(0)
	for _, f := range r.outcomes {
		if f {
			n++
		}
	}
	return n
}

// ringOf is w's ring, oldest first (true: failure). w.mu must be held.
func ringOf(w *countWindow) []bool {
	n, size := int(w.tot.calls), len(w.ring)
	got := make([]bool, 0, n)
	for i := range n {
		got = append(got, w.ring[(w.pos-n+i+2*size)%size]&outcomeFailure != 0)
	}
	return got
}

// Outcomes counted on lanes chosen at random, one at a time as real time
// orders them, in long runs without a read: every failure a lane counts
// without a check leaves the reference ring clearly below the threshold,
// every checked outcome sees the reference's counts, and every read finds
// the reference's ring, outcome for outcome. The runs are long enough for
// lanes' logs to wrap (more failures between two syncs than a log holds),
// which the test checks it saw, in windows far longer than a log too.
func TestLaneLogsAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	wrapped := 0
	for round := range 300 {
		size := 20 + r.IntN(300)
		threshold := float64(20 + r.IntN(70))
		if round%4 == 0 { // windows longer than a log, where the log's ring decides
			size, threshold = 300+r.IntN(1500), float64(60+r.IntN(35))
		}
		c := Config{WindowSize: size, MinimumNumberOfCalls: 1 + r.IntN(size), FailureRateThreshold: threshold}
		lanes := 2 + r.IntN(3)
		w := newCountWindowLanes(&c, true, lanes)
		ref := &refRing{size: size}
		name := fmt.Sprintf("round %d (size %d, threshold %v, %d lanes)", round, size, threshold, lanes)
		rate := threshold / 100 * (0.3 + 0.6*r.Float64())
		var cs counts
		lane := 0
		for step := range 4000 + r.IntN(8000) {
			if r.IntN(8) == 0 {
				lane = r.IntN(lanes)
			}
			l := &w.lanes[lane]
			failure := r.Float64() < rate
			switch {
			case r.IntN(3000) == 0: // a read
				w.snapshot(0, &cs)
			case !failure && w.warm.Load():
				l.good.Add(1)
				ref.push(false)
				continue
			case failure:
				if k := int(uint32(l.word.Load())); k > laneLog {
					wrapped++
				}
				if res, _ := w.countOn(l); res == counted {
					ref.push(true)
					if f := ref.failures(); f > w.mostFailures(int64(len(ref.outcomes))) {
						t.Fatalf("%s, step %d: a failure counted without a check left %d failures in %d calls", name, step, f, len(ref.outcomes))
					}
					continue
				}
				ref.push(true)
				w.recordFrom(lane, outcomePresent|outcomeFailure, &cs) // as record does, from the lane that asked
			default:
				ref.push(false)
				w.record(0, false, false, &cs)
			}
			if cs.calls != int64(len(ref.outcomes)) || cs.failures != ref.failures() {
				t.Fatalf("%s, step %d: counts %+v, want %d calls, %d failures", name, step, cs, len(ref.outcomes), ref.failures())
			}
		}
		w.mu.Lock()
		w.seal()
		got := ringOf(w)
		w.unseal(-1)
		w.mu.Unlock()
		if !slices.Equal(got, ref.outcomes) {
			t.Fatalf("%s: ring %v, want %v", name, got, ref.outcomes)
		}
	}
	if wrapped == 0 {
		t.Fatal("no lane's log wrapped: the test does not reach the ring of entries")
	}
	t.Logf("%d failures counted on a wrapped log", wrapped)
}

// A lane that counted nothing while another counted alone for many syncs
// has no share of the room; its first failure is checked, and from that
// sync on it holds as much of the room as the busy lane, so its next
// failures are counted on its core again.
func TestAnIdleLaneGetsRoomAtOnce(t *testing.T) {
	c := Config{WindowSize: 100, MinimumNumberOfCalls: 100, FailureRateThreshold: 60}
	w := newCountWindowLanes(&c, true, 2)
	var cs counts
	for i := range 200 {
		w.recordFrom(-1, outcomePresent|outcomeFailure*uint8(i%2), &cs)
	}
	busy, idle := &w.lanes[0], &w.lanes[1]
	for i := range 20_000 { // lane 0 alone, with a sync whenever it asks
		if i%2 == 0 {
			busy.good.Add(1)
		} else if r, _ := w.countOn(busy); r != counted {
			w.recordFrom(0, outcomePresent|outcomeFailure, &cs)
		}
	}
	w.snapshot(0, &cs)
	if share := idle.share.Load(); share != 0 {
		t.Fatalf("the idle lane's share is %d after 20,000 calls on the other, want 0", share)
	}
	if r, _ := w.countOn(idle); r == counted {
		t.Fatal("a lane with no share counted a failure without a check")
	}
	w.recordFrom(1, outcomePresent|outcomeFailure, &cs)
	if a, b := busy.share.Load(), idle.share.Load(); a != b {
		t.Fatalf("shares %d and %d after the idle lane asked, want equal", a, b)
	}
	for i := range 20 { // ten failures among ten successes: within half the room
		if i%2 == 0 {
			idle.good.Add(1)
			continue
		}
		if r, _ := w.countOn(idle); r != counted {
			t.Fatalf("failure %d on the lane that asked: %d, want counted on its core", i/2, r)
		}
	}
}

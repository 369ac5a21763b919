package breaker_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// ringRef is the reference for a COUNT_BASED window: the last size
// outcomes, recomputed from scratch, and whether the circuit has opened
// (once an outcome left at least min calls at a failure rate of at least
// the threshold, as Resilience4j checks after every call).
type ringRef struct {
	size, min int
	threshold float64
	outcomes  []bool // true: failed
	opened    bool
}

func (r *ringRef) add(failed bool) {
	r.outcomes = append(r.outcomes, failed)
	calls, failures := r.window()
	if calls >= r.min && float64(failures)*100/float64(calls) >= r.threshold {
		r.opened = true
	}
}

func (r *ringRef) window() (calls, failures int) {
	w := r.outcomes[max(0, len(r.outcomes)-r.size):]
	for _, f := range w {
		if f {
			failures++
		}
	}
	return len(w), failures
}

// nearThreshold returns a random COUNT_BASED configuration and a sequence
// of outcomes that stays below its threshold for several windows, in
// phases at a random distance from it (far, where a per-core budget would
// have room, and one failure short of it), with failures evicting and
// being evicted; a rare failure at the edge ends it at the outcome at which
// the reference opens, if that happens within n calls.
func nearThreshold(rng *rand.Rand, n int) (ringRef, []bool) {
	r := ringRef{size: 10 + rng.IntN(190), threshold: float64(5 + rng.IntN(91))}
	if rng.IntN(3) == 0 {
		r.threshold = float64(10 * (1 + rng.IntN(9))) // rates land on it exactly
	}
	r.min = 1 + rng.IntN(r.size)
	ref := ringRef{size: r.size, min: r.min, threshold: r.threshold}
	var seq []bool
	var distance float64
	for phase := 0; len(seq) < n && !ref.opened; phase-- {
		if phase <= 0 {
			phase, distance = 50+rng.IntN(250), []float64{0, 0, 5, 15, 30}[rng.IntN(5)]
		}
		// The rate the window would have with one more failure.
		next := ringRef{size: ref.size, outcomes: append(ref.outcomes[max(0, len(ref.outcomes)-ref.size+1):len(ref.outcomes):len(ref.outcomes)], true)}
		calls, failures := next.window()
		failed := float64(failures)*100 < (r.threshold-distance)*float64(calls) && rng.IntN(5) > 0
		if rng.IntN(1000) == 0 {
			failed = true
		}
		seq = append(seq, failed)
		ref.add(failed)
	}
	return r, seq
}

func outcomeOf(failed bool) breaker.Outcome {
	if failed {
		return breaker.Failure
	}
	return breaker.Success
}

// checkStep compares the breaker after the i-th outcome of seq with the
// reference; with metrics it compares the window's counts too (a read that
// moves every core's outcomes into the ring).
func checkStep(b *breaker.Breaker, ref *ringRef, i int, metrics bool) error {
	want := breaker.Closed
	if ref.opened {
		want = breaker.Open
	}
	if s := b.State(); s != want {
		calls, failures := ref.window()
		return fmt.Errorf("after outcome %d (window %d of %d failed): %s, want %s", i, failures, calls, s, want)
	}
	if metrics && !ref.opened {
		calls, failures := ref.window()
		if m := b.Metrics(); m.Calls != int64(calls) || m.FailedCalls != int64(failures) {
			return fmt.Errorf("after outcome %d: window %d of %d failed, want %d of %d", i, m.FailedCalls, m.Calls, failures, calls)
		}
	}
	return nil
}

// TestCountWindowAgainstReferenceSequential drives a COUNT_BASED window
// from one goroutine through sequences that stay at and near the threshold
// for several windows (failures evicting and evicted), and compares the
// state after every outcome (and the counts after some) with the reference:
// the circuit opens at exactly the outcome at which the last size calls
// reach the threshold, never before.
func TestCountWindowAgainstReferenceSequential(t *testing.T) {
	rounds := 300
	if testing.Short() {
		rounds = 60
	}
	for round := range rounds {
		rng := rand.New(rand.NewPCG(uint64(round), 0x31d))
		r, seq := nearThreshold(rng, 3000)
		b := mustNew(t, breaker.Config{WindowType: breaker.CountBased, WindowSize: r.size, MinimumNumberOfCalls: r.min, FailureRateThreshold: r.threshold, Clock: newClock()})
		ref := ringRef{size: r.size, min: r.min, threshold: r.threshold}
		for i, failed := range seq {
			call(b, outcomeOf(failed))
			ref.add(failed)
			if err := checkStep(b, &ref, i, rng.IntN(37) == 0); err != nil {
				t.Fatalf("round %d (size %d, minimum %d, threshold %v): %v", round, r.size, r.min, r.threshold, err)
			}
		}
	}
}

// TestCountWindowAgainstReferenceAcrossCores runs the same sequences with
// each outcome recorded by another goroutine, in turn: goroutine i%G
// records the i-th once the (i-1)-th has returned (an atomic turn they spin
// on, so that each runs on its own P). The order is the sequence's, by
// happens-before, but the outcomes land on every core's counters: a window
// that counts failures per core and loses the order of a failure on one
// core and a success on another after it evicts them in the wrong order and
// fails against the reference (a per-core failure log merged per core, not
// by what each failure saw, fails here and passes the sequential test).
func TestCountWindowAgainstReferenceAcrossCores(t *testing.T) {
	rounds := 30
	if testing.Short() || raceEnabled {
		rounds = 10
	}
	goroutines := max(2, min(runtime.GOMAXPROCS(0), runtime.NumCPU())) // spinning on more would wait for the OS
	for round := range rounds {
		rng := rand.New(rand.NewPCG(uint64(round), 0x31d))
		r, seq := nearThreshold(rng, 2000)
		b := mustNew(t, breaker.Config{WindowType: breaker.CountBased, WindowSize: r.size, MinimumNumberOfCalls: r.min, FailureRateThreshold: r.threshold, Clock: newClock()})
		ref := ringRef{size: r.size, min: r.min, threshold: r.threshold}
		metrics := make([]bool, len(seq))
		for i := range metrics {
			metrics[i] = rng.IntN(37) == 0
		}
		var turn atomic.Int64
		var failed atomic.Bool
		var errs [1]error
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := g; i < len(seq); i += goroutines {
					for spins := 0; turn.Load() != int64(i); spins++ {
						if failed.Load() {
							return
						}
						if spins%100 == 99 {
							runtime.Gosched() // the turn's holder may share this P
						}
					}
					call(b, outcomeOf(seq[i]))
					ref.add(seq[i]) // ordered by the turn, like the call
					if err := checkStep(b, &ref, i, metrics[i]); err != nil {
						errs[0] = err
						failed.Store(true)
						return
					}
					turn.Store(int64(i + 1))
				}
			})
		}
		wg.Wait()
		if errs[0] != nil {
			t.Fatalf("round %d (size %d, minimum %d, threshold %v, %d goroutines): %v", round, r.size, r.min, r.threshold, goroutines, errs[0])
		}
	}
}

// 1,000 goroutines each add two failures to a full COUNT_BASED window at
// 25 %, evicting its oldest 2,000 outcomes: whatever their order, the k-th
// failure leaves 1,000 - ⌈k/4⌉ + k failures among the 4,000 calls, so the
// rate reaches 62.5 % exactly with the last one. Once all have returned the circuit is OPEN, and never
// before the last.
func TestConcurrentFailuresEvictToTheThresholdExactly(t *testing.T) {
	const goroutines, size = 1000, 4000
	for round := range 20 {
		b := mustNew(t, breaker.Config{WindowType: breaker.CountBased, WindowSize: size, MinimumNumberOfCalls: 100, FailureRateThreshold: 62.5, Clock: newClock()})
		for i := range size {
			call(b, outcomeOf(i%4 == 0))
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		var rejected sync.Once
		for range goroutines {
			wg.Go(func() {
				<-start
				for range 2 {
					if !call(b, breaker.Failure) {
						rejected.Do(func() { t.Errorf("round %d: a failure was rejected before the last", round) })
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if m := b.Metrics(); m.State != breaker.Open || m.Calls != size || m.FailedCalls != 2500 {
			t.Fatalf("round %d: %+v, want OPEN on 2,500 of 4,000", round, m)
		}
	}
}

// Goroutines mix successes and failures on a COUNT_BASED window whose
// every window of the whole run stays below the threshold (fewer failures
// in all than the threshold allows in one full window); then one goroutine fills the window with successes and adds
// failures until the reference opens. The circuit stays CLOSED through the
// first part with every call counted, holds exactly the successes after
// the fill, and opens at exactly the failure the reference opens at.
func TestCountWindowMixedThenReference(t *testing.T) {
	for round := range 50 {
		rng := rand.New(rand.NewPCG(uint64(round), 0x31d))
		size := 50 + rng.IntN(400)
		threshold := float64(20 + rng.IntN(70))
		goroutines := 2 + rng.IntN(7)
		total := int(threshold*float64(size)/100) - 1 // failures in all: below any full window's threshold
		b := mustNew(t, breaker.Config{WindowType: breaker.CountBased, WindowSize: size, MinimumNumberOfCalls: size, FailureRateThreshold: threshold, Clock: newClock()})
		for range size {
			call(b, breaker.Success)
		}
		var wg sync.WaitGroup
		per := total / goroutines
		for range goroutines {
			wg.Go(func() {
				for i := range 20 * per {
					if !call(b, outcomeOf(i%20 == 0)) {
						t.Errorf("round %d: rejected in %s", round, b.State())
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		if m := b.Metrics(); m.State != breaker.Closed || m.Calls != int64(size) {
			t.Fatalf("round %d: %+v after the mixed part, want CLOSED with %d calls", round, m, size)
		}
		ref := ringRef{size: size, min: size, threshold: threshold}
		for range size {
			call(b, breaker.Success)
			ref.add(false)
		}
		if m := b.Metrics(); m.FailedCalls != 0 || m.Calls != int64(size) {
			t.Fatalf("round %d: %+v after %d successes, want none failed", round, m, size)
		}
		for i := 0; !ref.opened; i++ {
			failed := rng.IntN(20) > 0
			call(b, outcomeOf(failed))
			ref.add(failed)
			if err := checkStep(b, &ref, i, false); err != nil {
				t.Fatalf("round %d (size %d, threshold %v): %v", round, size, threshold, err)
			}
		}
	}
}

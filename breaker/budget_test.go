package breaker_test

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// reaches is the reference: f failures among n calls open a circuit with
// minimum m and threshold t, computed as Resilience4j does.
func reaches(f, n, m int, t float64) bool {
	return n >= m && n > 0 && float64(f)*100/float64(n) >= t
}

// prefixSafe returns a random sequence of outcomes of which no prefix
// reaches threshold t (whatever the minimum): interleaved with any other
// such sequences, the window's rate is a mediant of prefix rates, so it
// never reaches t either.
func prefixSafe(rng *rand.Rand, n int, t float64) []breaker.Outcome {
	seq := make([]breaker.Outcome, 0, n)
	f := 0
	for len(seq) < n {
		if rng.IntN(100) < int(t)+10 && !reaches(f+1, len(seq)+1, 1, t) {
			seq = append(seq, breaker.Failure)
			f++
			continue
		}
		seq = append(seq, breaker.Success)
	}
	return seq
}

// TestFailureBudgetsAgainstReference drives each window type from many
// goroutines with outcomes that keep the failure rate below its threshold
// in every order, most of them counted on per-core budgets, then serially
// adds failures one at a time: the circuit must stay CLOSED through the
// first part with every outcome counted, and open at exactly the failure
// at which the reference's rate reaches the threshold. A budget larger than
// the margin lets that failure through unchecked and fails the test; so
// does a decision on counts that hold a failure without the successes
// before it.
func TestFailureBudgetsAgainstReference(t *testing.T) {
	rounds := 200
	if testing.Short() {
		rounds = 40
	}
	for _, wt := range windowTypes {
		t.Run(wt.String(), func(t *testing.T) {
			for round := range rounds {
				rng := rand.New(rand.NewPCG(uint64(round), 31))
				threshold := float64(5 + rng.IntN(91))
				if rng.IntN(4) == 0 {
					threshold = float64(10 * (1 + rng.IntN(9))) // round rates land on it exactly
				}
				goroutines, per := 1+rng.IntN(8), 50+rng.IntN(400)
				minCalls := 1 + rng.IntN(goroutines*per)
				cfg := breaker.Config{
					WindowType: wt, WindowSize: 3600, MinimumNumberOfCalls: minCalls,
					FailureRateThreshold: threshold, Clock: newClock(), // nothing leaves the window
				}
				if wt == breaker.CountBased {
					cfg.WindowSize = goroutines*per + 10_000
				}
				b := mustNew(t, cfg)
				seqs := make([][]breaker.Outcome, goroutines)
				calls, failures := 0, 0
				for g := range seqs {
					seqs[g] = prefixSafe(rng, per, threshold)
					for _, o := range seqs[g] {
						calls++
						if o == breaker.Failure {
							failures++
						}
					}
				}
				start := make(chan struct{})
				var wg sync.WaitGroup
				for _, seq := range seqs {
					wg.Go(func() {
						<-start
						for _, o := range seq {
							if !call(b, o) {
								t.Errorf("round %d: rejected in %s", round, b.State())
								return
							}
						}
					})
				}
				close(start)
				wg.Wait()
				if t.Failed() {
					return
				}
				if m := b.Metrics(); m.State != breaker.Closed || m.Calls != int64(calls) || m.FailedCalls != int64(failures) {
					t.Fatalf("round %d (threshold %v, minimum %d): %+v, want CLOSED with %d calls, %d failed", round, threshold, minCalls, m, calls, failures)
				}
				for !reaches(failures+1, calls+1, minCalls, threshold) {
					call(b, breaker.Failure)
					calls++
					failures++
					if s := b.State(); s != breaker.Closed {
						t.Fatalf("round %d (threshold %v, minimum %d): %s at %d of %d failed, below the threshold", round, threshold, minCalls, s, failures, calls)
					}
				}
				call(b, breaker.Failure)
				if s := b.State(); s != breaker.Open {
					t.Fatalf("round %d (threshold %v, minimum %d): %s after the failure that made %d of %d, want OPEN", round, threshold, minCalls, s, failures+1, calls+1)
				}
			}
		})
	}
}

// Budgets granted under one threshold are taken back by an update that
// lowers it: the next failure at the new threshold opens.
func TestUpdateTakesBudgetsBack(t *testing.T) {
	r, err := breaker.NewRegistry(breaker.Config{WindowType: breaker.TimeBased, WindowSize: 3600, MinimumNumberOfCalls: 10, FailureRateThreshold: 90, Clock: newClock()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := r.Get("a")
	for i := range 1000 {
		o := breaker.Success
		if i%5 == 4 {
			o = breaker.Failure // 20 %: far from 90, so counted on budgets
		}
		call(b, o)
	}
	cfg := b.Config()
	cfg.FailureRateThreshold = 20.1
	if kept, err := r.Update("a", cfg); err != nil || !kept {
		t.Fatalf("update: kept %v, %v", kept, err)
	}
	// 200 of 1,000 failed; 201 of 1,001 is 20.08 %, 202 of 1,002 is 20.16 %.
	call(b, breaker.Failure)
	if s := b.State(); s != breaker.Closed {
		t.Fatalf("201 of 1,001 failed at 20.1 %%: %s", s)
	}
	call(b, breaker.Failure)
	if s := b.State(); s != breaker.Open {
		t.Fatalf("202 of 1,002 failed at 20.1 %%: %s, want OPEN", s)
	}
}

// A second that leaves a time window may raise the failure rate: budgets
// granted before it left are taken back, whoever starts the new second.
func TestRollTakesBudgetsBack(t *testing.T) {
	clk := newClock()
	b := mustNew(t, breaker.Config{WindowType: breaker.TimeBased, WindowSize: 2, MinimumNumberOfCalls: 10, FailureRateThreshold: 50, Clock: clk})
	for range 100 {
		call(b, breaker.Success)
	}
	clk.Advance(time.Second)
	for i := range 85 {
		o := breaker.Success
		if i%2 == 0 && i < 80 {
			o = breaker.Failure // 40 failures among 185 calls: budgets are granted
		}
		call(b, o)
	}
	clk.Advance(time.Second)
	call(b, breaker.Success) // starts the second; the first 100 successes left: 40 of 86
	for failures := 41; failures <= 45; failures++ {
		call(b, breaker.Failure)
		if s := b.State(); s != breaker.Closed {
			t.Fatalf("%d of %d failed: %s", failures, failures+46, s)
		}
	}
	call(b, breaker.Failure)
	if s := b.State(); s != breaker.Open {
		t.Fatalf("46 of 92 failed at 50 %%: %s, want OPEN (%+v)", s, b.Metrics())
	}
}

// 1,000 goroutines each add two failures to a window at 25 %, most of them
// on budgets: the rate reaches exactly 50 % with the last one, so once all
// have returned the circuit is OPEN, and never before the last.
func TestConcurrentFailuresReachTheThresholdExactly(t *testing.T) {
	const goroutines = 1000
	for _, wt := range windowTypes {
		t.Run(wt.String(), func(t *testing.T) {
			for round := range 20 {
				b := mustNew(t, breaker.Config{WindowType: wt, WindowSize: 10_000, MinimumNumberOfCalls: 100, FailureRateThreshold: 50, Clock: newClock()})
				for i := range 4000 {
					o := breaker.Success
					if i%4 == 3 {
						o = breaker.Failure
					}
					call(b, o)
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
				if m := b.Metrics(); m.State != breaker.Open || m.Calls != 6000 || m.FailedCalls != 3000 {
					t.Fatalf("round %d: %+v, want OPEN on 3,000 of 6,000", round, m)
				}
			}
		})
	}
}

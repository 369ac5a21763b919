package breaker_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// Successes are counted on per-core counters, failures on per-core budgets
// or under a mutex: once every call has returned, the window holds each of them
// exactly once, on either window type.
func TestConcurrentOutcomesAreCountedExactly(t *testing.T) {
	const goroutines, calls = 16, 5_000
	for _, wt := range []breaker.WindowType{breaker.TimeBased, breaker.CountBased} {
		t.Run(wt.String(), func(t *testing.T) {
			size := 3600
			if wt == breaker.CountBased {
				size = goroutines * calls
			}
			b := mustNew(t, breaker.Config{WindowType: wt, WindowSize: size, MinimumNumberOfCalls: 1, FailureRateThreshold: 100})
			var failures atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range calls {
						o := breaker.Success
						// Never a goroutine's first call: then the window holds a
						// success of its own before any of its failures, and
						// 100 % is out of reach however the goroutines are
						// scheduled (a failure first, alone in the window, is
						// 100 % and rightly opens).
						if i > 0 && (i+g)%10 == 0 {
							o = breaker.Failure
							failures.Add(1)
						}
						if !call(b, o) {
							t.Errorf("call rejected in %s", b.State())
							return
						}
					}
				})
			}
			wg.Wait()
			m := b.Metrics()
			if m.State != breaker.Closed || m.Calls != goroutines*calls || m.FailedCalls != failures.Load() {
				t.Fatalf("metrics %+v, want CLOSED with %d calls and %d failures", m, goroutines*calls, failures.Load())
			}
		})
	}
}

// A count window lets successes skip the check only once it holds the
// minimum: the success that completes it opens a failing circuit, even
// when the successes before it ran on other goroutines.
func TestSuccessCompletingTheMinimumOpens(t *testing.T) {
	for _, wt := range []breaker.WindowType{breaker.TimeBased, breaker.CountBased} {
		t.Run(wt.String(), func(t *testing.T) {
			b := mustNew(t, breaker.Config{WindowType: wt, WindowSize: 100, MinimumNumberOfCalls: 40, FailureRateThreshold: 50})
			for range 20 {
				call(b, breaker.Failure)
			}
			var wg sync.WaitGroup
			for range 19 {
				wg.Go(func() { call(b, breaker.Success) })
			}
			wg.Wait()
			if s := b.State(); s != breaker.Closed {
				t.Fatalf("39 calls, below the minimum of 40: %s", s)
			}
			call(b, breaker.Success)
			if s := b.State(); s != breaker.Open {
				t.Fatalf("the 40th call, a success, left 20 of 40 failed: %s, want OPEN", s)
			}
		})
	}
}

// Completing a permit is idempotent and safe from many goroutines at once:
// the outcome is recorded once.
func TestPermitDoneIsIdempotentAndConcurrencySafe(t *testing.T) {
	b := mustNew(t, breaker.Config{WindowSize: 10, MinimumNumberOfCalls: 10, PermittedNumberOfCallsInHalfOpenState: 2})
	b.EnableTotals()
	var transitions atomic.Int32
	b.Subscribe(func(e breaker.Event) {
		if e.Type == breaker.EventStateTransition {
			transitions.Add(1)
		}
	})
	p, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			if i%2 == 0 {
				p.Done(breaker.Failure)
			} else {
				p.DoneErr(nil)
			}
		})
	}
	wg.Wait()
	if m, tot := b.Metrics(), b.Totals(); m.Calls != 1 || tot.Successful+tot.Failed != 1 {
		t.Fatalf("one permit completed 64 times: window %+v, totals %+v; want one call", m, tot)
	}
	p.Done(breaker.Failure)
	if m := b.Metrics(); m.Calls != 1 {
		t.Fatalf("a later Done counted again: %+v", m)
	}
	var zero breaker.Permit
	zero.Done(breaker.Failure) // inert
	if n := transitions.Load(); n != 0 {
		t.Fatalf("%d transitions", n)
	}
}

package breaker_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// TestHalfOpenEdgeUnderContention releases thousands of goroutines at once on
// a circuit whose open wait has just passed. HALF_OPEN must admit exactly the
// permitted number, and once those complete the circuit must leave HALF_OPEN.
func TestHalfOpenEdgeUnderContention(t *testing.T) {
	const goroutines, permitted = 2000, 5
	for round := range 20 {
		clk := newClock()
		b := mustNew(t, breaker.Config{
			WindowType: breaker.CountBased, WindowSize: 10, MinimumNumberOfCalls: 5,
			WaitDurationInOpenState: time.Second, PermittedNumberOfCallsInHalfOpenState: permitted, Clock: clk,
		})
		b.Open()
		clk.Advance(time.Second)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var held []breaker.Permit
		for range goroutines {
			wg.Go(func() {
				<-start
				if p, err := b.Allow(); err == nil {
					mu.Lock()
					held = append(held, p)
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		if len(held) != permitted {
			t.Fatalf("round %d: HALF_OPEN admitted %d of %d concurrent calls, want exactly %d", round, len(held), goroutines, permitted)
		}
		outcome := breaker.Success
		want := breaker.Closed
		if round%2 == 1 {
			outcome, want = breaker.Failure, breaker.Open
		}
		for i := range held {
			wg.Go(func() { held[i].Done(outcome) })
		}
		wg.Wait()
		if got := b.State(); got != want {
			t.Fatalf("round %d: after every trial completed with %s the circuit is %s, want %s", round, outcome, got, want)
		}
	}
}

// TestHammerNeverSticksInHalfOpen runs many goroutines through Allow/Done
// while the clock moves and outcomes vary, then checks that the
// circuit's bookkeeping never leaves it stuck: with permits always completed,
// HALF_OPEN is always left once its trials are done.
func TestHammerNeverSticksInHalfOpen(t *testing.T) {
	clk := newClock()
	var transitions atomic.Int64
	b := mustNew(t, breaker.Config{
		WindowType: breaker.TimeBased, WindowSize: 2, MinimumNumberOfCalls: 10, FailureRateThreshold: 30,
		WaitDurationInOpenState: 100 * time.Millisecond, PermittedNumberOfCallsInHalfOpenState: 3, Clock: clk,
		OnEvent: func(e breaker.Event) { transitions.Add(1) },
	})
	var calls sync.WaitGroup
	for g := range 64 {
		calls.Go(func() {
			for i := range 3000 {
				if i%50 == 0 {
					// Time moves with the calls, not with the scheduler, so
					// the edges are crossed however busy the machine is.
					clk.Advance(10 * time.Millisecond)
				}
				p, err := b.Allow()
				if err != nil {
					continue
				}
				switch (g + i) % 7 {
				case 0, 1, 2:
					p.Done(breaker.Failure)
				case 3:
					p.Done(breaker.Ignore)
				default:
					p.Done(breaker.Success)
				}
			}
		})
	}
	calls.Wait()
	// Nothing is in flight now: a HALF_OPEN circuit must still admit a trial.
	if b.State() == breaker.HalfOpen {
		if _, err := b.Allow(); err != nil {
			t.Fatalf("stuck in HALF_OPEN with no call in flight: %v (metrics %+v)", err, b.Metrics())
		}
	}
	if transitions.Load() < 4 {
		t.Fatalf("only %d transitions: the hammer did not exercise the edges", transitions.Load())
	}
	t.Logf("%d transitions under contention", transitions.Load())
}

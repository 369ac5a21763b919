package limit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/limit"
)

// TestAdaptiveOnTheSystemClock: the same behaviour as
// TestAdaptiveFollowsTheCalleesCapacity with real goroutines, real sleeps
// and the system clock: a callee with 10 workers slows from 5 ms to 100 ms
// per call under 60 callers. The limit comes down to at most twice the
// workers while it is slow, without starving them, and rises again once it
// is fast. Every wait is "until, or fail after a minute", never a timing.
func TestAdaptiveOnTheSystemClock(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds")
	}
	a, err := limit.NewAdaptive("account-access", limit.AdaptiveConfig{InitialLimit: 40, MaxLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	workers := make(chan struct{}, 10)
	var service atomic.Int64
	service.Store(int64(5 * time.Millisecond))
	var served atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 60 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := limit.Execute(ctx, a, func(ctx context.Context) (int, error) {
					select {
					case workers <- struct{}{}:
					case <-ctx.Done():
						return 0, ctx.Err()
					}
					defer func() { <-workers }()
					time.Sleep(time.Duration(service.Load()))
					served.Add(1)
					return 0, nil
				})
				if err != nil {
					time.Sleep(5 * time.Millisecond) // a rejected caller comes back a little later
				}
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()

	until := func(what string, ok func(limit.Metrics) bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			m := a.Metrics()
			if ok(m) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after a minute: %+v; want %s", m, what)
			}
		}
	}
	for served.Load() < 500 {
		time.Sleep(10 * time.Millisecond) // the callee's latency without load is learnt at 5 ms
	}
	service.Store(int64(100 * time.Millisecond))
	until("the limit at most twice the 10 workers", func(m limit.Metrics) bool { return m.MaxAllowedConcurrentCalls <= 20 })
	// Held there while the callee stays slow, and not cut to its minimum:
	// over two seconds it serves at least 30 % of what 10 workers can
	// (the minimum limit, 1, would serve 10 %; the bound leaves room for a
	// busy machine and the race detector).
	before := served.Load()
	for range 100 {
		if m := a.Metrics(); m.MaxAllowedConcurrentCalls > 20 {
			t.Fatalf("limit back to %d while the callee is slow", m.MaxAllowedConcurrentCalls)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := served.Load() - before; got < 60 {
		t.Errorf("served %d calls in 2 s at 100 ms with 10 workers, want at least 60 (the limit starved them)", got)
	}
	service.Store(int64(5 * time.Millisecond))
	until("the limit back above the 10 workers", func(m limit.Metrics) bool { return m.MaxAllowedConcurrentCalls > 10 })
}

// TestAdaptiveClosedLoopOnTheSystemClock is TestAdaptiveClosedLoopSettlesNearCapacity
// with real goroutines, sleeps and the system clock: 64 callers in a closed
// loop (a rejected one comes back after 5 ms) through a limit starting at
// 100 to a callee of 8 workers at 20 ms a call, fewer callers than the
// limit, as in issue 55. Once the limit is within twice the workers it
// stays there for the next 1,000 calls served: every change of the limit
// is recorded (OnLimitChanged), so the test waits on calls, never on a
// timing.
func TestAdaptiveClosedLoopOnTheSystemClock(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a few seconds")
	}
	const callers, workers = 64, 8
	var mu sync.Mutex
	var changes []limit.LimitChange
	a, err := limit.NewAdaptive("account-access", limit.AdaptiveConfig{MinLimit: 2, MaxLimit: 200, InitialLimit: 100,
		OnLimitChanged: func(c limit.LimitChange) {
			mu.Lock()
			changes = append(changes, c)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	pool := make(chan struct{}, workers)
	var served atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := limit.Execute(ctx, a, func(ctx context.Context) (int, error) {
					select {
					case pool <- struct{}{}:
					case <-ctx.Done():
						return 0, ctx.Err()
					}
					defer func() { <-pool }()
					time.Sleep(20 * time.Millisecond)
					served.Add(1)
					return 0, nil
				})
				if err != nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()

	for deadline := time.Now().Add(time.Minute); a.Metrics().MaxAllowedConcurrentCalls > 2*workers; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %+v, want the limit at most %d (twice the workers)", a.Metrics(), 2*workers)
		}
	}
	mu.Lock()
	from := len(changes)
	mu.Unlock()
	for until := served.Load() + 1000; served.Load() < until; time.Sleep(10 * time.Millisecond) {
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range changes[from:] {
		if c.To > 2*workers {
			t.Fatalf("the limit went back to %d within 1,000 calls of reaching twice the workers (changes since: %v)", c.To, changes[from:])
		}
	}
	t.Logf("limit %d; changes after it settled: %v", a.Metrics().MaxAllowedConcurrentCalls, changes[from:])
}

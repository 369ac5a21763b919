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

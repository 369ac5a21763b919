package limit_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breaker/manualclock"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// A bulkhead of two: the third call in flight is rejected at once with an
// error that matches ErrLimited, and a permit given back admits the next.
func ExampleBulkhead() {
	b, err := limit.NewBulkhead("account-access", limit.BulkheadConfig{MaxConcurrentCalls: 2})
	if err != nil {
		panic(err)
	}
	b.EnableRejectionCount() // as breakerprom's collector does
	ctx := context.Background()
	first, _ := b.Acquire(ctx)
	second, _ := b.Acquire(ctx)
	_, err = b.Acquire(ctx)
	fmt.Println(errors.Is(err, limit.ErrLimited), err)
	first.Release()
	second.Release()
	m := b.Metrics()
	fmt.Println(m.AvailableConcurrentCalls, "of", m.MaxAllowedConcurrentCalls, "available,", m.Rejected, "rejected")
	// Output:
	// true limit "account-access": 2 calls in flight, no more admitted
	// 2 of 2 available, 1 rejected
}

// With MaxWaitDuration a call beyond the limit waits for a permit, in
// arrival order, rather than failing at once.
func ExampleBulkheadConfig_maxWaitDuration() {
	b, _ := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 1, MaxWaitDuration: time.Second})
	held, _ := b.Acquire(context.Background())
	time.AfterFunc(10*time.Millisecond, held.Release)
	pm, err := b.Acquire(context.Background()) // waits for the release
	fmt.Println(err)
	pm.Release()
	// Output:
	// <nil>
}

// Execute runs a function under a limit and gives its permit back however
// it ends: a result, an error, a canceled caller, a panic.
func ExampleExecute() {
	b, _ := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 10})
	name, err := limit.Execute(context.Background(), b, func(ctx context.Context) (string, error) {
		return "alice", nil // the call to the dependency
	})
	fmt.Println(name, err, b.Metrics().InFlight)
	// Output:
	// alice <nil> 0
}

// An adaptive limit starts at InitialLimit and moves between MinLimit and
// MaxLimit with the callee's latency; Metrics reads where it is.
func ExampleAdaptive() {
	a, err := limit.NewAdaptive("account-access", limit.AdaptiveConfig{InitialLimit: 20, MinLimit: 5, MaxLimit: 100})
	if err != nil {
		panic(err)
	}
	_, err = limit.Execute(context.Background(), a, func(ctx context.Context) (bool, error) {
		return true, nil
	})
	m := a.Metrics()
	fmt.Println(err, m.MaxAllowedConcurrentCalls, m.InFlight, m.Rejected)
	// Output:
	// <nil> 20 0 0
}

// An integration completes a permit with End and the caller's context: a
// caller that canceled drops it (its latency teaches an adaptive limit
// nothing), any other ending releases it.
func ExamplePermit_End() {
	b, _ := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 1})
	ctx, cancel := context.WithCancel(context.Background())
	pm, _ := b.Acquire(ctx)
	cancel() // the caller gave up during the call
	pm.End(ctx)
	fmt.Println(b.Metrics().InFlight)
	// Output:
	// 0
}

// A rejection is one shared *LimitedError per limiter: it names the limit
// and matches ErrLimited.
func ExampleLimitedError() {
	b, _ := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 1})
	held, _ := b.Acquire(context.Background())
	defer held.Release()
	_, err := b.Acquire(context.Background())
	var le *limit.LimitedError
	if errors.As(err, &le) {
		fmt.Println(le.Limiter, le.Limit, errors.Is(err, limit.ErrLimited))
	}
	// Output:
	// account-read 1 true
}

// A Limiter is either kind: code that guards a call site takes the
// interface and is given a Bulkhead or an Adaptive limit.
func ExampleLimiter() {
	guard := func(l limit.Limiter) string {
		v, err := limit.Execute(context.Background(), l, func(ctx context.Context) (string, error) {
			return "served by " + l.Name(), nil
		})
		if err != nil {
			return err.Error()
		}
		return v
	}
	b, _ := limit.NewBulkhead("fixed", limit.BulkheadConfig{})
	a, _ := limit.NewAdaptive("adaptive", limit.AdaptiveConfig{})
	fmt.Println(guard(b))
	fmt.Println(guard(a))
	// Output:
	// served by fixed
	// served by adaptive
}

// Metrics are Resilience4j's bulkhead numbers plus the calls in flight and
// the rejections; an adaptive limit's MaxAllowedConcurrentCalls moves.
func ExampleMetrics() {
	b, _ := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 3})
	pm, _ := b.Acquire(context.Background())
	defer pm.Release()
	m := b.Metrics()
	fmt.Printf("%d in flight, %d of %d available, %d queued, %d rejected\n",
		m.InFlight, m.AvailableConcurrentCalls, m.MaxAllowedConcurrentCalls, m.QueuedCalls, m.Rejected)
	// Output:
	// 1 in flight, 2 of 3 available, 0 queued, 0 rejected
}

// Zero fields take their defaults; Config returns them.
func ExampleAdaptiveConfig() {
	a, _ := limit.NewAdaptive("account-access", limit.AdaptiveConfig{MaxLimit: 50})
	c := a.Config()
	fmt.Println(c.InitialLimit, c.MinLimit, c.MaxLimit, c.WindowSamples)
	// Output:
	// 20 1 50 20
}

// A limit composed by hand inside a circuit, the way failsafe-go composes
// failsafe.With(cb, bulkhead): a rejection matches breaker.ErrNotCalled,
// which the breaker's default classifier ignores, so the limit's
// rejections never open the circuit (one that opens on a single failure
// here), while the callee's own failures still do.
func Example_withABreaker() {
	cb, _ := breaker.New("account-read", breaker.Config{MinimumNumberOfCalls: 1, FailureRateThreshold: 1})
	b, _ := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 1})
	call := func(ctx context.Context, fetch func(context.Context) (string, error)) (string, error) {
		return breaker.Execute(ctx, cb, func(ctx context.Context) (string, error) {
			return limit.Execute(ctx, b, fetch)
		})
	}
	ctx := context.Background()
	held, _ := b.Acquire(ctx) // another call is in flight: the bulkhead is full
	_, err := call(ctx, func(context.Context) (string, error) { return "alice", nil })
	fmt.Println(errors.Is(err, limit.ErrLimited), errors.Is(err, breaker.ErrNotCalled), cb.State())
	held.Release()
	_, err = call(ctx, func(context.Context) (string, error) { return "", errors.New("503") })
	fmt.Println(err, cb.State())
	// Output:
	// true true CLOSED
	// 503 OPEN
}

// One bulkhead, two call sites: a background refresh may wait up to a
// second for a permit, a user's request is rejected at once (failsafe-go's
// AcquirePermitWithMaxWait; WithMaxWait gives Execute and the adapters the
// same choice as a Limiter).
func ExampleBulkhead_AcquireWithMaxWait() {
	b, _ := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 1})
	ctx := context.Background()
	held, _ := b.Acquire(ctx) // a call in flight

	_, err := b.Acquire(ctx) // the user's request: no wait
	fmt.Println("request:", err)
	time.AfterFunc(10*time.Millisecond, held.Release)
	pm, err := b.AcquireWithMaxWait(ctx, time.Second) // the refresh: waits for the release
	fmt.Println("refresh:", err)
	pm.Release()
	// Output:
	// request: limit "account-read": 1 calls in flight, no more admitted
	// refresh: <nil>
}

// WithMaxWait is the bulkhead seen by a call site that may wait: the same
// permits, queue and metrics, another wait.
func ExampleBulkhead_WithMaxWait() {
	b, _ := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 1})
	refresh := b.WithMaxWait(time.Second)
	held, _ := b.Acquire(context.Background())
	time.AfterFunc(10*time.Millisecond, held.Release)
	v, err := limit.Execute(context.Background(), refresh, func(context.Context) (string, error) { return "refreshed", nil })
	fmt.Println(v, err, refresh.Metrics().Rejected)
	// Output:
	// refreshed <nil> 0
}

// SetMaxConcurrentCalls resizes a bulkhead in use: the callers waiting for
// a permit keep their place, and a higher limit admits them at once.
func ExampleBulkhead_SetMaxConcurrentCalls() {
	b, _ := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 1, MaxWaitDuration: time.Minute,
		OnLimitChanged: func(c limit.LimitChange) { fmt.Printf("%s: %d -> %d\n", c.Limiter, c.From, c.To) }})
	ctx := context.Background()
	held, _ := b.Acquire(ctx)
	admitted := make(chan struct{})
	go func() {
		pm, _ := b.Acquire(ctx) // waits: the one permit is taken
		close(admitted)
		pm.Release()
	}()
	for b.Metrics().QueuedCalls == 0 {
		runtime.Gosched()
	}
	if err := b.SetMaxConcurrentCalls(2); err != nil {
		panic(err)
	}
	<-admitted
	held.Release()
	fmt.Println(b.Config().MaxConcurrentCalls, b.SetMaxConcurrentCalls(0))
	// Output:
	// account-read: 1 -> 2
	// 2 breaker config: MaxConcurrentCalls=0: must be in [1, 2^31-1]
}

// OnRejected hears every call a limiter turns away, for a log line or a
// span event (Prometheus already counts them: breakerprom).
func ExampleBulkheadConfig_onRejected() {
	b, _ := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 1,
		OnRejected: func(r limit.Rejection) { fmt.Printf("%s rejected a call at %d in flight\n", r.Limiter, r.Limit) }})
	held, _ := b.Acquire(context.Background())
	defer held.Release()
	_, _ = b.Acquire(context.Background())
	// Output:
	// account-read rejected a call at 1 in flight
}

// OnLimitChanged hears each move of an adaptive limit. Here one caller at a
// time calls a callee that answers in 20 ms: a limit of 10 learns nothing
// above twice the calls in flight, so it comes down to 2, in steps of at
// most half per window of 5 calls (the manual clock stands in for the
// calls' time).
func ExampleAdaptiveConfig_onLimitChanged() {
	clk := manualclock.New(time.Time{})
	a, _ := limit.NewAdaptive("account-access", limit.AdaptiveConfig{Clock: clk, InitialLimit: 10, WindowSamples: 5,
		OnLimitChanged: func(c limit.LimitChange) { fmt.Printf("%d -> %d\n", c.From, c.To) }})
	for range 40 {
		_, _ = limit.Execute(context.Background(), a, func(context.Context) (bool, error) {
			clk.Advance(20 * time.Millisecond) // the call
			return true, nil
		})
	}
	fmt.Println("limit", a.Metrics().MaxAllowedConcurrentCalls)
	// Output:
	// 10 -> 5
	// 5 -> 3
	// 3 -> 2
	// limit 2
}

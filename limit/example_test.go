package limit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tripswitch-dev/tripswitch/limit"
)

// A bulkhead of two: the third call in flight is rejected at once with an
// error that matches ErrLimited, and a permit given back admits the next.
func ExampleBulkhead() {
	b, err := limit.NewBulkhead("account-access", limit.BulkheadConfig{MaxConcurrentCalls: 2})
	if err != nil {
		panic(err)
	}
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

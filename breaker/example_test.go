package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breaker/manualclock"
)

// Protect a call with Execute. After enough failures the circuit opens and
// calls fail fast with ErrOpen, without running the function.
func ExampleExecute() {
	b, err := breaker.New("account-read", breaker.Config{
		WindowType: breaker.CountBased, WindowSize: 10, MinimumNumberOfCalls: 4,
		FailureRateThreshold: 50, WaitDurationInOpenState: 15 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	lookup := func(context.Context) (string, error) { return "", errors.New("account service: 503") }
	for range 4 {
		_, _ = breaker.Execute(context.Background(), b, lookup)
	}
	_, err = breaker.Execute(context.Background(), b, lookup)
	fmt.Println(b.State(), errors.Is(err, breaker.ErrOpen))
	// Output: OPEN true
}

// Integrations (an http.RoundTripper, a gRPC interceptor) use the two-step
// API: Allow before the call, Done with the classified outcome after it. A
// 404 is the caller's problem, not an outage, so it is ignored.
func ExampleBreaker_Allow() {
	b, err := breaker.New("account-access", breaker.Config{})
	if err != nil {
		panic(err)
	}
	permit, err := b.Allow()
	if err != nil {
		fmt.Println("rejected:", err)
		return
	}
	status := 404 // what the call returned
	switch {
	case status >= 500:
		permit.Done(breaker.Failure)
	case status >= 400:
		permit.Done(breaker.Ignore)
	default:
		permit.Done(breaker.Success)
	}
	fmt.Println(b.State(), b.Metrics().Calls)
	// Output: CLOSED 0
}

// One registry, one circuit per call site, shared defaults with per-name
// overrides, and a global kill switch.
func ExampleRegistry() {
	r, err := breaker.NewRegistry(
		breaker.Config{WindowSize: 30, MinimumNumberOfCalls: 10, WaitDurationInOpenState: 15 * time.Second, PermittedNumberOfCallsInHalfOpenState: 3},
		map[string]breaker.Override{"mail-send": func(c *breaker.Config) { c.FailureRateThreshold = 80 }},
	)
	if err != nil {
		panic(err)
	}
	r.Get("account-read").ForceOpen()
	for _, name := range []string{"account-access", "account-read", "mail-send"} {
		b := r.Get(name)
		fmt.Println(name, b.State(), b.Config().FailureRateThreshold)
	}
	r.SetEnabled(false) // CIRCUITBREAKER_ENABLED=false
	fmt.Println(r.Get("account-read").State())
	// Output:
	// account-access CLOSED 50
	// account-read FORCED_OPEN 50
	// mail-send CLOSED 80
	// DISABLED
}

// A context canceled with a cause makes a call return the cause, not
// context.Canceled; CallerCanceled judges the context instead, as Execute
// and the adapters do, so the caller giving up is not counted against the
// callee, while a deadline still is.
func ExampleCallerCanceled() {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("client went away"))
	fmt.Println(breaker.CallerCanceled(ctx), errors.Is(context.Cause(ctx), context.Canceled))

	late, stop := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer stop()
	fmt.Println(breaker.CallerCanceled(late))
	// Output:
	// true false
	// false
}

// Configuration errors name the key by its path and suggest the nearest
// known one; ApplyEnviron does the same for variables under its prefix.
func ExampleParseFile() {
	_, err := breaker.ParseFile([]byte(`{"circuits":{"mail-send":{"failureRateTreshold":80,"waitDurationInOpenState":30}}}`))
	fmt.Println(err)

	var f breaker.File
	err = f.ApplyEnviron("CIRCUITBREAKER", []string{"CIRCUITBREAKER_SLIDING_WINDOW_SIZ=60"})
	fmt.Println(err)
	// Output:
	// breaker config: circuits.mail-send.failureRateTreshold=80: unknown key; did you mean "failureRateThreshold"?
	// breaker config: circuits.mail-send.waitDurationInOpenState=30: must be a duration string with its unit, like "15s" or "500ms" (a bare number is refused: it could mean seconds or milliseconds)
	// breaker config: unknown variable CIRCUITBREAKER_SLIDING_WINDOW_SIZ; did you mean CIRCUITBREAKER_SLIDING_WINDOW_SIZE?
}

// A server that answers 429 or 503 with Retry-After says how long to stay
// away; OpenFor (or OpenUntil, for an HTTP date) opens the circuit for that
// long, never longer than Config.OpenUntilCap. breakerhttp and breakergrpc
// do this when asked to (Transport.RetryAfter, Config.ServerPushback).
func ExampleBreaker_OpenFor() {
	clk := manualclock.New(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	b, err := breaker.New("account-read", breaker.Config{WaitDurationInOpenState: 30 * time.Second, OpenUntilCap: 2 * time.Minute, Clock: clk})
	if err != nil {
		panic(err)
	}
	b.OpenFor(90 * time.Second) // Retry-After: 90
	_, err = b.Allow()
	fmt.Println(err)

	b.Close()
	b.OpenFor(time.Hour) // Retry-After: 3600, cut to the cap
	_, err = b.Allow()
	fmt.Println(err)
	// Output:
	// circuit breaker "account-read" is OPEN until 2026-01-01T12:01:30Z
	// circuit breaker "account-read" is OPEN until 2026-01-01T12:02:00Z
}

// Each consecutive opening waits longer: 10s, 20s, 40s, then the bound. In
// a JSON file the same is enableExponentialBackoff,
// exponentialBackoffMultiplier and exponentialMaxWaitDurationInOpenState.
func ExampleExponentialBackoff() {
	wait := breaker.ExponentialBackoff(10*time.Second, 2, time.Minute)
	fmt.Println(wait(1), wait(2), wait(3), wait(4))

	f, _ := breaker.ParseFile([]byte(`{"defaults":{"waitDurationInOpenState":"10s",
	  "enableExponentialBackoff":true,"exponentialBackoffMultiplier":2,"exponentialMaxWaitDurationInOpenState":"1m"}}`))
	r, _ := f.Registry()
	fromFile := r.Get("account-read").Config().WaitIntervalFunction
	fmt.Println(fromFile(1), fromFile(2), fromFile(3), fromFile(4))
	// Output:
	// 10s 20s 40s 1m0s
	// 10s 20s 40s 1m0s
}

// Update changes a running circuit's settings without losing what its
// window counted, and says when the window had to start empty; Reload does
// the same for a whole configuration file.
func ExampleRegistry_Update() {
	circuits, _ := breaker.NewRegistry(breaker.Config{WindowSize: 10, MinimumNumberOfCalls: 10}, nil)
	read := circuits.Get("account-read")
	for _, o := range []breaker.Outcome{breaker.Success, breaker.Failure, breaker.Failure} {
		p, _ := read.Allow()
		p.Done(o)
	}

	cfg := read.Config()
	cfg.MinimumNumberOfCalls = 3 // judge sooner: the 3 calls it holds count
	kept, _ := circuits.Update("account-read", cfg)
	fmt.Println(kept, read.Metrics().Calls, read.Metrics().FailureRate)

	cfg.WindowSize = 50 // another shape: the window starts empty
	kept, _ = circuits.Update("account-read", cfg)
	fmt.Println(kept, read.Metrics().Calls)
	// Output:
	// true 3 66.66666666666667
	// false 0
}

// New makes one circuit. The zero Config is Resilience4j's defaults; set
// only what differs. An invalid setting is an error that names the field.
func ExampleNew() {
	b, err := breaker.New("account-read", breaker.Config{})
	if err != nil {
		panic(err)
	}
	c := b.Config()
	fmt.Println(b.Name(), b.State(), c.WindowType, c.WindowSize, c.MinimumNumberOfCalls, c.FailureRateThreshold, c.WaitDurationInOpenState, c.PermittedNumberOfCallsInHalfOpenState)

	_, err = breaker.New("account-read", breaker.Config{FailureRateThreshold: 101})
	fmt.Println(err)
	// Output:
	// account-read CLOSED COUNT_BASED 100 100 50 1m0s 10
	// breaker config: FailureRateThreshold=101: must be in (0, 100]
}

// ParseWait reads a server's Retry-After seconds or gRPC pushback
// milliseconds for OpenFor; a wait too long for a Duration saturates, and
// OpenFor's cap then applies.
func ExampleParseWait() {
	d, ok := breaker.ParseWait("120", time.Second)
	fmt.Println(d, ok)
	d, ok = breaker.ParseWait("9223372037", time.Second) // past 2^63 ns
	fmt.Println(d == math.MaxInt64, ok)
	_, ok = breaker.ParseWait("-1", time.Millisecond) // gRPC: do not retry; no wait
	fmt.Println(ok)
	// Output:
	// 2m0s true
	// true true
	// false
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// scenario is the slow dependency's story: healthy, then slow, then
// healthy again, with a closed loop of callers.
type scenario struct {
	Callers int           // callers, each with one call at a time
	Workers int           // what the dependency serves at once
	Fast    time.Duration // its service time while healthy
	Slow    time.Duration // and while slow
	Think   time.Duration // a caller's pause after each answer (±50 %)
	Timeout time.Duration // each call's deadline

	Healthy, SlowFor, Recovered time.Duration // the three phases
	Settle                      time.Duration // from the slowdown to where the in-flight bound is judged
}

// setup is one run's call site: how its client is built, and the limit it
// reports (nil: none).
type setup struct {
	Name  string
	build func(sc scenario, base http.RoundTripper) (*http.Client, func() int, error)
}

// circuit is the breaker of the "+ circuit" runs: Resilience4j's slow-call
// rate (half the calls over 1 s in a 10 s window opens it), 5 s open.
func circuit() (*breaker.Breaker, error) {
	return breaker.New("account", breaker.Config{
		WindowType: breaker.TimeBased, WindowSize: 10, MinimumNumberOfCalls: 20,
		FailureRateThreshold: 50, SlowCallDurationThreshold: time.Second, SlowCallRateThreshold: 50,
		WaitDurationInOpenState: 5 * time.Second, PermittedNumberOfCallsInHalfOpenState: 5,
	})
}

// noCircuit is a DISABLED breaker: it admits every call and records none.
func noCircuit() (*breaker.Breaker, error) {
	b, err := breaker.New("account", breaker.Config{})
	if err == nil {
		b.Disable()
	}
	return b, err
}

func breakerFor(withCircuit bool) (*breaker.Breaker, error) {
	if withCircuit {
		return circuit()
	}
	return noCircuit()
}

// tripswitchSetup runs breakerhttp.Policy with the limit newLimit builds.
func tripswitchSetup(name string, withCircuit bool, newLimit func() (limit.Limiter, error)) setup {
	return setup{Name: name, build: func(sc scenario, base http.RoundTripper) (*http.Client, func() int, error) {
		b, err := breakerFor(withCircuit)
		if err != nil {
			return nil, nil, err
		}
		p := breakerhttp.Policy{Breaker: b, Base: base, Timeout: sc.Timeout}
		var current func() int
		if newLimit != nil {
			l, err := newLimit()
			if err != nil {
				return nil, nil, err
			}
			p.Limit = l
			current = func() int { return l.Metrics().MaxAllowedConcurrentCalls }
		}
		return p.Client(), current, nil
	}}
}

// failsafeSetup runs failsafe-go's adaptive limiter inside the same circuit.
func failsafeSetup(name string, withCircuit bool) setup {
	return setup{Name: name, build: func(sc scenario, base http.RoundTripper) (*http.Client, func() int, error) {
		b, err := breakerFor(withCircuit)
		if err != nil {
			return nil, nil, err
		}
		al := adaptivelimiter.NewBuilder[any]().WithLimits(1, 200, 20).Build()
		rt := &failsafeTransport{limiter: al, next: base}
		p := breakerhttp.Policy{Breaker: b, Base: rt, Timeout: sc.Timeout, Classify: failsafeClassifier}
		return p.Client(), al.Limit, nil
	}}
}

func bulkhead(n int) func() (limit.Limiter, error) {
	return func() (limit.Limiter, error) {
		return limit.NewBulkhead("account", limit.BulkheadConfig{MaxConcurrentCalls: n})
	}
}

func adaptive() (limit.Limiter, error) {
	return limit.NewAdaptive("account", limit.AdaptiveConfig{MinLimit: 1, MaxLimit: 200, InitialLimit: 20})
}

// setups are the runs, in the table's order.
func setups(fixed int) []setup {
	var out []setup
	for _, c := range []bool{false, true} {
		suffix := ""
		if c {
			suffix = " + circuit"
		}
		out = append(out,
			tripswitchSetup("no limit"+suffix, c, nil),
			tripswitchSetup(fmt.Sprintf("bulkhead %d", fixed)+suffix, c, bulkhead(fixed)),
			tripswitchSetup("adaptive (Vegas)"+suffix, c, adaptive),
			failsafeSetup("failsafe-go adaptive"+suffix, c))
	}
	return out
}

type outcome int

const (
	ok outcome = iota
	rejected
	timedOut
	failed
)

type call struct {
	start, took time.Duration // start since the run began
	outcome     outcome
}

type sample struct {
	at       time.Duration
	depPeak  int64
	limit    int // -1: none
	inFlight int64
}

// result is what one run measured.
type result struct {
	name    string
	calls   []call
	samples []sample
}

// runOne runs sc against a fresh dependency with one setup.
func runOne(sc scenario, s setup) (result, error) {
	dep, err := startDependency(sc.Workers, sc.Fast)
	if err != nil {
		return result{}, err
	}
	defer dep.close()
	base := &http.Transport{MaxIdleConns: 4 * sc.Callers, MaxIdleConnsPerHost: 4 * sc.Callers, IdleConnTimeout: time.Minute}
	defer base.CloseIdleConnections()
	client, current, err := s.build(sc, base)
	if err != nil {
		return result{}, err
	}
	total := sc.Healthy + sc.SlowFor + sc.Recovered
	ctx, cancel := context.WithTimeout(context.Background(), total)
	defer cancel()
	begin := time.Now()

	res := result{name: s.Name}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range sc.Callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 47))
			// Spread the first calls over one think time.
			if !pause(ctx, time.Duration(rng.Int64N(int64(sc.Think)))) {
				return
			}
			var mine []call
			for ctx.Err() == nil {
				c := callOnce(ctx, client, dep.url, sc.Timeout, begin)
				if ctx.Err() == nil || c.outcome != failed {
					mine = append(mine, c)
				}
				if !pause(ctx, sc.Think/2+time.Duration(rng.Int64N(int64(sc.Think)))) {
					break
				}
			}
			mu.Lock()
			res.calls = append(res.calls, mine...)
			mu.Unlock()
		})
	}
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		slowed, recovered := false, false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			at := time.Since(begin)
			if !slowed && at >= sc.Healthy {
				dep.service.Store(int64(sc.Slow))
				slowed = true
			}
			if !recovered && at >= sc.Healthy+sc.SlowFor {
				dep.service.Store(int64(sc.Fast))
				recovered = true
			}
			l := -1
			if current != nil {
				l = current()
			}
			res.samples = append(res.samples, sample{at: at, depPeak: dep.samplePeak(), limit: l, inFlight: dep.inFlight.Load()})
		}
	})
	wg.Wait()
	client.CloseIdleConnections()
	slices.SortFunc(res.calls, func(a, b call) int { return int(a.start - b.start) })
	return res, nil
}

// pause waits d, or reports false when ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func callOnce(ctx context.Context, c *http.Client, url string, timeout time.Duration, begin time.Time) call {
	start := time.Now()
	reqCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(reqCtx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	o := ok
	switch {
	case err == nil:
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			o = failed
			if errors.Is(err, context.DeadlineExceeded) {
				o = timedOut
			}
		}
	case errors.Is(err, limit.ErrLimited), errors.Is(err, adaptivelimiter.ErrExceeded), errors.Is(err, breaker.ErrOpen):
		o = rejected
	case errors.Is(err, context.DeadlineExceeded):
		o = timedOut
	default:
		o = failed
	}
	return call{start: start.Sub(begin), took: time.Since(start), outcome: o}
}

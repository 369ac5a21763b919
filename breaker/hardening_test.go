package breaker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

var windowTypes = []breaker.WindowType{breaker.CountBased, breaker.TimeBased}

// Many goroutines each alternate a success and a failure, success first, so
// the true failure rate is never above 50%: a threshold of 50.01% must never
// be reached, however the records interleave. A decision on torn counts (a
// failure counted without its call) opens the circuit.
func TestNoDecisionOnTornCounts(t *testing.T) {
	const goroutines, pairs, rounds = 8, 200, 60
	for _, wt := range windowTypes {
		for _, clock := range []string{"system", "fake"} {
			t.Run(wt.String()+"/"+clock, func(t *testing.T) {
				for round := range rounds {
					cfg := breaker.Config{
						WindowType: wt, WindowSize: goroutines * pairs * 2, // nothing leaves the window
						MinimumNumberOfCalls: 3, FailureRateThreshold: 50.01,
					}
					if wt == breaker.TimeBased {
						cfg.WindowSize = 1000
					}
					if clock == "fake" {
						cfg.Clock = newClock()
					}
					b := mustNew(t, cfg)
					var wg sync.WaitGroup
					for range goroutines {
						wg.Go(func() {
							for range pairs {
								call(b, breaker.Success)
								call(b, breaker.Failure)
							}
						})
					}
					wg.Wait()
					if s := b.State(); s != breaker.Closed {
						t.Fatalf("round %d: %s at a true failure rate of at most 50%% (threshold 50.01%%): %+v", round, s, b.Metrics())
					}
				}
			})
		}
	}
}

// With a minimum of 2 calls and a 50% threshold, one failure and one success
// racing: whichever returns last made the window 1 of 2 failed, so once both
// have returned the circuit is OPEN.
func TestNoMissedOpen(t *testing.T) {
	for _, wt := range windowTypes {
		t.Run(wt.String(), func(t *testing.T) {
			for round := range 2000 {
				b := mustNew(t, breaker.Config{WindowType: wt, WindowSize: 10, MinimumNumberOfCalls: 2, FailureRateThreshold: 50})
				start := make(chan struct{})
				var wg sync.WaitGroup
				for _, o := range []breaker.Outcome{breaker.Failure, breaker.Success} {
					p, err := b.Allow()
					if err != nil {
						t.Fatal(err)
					}
					wg.Go(func() {
						<-start
						p.Done(o)
					})
				}
				close(start)
				wg.Wait()
				if s := b.State(); s != breaker.Open {
					t.Fatalf("round %d: both calls returned, window %+v, state %s, want OPEN", round, b.Metrics(), s)
				}
			}
		})
	}
}

// Every integer is validated against what the implementation can hold, in
// the struct and in a file, with an error naming the field.
func TestIntegersOutOfRangeAreRejected(t *testing.T) {
	for _, v := range []int{1 << 31, 1 << 32, -1} {
		for _, f := range []struct {
			goName, field string
			set           func(*breaker.Config)
		}{
			{"PermittedNumberOfCallsInHalfOpenState", "permittedNumberOfCallsInHalfOpenState", func(c *breaker.Config) { c.PermittedNumberOfCallsInHalfOpenState = v }},
			{"MinimumNumberOfCalls", "minimumNumberOfCalls", func(c *breaker.Config) { c.MinimumNumberOfCalls = v }},
			{"WindowSize", "slidingWindowSize", func(c *breaker.Config) { c.WindowSize = v }},
		} {
			field := f.field
			var c breaker.Config
			f.set(&c)
			_, err := breaker.New("x", c)
			var ce *breaker.ConfigError
			if !errors.As(err, &ce) || ce.Field != f.goName {
				t.Errorf("Config %s=%d: error %v, want a ConfigError naming the Go field %s", f.goName, v, err, f.goName)
			}
			f, err := breaker.ParseFile(fmt.Appendf(nil, `{"circuits":{"a":{%q:%d}}}`, field, v))
			if err == nil {
				_, err = f.Registry()
			}
			if err == nil || !strings.Contains(err.Error(), "circuits.a."+field) {
				t.Errorf("file %s=%d: error %v, want one naming circuits.a.%s", field, v, err, field)
			}
		}
	}
	// The largest valid value works: HALF_OPEN admits trials.
	b := mustNew(t, breaker.Config{PermittedNumberOfCallsInHalfOpenState: math.MaxInt32, WaitDurationInOpenState: time.Nanosecond})
	b.Open()
	time.Sleep(time.Millisecond)
	if !call(b, breaker.Success) {
		t.Fatal("HALF_OPEN with 2^31-1 permits rejected a trial")
	}
}

// An override that sets a field to its zero value is applied, not taken for
// "inherit": in code and in a file.
func TestOverridesToZeroValues(t *testing.T) {
	defaults := breaker.Config{WindowType: breaker.TimeBased, AutomaticTransitionFromOpenToHalfOpen: true, MaxWaitDurationInHalfOpenState: time.Minute}
	r, err := breaker.NewRegistry(defaults, map[string]breaker.Override{"count": func(c *breaker.Config) {
		c.WindowType = breaker.CountBased
		c.AutomaticTransitionFromOpenToHalfOpen = false
		c.MaxWaitDurationInHalfOpenState = 0
	}})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Get("count").Config(); c.WindowType != breaker.CountBased || c.AutomaticTransitionFromOpenToHalfOpen || c.MaxWaitDurationInHalfOpenState != 0 {
		t.Fatalf("struct override lost a zero value: %+v", c)
	}
	if c := r.Get("other").Config(); c.WindowType != breaker.TimeBased || !c.AutomaticTransitionFromOpenToHalfOpen {
		t.Fatalf("defaults lost: %+v", c)
	}
	f, err := breaker.ParseFile([]byte(`{
		"defaults": {"slidingWindowType": "COUNT_BASED", "automaticTransitionFromOpenToHalfOpenEnabled": true},
		"circuits": {"timed": {"slidingWindowType": "TIME_BASED", "automaticTransitionFromOpenToHalfOpenEnabled": false}}}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err = f.Registry()
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Get("timed").Config(); c.WindowType != breaker.TimeBased || c.AutomaticTransitionFromOpenToHalfOpen {
		t.Fatalf("file override lost: %+v", c)
	}
	if c := r.Get("other").Config(); c.WindowType != breaker.CountBased || !c.AutomaticTransitionFromOpenToHalfOpen {
		t.Fatalf("file defaults lost: %+v", c)
	}
}

// The kill switch is idempotent (re-enabling an enabled registry changes no
// circuit) and linearizable (after concurrent calls return, every breaker
// agrees with Enabled).
func TestKillSwitchIdempotentAndLinearizable(t *testing.T) {
	r, err := breaker.NewRegistry(breaker.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Get("open").Open()
	r.Get("forced").ForceOpen()
	r.SetEnabled(true)
	if r.Get("open").State() != breaker.Open || r.Get("forced").State() != breaker.ForcedOpen {
		t.Fatalf("SetEnabled(true) on an enabled registry changed circuits: %s, %s", r.Get("open").State(), r.Get("forced").State())
	}
	r.SetEnabled(false)
	r.SetEnabled(false)
	r.Get("forced").ForceOpen() // an operator's choice while the switch is off
	r.SetEnabled(true)
	if r.Get("open").State() != breaker.Closed || r.Get("forced").State() != breaker.ForcedOpen {
		t.Fatalf("re-enabling: %s, %s; want CLOSED and the forced circuit left alone", r.Get("open").State(), r.Get("forced").State())
	}

	for round := range 2000 {
		r, _ := breaker.NewRegistry(breaker.Config{}, nil)
		for i := range 4 {
			r.Get(fmt.Sprint(i))
		}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() { r.SetEnabled(i%2 == 0) })
			wg.Go(func() { r.Get(fmt.Sprint("new", i)) })
		}
		wg.Wait()
		want := r.Enabled()
		for _, b := range r.All() {
			if (b.State() != breaker.Disabled) != want {
				t.Fatalf("round %d: Enabled()=%v but %s is %s", round, want, b.Name(), b.State())
			}
		}
	}
}

// A panicking consumer neither escapes into the call nor stops the other
// consumers or later events; the panic is logged.
func TestPanickingConsumerIsContained(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	var seen []string
	b := mustNew(t, breaker.Config{
		WindowSize: 4, MinimumNumberOfCalls: 2, Logger: slog.New(slog.NewTextHandler(&logged, nil)),
		OnEvent: func(e breaker.Event) { panic("consumer bug") },
	})
	b.Subscribe(func(e breaker.Event) {
		mu.Lock()
		seen = append(seen, e.Type.String())
		mu.Unlock()
	})
	fail := func(context.Context) (int, error) { return 0, errBoom }
	for range 2 {
		if _, err := breaker.Execute(context.Background(), b, fail); !errors.Is(err, errBoom) {
			t.Fatalf("Execute returned %v, want the call's own error", err)
		}
	}
	if b.State() != breaker.Open {
		t.Fatalf("state %s after the opening call, want OPEN", b.State())
	}
	if _, err := breaker.Execute(context.Background(), b, fail); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("next call: %v, want ErrOpen", err)
	}
	b.Disable()
	if got := strings.Join(seen, ","); got != "FAILURE_RATE_EXCEEDED,STATE_TRANSITION,STATE_TRANSITION" {
		t.Fatalf("the other consumer saw %s", got)
	}
	if !strings.Contains(logged.String(), "consumer bug") || !strings.Contains(logged.String(), "level=ERROR") {
		t.Fatalf("panic not logged: %q", logged.String())
	}
}

// METRICS_ONLY reports each rate once per crossing, both rates.
func TestMetricsOnlyReportsEachCrossingOnce(t *testing.T) {
	clk := newClock()
	var events []breaker.Event
	b := mustNew(t, breaker.Config{
		WindowSize: 4, MinimumNumberOfCalls: 4, FailureRateThreshold: 50,
		SlowCallDurationThreshold: time.Second, SlowCallRateThreshold: 50, Clock: clk,
		OnEvent: func(e breaker.Event) { events = append(events, e) },
	})
	b.MetricsOnly()
	events = nil
	slowFailure := func() {
		p, _ := b.Allow()
		clk.Advance(2 * time.Second)
		p.Done(breaker.Failure)
	}
	for range 10 { // above both thresholds from the 4th call on
		slowFailure()
	}
	for range 4 { // back below both
		call(b, breaker.Success)
	}
	for range 3 { // and above again
		slowFailure()
	}
	var got []string
	for _, e := range events {
		got = append(got, e.Type.String())
	}
	want := "FAILURE_RATE_EXCEEDED,SLOW_CALL_RATE_EXCEEDED,FAILURE_RATE_EXCEEDED,SLOW_CALL_RATE_EXCEEDED"
	if strings.Join(got, ",") != want {
		t.Fatalf("events %v, want %s", got, want)
	}
	if events[0].FailureRate != 100 || events[1].SlowCallRate != 100 || b.State() != breaker.MetricsOnly {
		t.Fatalf("first events %+v %+v, state %s", events[0], events[1], b.State())
	}
}

// METRICS_ONLY on a COUNT_BASED window reports a second crossing that fast
// outcomes between the two took below the threshold: the failures that
// bring the rate back are checked and see it below first (run with -cpu 2
// or more, where a window could count them on per-core budgets).
func TestMetricsOnlyCountWindowReportsSecondCrossing(t *testing.T) {
	for round := range 50 {
		var events []breaker.Event
		b := mustNew(t, breaker.Config{
			WindowSize: 10, MinimumNumberOfCalls: 10, FailureRateThreshold: 50,
			OnEvent: func(e breaker.Event) { events = append(events, e) },
		})
		b.MetricsOnly()
		events = nil
		for _, o := range "FFFFFSSSSF" + "SSSSS" + "FFF" + "F" { // 60 %, 10 %, 40 %, 50 %
			if o == 'F' {
				call(b, breaker.Failure)
			} else {
				call(b, breaker.Success)
			}
		}
		if len(events) != 2 || events[0].Type != breaker.EventFailureRateExceeded || events[1].Type != breaker.EventFailureRateExceeded ||
			events[0].FailureRate != 60 || events[1].FailureRate != 50 {
			t.Fatalf("round %d: events %+v, want FAILURE_RATE_EXCEEDED at 60 %% and at 50 %%", round, events)
		}
	}
}

// The same for the slow-call rate: a fast failure that takes it below the
// threshold is checked, so the slow call that brings it back is a crossing.
func TestMetricsOnlyCountWindowReportsSecondSlowCrossing(t *testing.T) {
	for round := range 50 {
		clk := newClock()
		var events []breaker.Event
		b := mustNew(t, breaker.Config{
			WindowSize: 10, MinimumNumberOfCalls: 10, FailureRateThreshold: 50,
			SlowCallDurationThreshold: time.Second, SlowCallRateThreshold: 50, Clock: clk,
			OnEvent: func(e breaker.Event) { events = append(events, e) },
		})
		b.MetricsOnly()
		events = nil
		slowSuccess := func() {
			p, _ := b.Allow()
			clk.Advance(2 * time.Second)
			p.Done(breaker.Success)
		}
		slowSuccess() // the oldest: the fast failure below evicts it
		for range 4 {
			call(b, breaker.Success)
		}
		for range 4 {
			slowSuccess()
		}
		call(b, breaker.Success) // 50 % slow
		call(b, breaker.Failure) // 40 % slow, 10 % failed
		slowSuccess()            // 50 % slow again
		if len(events) != 2 || events[0].Type != breaker.EventSlowCallRateExceeded || events[1].Type != breaker.EventSlowCallRateExceeded {
			t.Fatalf("round %d: events %+v, want SLOW_CALL_RATE_EXCEEDED twice", round, events)
		}
	}
}

// CLOSED→OPEN carries the rates that opened it, after a rate-exceeded event;
// a manual transition to the current state publishes nothing.
func TestTransitionEvents(t *testing.T) {
	clk := newClock()
	var events []breaker.Event
	b := mustNew(t, breaker.Config{WindowSize: 4, MinimumNumberOfCalls: 4, FailureRateThreshold: 75, Clock: clk,
		OnEvent: func(e breaker.Event) { events = append(events, e) }})
	b.Close()
	if len(events) != 0 {
		t.Fatalf("Close on a CLOSED circuit published %v", events)
	}
	for _, o := range []breaker.Outcome{breaker.Failure, breaker.Success, breaker.Failure, breaker.Failure} {
		call(b, o)
	}
	if len(events) != 2 {
		t.Fatalf("events %+v", events)
	}
	exceeded, opened := events[0], events[1]
	if exceeded.Type != breaker.EventFailureRateExceeded || exceeded.FailureRate != 75 {
		t.Fatalf("first event %+v, want FAILURE_RATE_EXCEEDED at 75%%", exceeded)
	}
	if opened.Type != breaker.EventStateTransition || opened.From != breaker.Closed || opened.To != breaker.Open || opened.FailureRate != 75 || opened.SlowCallRate != 0 {
		t.Fatalf("transition %+v, want CLOSED→OPEN with failure rate 75 and slow-call rate 0", opened)
	}
	events = nil
	b.Open()
	b.ForceOpen()
	b.ForceOpen()
	if len(events) != 1 || events[0].To != breaker.ForcedOpen {
		t.Fatalf("manual transitions published %+v, want only OPEN→FORCED_OPEN", events)
	}
	events = nil
	b.Reset()
	if len(events) != 2 || events[0].To != breaker.Closed || events[1].Type != breaker.EventReset {
		t.Fatalf("Reset published %+v", events)
	}
}

// Consumers subscribe and unsubscribe at runtime, each receiving every event
// in order.
func TestSubscribeAtRuntime(t *testing.T) {
	b := mustNew(t, breaker.Config{})
	var a, c []breaker.State
	unsubA := b.Subscribe(func(e breaker.Event) { a = append(a, e.To) })
	b.Open()
	b.Subscribe(func(e breaker.Event) { c = append(c, e.To) })
	b.ForceOpen()
	unsubA()
	unsubA() // twice is harmless
	b.Disable()
	if fmt.Sprint(a) != "[OPEN FORCED_OPEN]" || fmt.Sprint(c) != "[FORCED_OPEN DISABLED]" {
		t.Fatalf("first consumer %v, second %v", a, c)
	}
}

// The defaults are Resilience4j's, except slow-call tracking (see doc.go).
func TestDefaultsMatchTheDocumentedTable(t *testing.T) {
	c := mustNew(t, breaker.Config{}).Config()
	got := fmt.Sprintf("%v %v %v %v %v %v %v %v %v %v", c.FailureRateThreshold, c.SlowCallRateThreshold, c.SlowCallDurationThreshold,
		c.WindowType, c.WindowSize, c.MinimumNumberOfCalls, c.WaitDurationInOpenState, c.PermittedNumberOfCallsInHalfOpenState,
		c.MaxWaitDurationInHalfOpenState, c.AutomaticTransitionFromOpenToHalfOpen)
	if want := "50 100 0s COUNT_BASED 100 100 1m0s 10 0s false"; got != want {
		t.Fatalf("defaults %s, want %s", got, want)
	}
}

// A call whose context is already done is not admitted: no permit is taken
// and the function does not run.
func TestExecuteWithDoneContext(t *testing.T) {
	clk := newClock()
	b := mustNew(t, breaker.Config{PermittedNumberOfCallsInHalfOpenState: 1, WaitDurationInOpenState: time.Second, Clock: clk})
	b.Open()
	clk.Advance(time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	_, err := breaker.Execute(ctx, b, func(context.Context) (int, error) { ran = true; return 1, nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("err %v, ran %v; want context.Canceled without running", err, ran)
	}
	// The only trial permit is still free.
	if _, err := breaker.Execute(context.Background(), b, func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatalf("trial after a canceled Execute: %v", err)
	}
	if b.State() != breaker.Closed {
		t.Fatalf("state %s after the trial succeeded", b.State())
	}
}

// The coarse clock goroutine that TIME_BASED breakers use stops once no
// breaker reads it, and comes back when one does.
func TestCoarseClockStopsWhenIdle(t *testing.T) {
	running := func() bool {
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "breaker.refreshCoarse")
	}
	waitFor := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); running() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("coarse clock goroutine running=%v after 10s, want %v", !want, want)
			}
		}
	}
	b := mustNew(t, breaker.Config{WindowType: breaker.TimeBased, WindowSize: 10, MinimumNumberOfCalls: 1, FailureRateThreshold: 100})
	call(b, breaker.Success)
	waitFor(true)
	waitFor(false)
	call(b, breaker.Failure) // restarts it, with the right second
	waitFor(true)
	if m := b.Metrics(); m.Calls != 2 || m.FailedCalls != 1 || m.FailureRate != 50 {
		t.Fatalf("after a restart of the clock: %+v", m)
	}
}

// While OPEN, Metrics reports the window that opened it, as Resilience4j's
// open state keeps the metrics of the state before it; after HALF_OPEN
// reopens, the trial calls'.
func TestOpenKeepsTheNumbersThatOpenedIt(t *testing.T) {
	clk := newClock()
	b := mustNew(t, breaker.Config{WindowSize: 10, MinimumNumberOfCalls: 4, PermittedNumberOfCallsInHalfOpenState: 2, Clock: clk})
	call(b, breaker.Success)
	for range 3 {
		call(b, breaker.Failure)
	}
	if m := b.Metrics(); m.State != breaker.Open || m.Calls != 4 || m.FailedCalls != 3 || m.FailureRate != 75 {
		t.Fatalf("OPEN after 3 of 4 failed: %+v, want the window's 4 calls at 75%%", m)
	}
	clk.Advance(time.Minute)
	call(b, breaker.Failure)
	call(b, breaker.Failure)
	if m := b.Metrics(); m.State != breaker.Open || m.Calls != 2 || m.FailedCalls != 2 || m.FailureRate != 100 {
		t.Fatalf("reopened by two failed trials: %+v, want the trials' 2 calls at 100%%", m)
	}
	b.ForceOpen()
	if m := b.Metrics(); m.Calls != 0 || m.FailureRate != -1 {
		t.Fatalf("FORCED_OPEN: %+v, want no numbers", m)
	}
}

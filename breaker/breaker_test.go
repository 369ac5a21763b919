package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breaker/manualclock"
)

func newClock() *manualclock.Clock { return manualclock.New(time.Time{}) }

var errBoom = errors.New("boom")

func mustNew(t testing.TB, cfg breaker.Config) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New("test", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// call admits one call and completes it with o; it reports whether the call was admitted.
func call(b *breaker.Breaker, o breaker.Outcome) bool {
	p, err := b.Allow()
	if err != nil {
		return false
	}
	p.Done(o)
	return true
}

func small(clk *manualclock.Clock, wt breaker.WindowType) breaker.Config {
	return breaker.Config{
		WindowType: wt, WindowSize: 10, MinimumNumberOfCalls: 4, FailureRateThreshold: 50,
		WaitDurationInOpenState: 10 * time.Second, PermittedNumberOfCallsInHalfOpenState: 2, Clock: clk,
	}
}

func TestTransitions(t *testing.T) {
	S, F, I := breaker.Success, breaker.Failure, breaker.Ignore
	type step struct {
		advance  time.Duration
		outcome  breaker.Outcome
		manual   func(*breaker.Breaker)
		admitted bool
		state    string // "" skips the check
	}
	cases := []struct {
		name  string
		cfg   func(*breaker.Config)
		steps []step
	}{
		{"failures below the minimum number of calls do not open", nil, []step{
			{outcome: F, admitted: true, state: "CLOSED"}, {outcome: F, admitted: true, state: "CLOSED"}, {outcome: F, admitted: true, state: "CLOSED"},
		}},
		{"the call that completes the minimum opens at 50% failures", nil, []step{
			{outcome: F, admitted: true, state: "CLOSED"}, {outcome: F, admitted: true, state: "CLOSED"},
			{outcome: S, admitted: true, state: "CLOSED"}, {outcome: S, admitted: true, state: "OPEN"},
		}},
		{"a rate below the threshold stays closed", nil, []step{
			{outcome: F, admitted: true, state: "CLOSED"}, {outcome: S, admitted: true, state: "CLOSED"},
			{outcome: S, admitted: true, state: "CLOSED"}, {outcome: S, admitted: true, state: "CLOSED"},
		}},
		{"ignored outcomes count as neither", nil, []step{
			{outcome: F, admitted: true}, {outcome: I, admitted: true}, {outcome: I, admitted: true}, {outcome: I, admitted: true},
			{outcome: S, admitted: true, state: "CLOSED"}, {outcome: S, admitted: true, state: "CLOSED"},
			{outcome: F, admitted: true, state: "OPEN"},
		}},
		{"open rejects until the wait has passed, then half-open admits the permitted calls", nil, []step{
			{manual: (*breaker.Breaker).Open, state: "OPEN"},
			{advance: 9 * time.Second, outcome: S, admitted: false, state: "OPEN"},
			{advance: time.Second, outcome: S, admitted: true, state: "HALF_OPEN"},
			{outcome: S, admitted: true, state: "CLOSED"},
		}},
		{"a failed trial reopens", nil, []step{
			{manual: (*breaker.Breaker).Open},
			{advance: 10 * time.Second, outcome: F, admitted: true, state: "HALF_OPEN"},
			{outcome: S, admitted: true, state: "OPEN"},
			{outcome: S, admitted: false, state: "OPEN"},
		}},
		{"an ignored trial releases its permit", nil, []step{
			{manual: (*breaker.Breaker).Open},
			{advance: 10 * time.Second, outcome: I, admitted: true, state: "HALF_OPEN"},
			{outcome: I, admitted: true, state: "HALF_OPEN"},
			{outcome: S, admitted: true, state: "HALF_OPEN"},
			{outcome: S, admitted: true, state: "CLOSED"},
		}},
		{"half-open past its max wait reopens", func(c *breaker.Config) { c.MaxWaitDurationInHalfOpenState = 5 * time.Second }, []step{
			{manual: (*breaker.Breaker).Open},
			{advance: 10 * time.Second, outcome: S, admitted: true, state: "HALF_OPEN"},
			{advance: 5 * time.Second, outcome: S, admitted: false, state: "OPEN"},
		}},
		{"automatic transition is visible without a call", func(c *breaker.Config) { c.AutomaticTransitionFromOpenToHalfOpen = true }, []step{
			{manual: (*breaker.Breaker).Open, state: "OPEN"},
			{advance: 10 * time.Second, manual: func(*breaker.Breaker) {}, state: "HALF_OPEN"},
		}},
		{"without automatic transition, State reports OPEN until a call", nil, []step{
			{manual: (*breaker.Breaker).Open, state: "OPEN"},
			{advance: 10 * time.Second, manual: func(*breaker.Breaker) {}, state: "OPEN"},
		}},
		{"backoff lengthens the wait on each consecutive opening", func(c *breaker.Config) {
			c.WaitIntervalFunction = func(n int) time.Duration { return time.Duration(n) * 10 * time.Second }
		}, []step{
			{manual: (*breaker.Breaker).Open},
			{advance: 10 * time.Second, outcome: F, admitted: true, state: "HALF_OPEN"},
			{outcome: F, admitted: true, state: "OPEN"},
			{advance: 19 * time.Second, outcome: S, admitted: false, state: "OPEN"},
			{advance: time.Second, outcome: S, admitted: true, state: "HALF_OPEN"},
		}},
		{"disabled admits and records nothing", nil, []step{
			{manual: (*breaker.Breaker).Disable, state: "DISABLED"},
			{outcome: F, admitted: true}, {outcome: F, admitted: true}, {outcome: F, admitted: true}, {outcome: F, admitted: true, state: "DISABLED"},
		}},
		{"forced open rejects and never moves by itself", nil, []step{
			{manual: (*breaker.Breaker).ForceOpen, state: "FORCED_OPEN"},
			{advance: time.Hour, outcome: S, admitted: false, state: "FORCED_OPEN"},
		}},
		{"metrics only records but never opens", nil, []step{
			{manual: (*breaker.Breaker).MetricsOnly},
			{outcome: F, admitted: true}, {outcome: F, admitted: true}, {outcome: F, admitted: true}, {outcome: F, admitted: true, state: "METRICS_ONLY"},
		}},
		{"reset closes with an empty window", nil, []step{
			{outcome: F, admitted: true}, {outcome: F, admitted: true}, {outcome: F, admitted: true},
			{manual: (*breaker.Breaker).Reset, state: "CLOSED"},
			{outcome: F, admitted: true, state: "CLOSED"},
		}},
	}
	for _, wt := range []breaker.WindowType{breaker.CountBased, breaker.TimeBased} {
		for _, tc := range cases {
			t.Run(wt.String()+"/"+tc.name, func(t *testing.T) {
				clk := newClock()
				cfg := small(clk, wt)
				if tc.cfg != nil {
					tc.cfg(&cfg)
				}
				b := mustNew(t, cfg)
				for i, s := range tc.steps {
					clk.Advance(s.advance)
					if s.manual != nil {
						s.manual(b)
					} else if got := call(b, s.outcome); got != s.admitted {
						t.Fatalf("step %d: admitted = %v, want %v", i, got, s.admitted)
					}
					if got := b.State().String(); s.state != "" && got != s.state {
						t.Fatalf("step %d: state = %s, want %s", i, got, s.state)
					}
				}
			})
		}
	}
}

func TestTimeWindowExpiresWithoutCalls(t *testing.T) {
	clk := newClock()
	b := mustNew(t, small(clk, breaker.TimeBased))
	for range 3 {
		call(b, breaker.Failure)
	}
	clk.Advance(10 * time.Second) // every failure is now outside the 10s window
	for range 3 {
		call(b, breaker.Success)
	}
	if m := b.Metrics(); m.Calls != 3 || m.FailedCalls != 0 {
		t.Fatalf("after the window passed: %+v", m)
	}
	call(b, breaker.Failure) // 1 of 4 failed: 25%
	if b.State() != breaker.Closed {
		t.Fatal("expired failures still counted")
	}
}

func TestStaleResultsDoNotDecide(t *testing.T) {
	clk := newClock()
	b := mustNew(t, small(clk, breaker.CountBased))
	var old []breaker.Permit
	for range 4 {
		p, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, p)
	}
	b.Open()
	clk.Advance(10 * time.Second)
	trial, err := b.Allow() // HALF_OPEN
	if err != nil {
		t.Fatal(err)
	}
	for i := range old {
		old[i].Done(breaker.Failure) // admitted while CLOSED: must not decide HALF_OPEN
	}
	if b.State() != breaker.HalfOpen {
		t.Fatalf("stale failures moved the circuit to %s", b.State())
	}
	trial.Done(breaker.Success)
	trial.Done(breaker.Success) // a second Done on the same permit does nothing
	if m := b.Metrics(); m.Calls != 1 {
		t.Fatalf("half-open counted %d completed trials, want 1", m.Calls)
	}
}

func TestOpenErrorCarriesNameAndRetryAfter(t *testing.T) {
	clk := newClock()
	b, err := breaker.New("account-access", small(clk, breaker.CountBased))
	if err != nil {
		t.Fatal(err)
	}
	b.Open()
	clk.Advance(3 * time.Second)
	_, err = b.Allow()
	var oe *breaker.OpenError
	if !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &oe) || oe.Breaker != "account-access" || oe.RetryAfter(clk.Now()) != 7*time.Second {
		t.Fatalf("Allow on an open circuit: %#v", err)
	}
}

func TestExecute(t *testing.T) {
	clk := newClock()
	b := mustNew(t, small(clk, breaker.CountBased))
	v, err := breaker.Execute(t.Context(), b, func(context.Context) (int, error) { return 7, nil })
	if v != 7 || err != nil {
		t.Fatalf("Execute = %d, %v", v, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for range 10 { // the caller gave up: ignored, never opens
		_, _ = breaker.Execute(ctx, b, func(ctx context.Context) (int, error) { return 0, ctx.Err() })
	}
	if m := b.Metrics(); m.Calls != 1 || b.State() != breaker.Closed {
		t.Fatalf("canceled calls were counted: %+v", m)
	}
	for range 3 {
		_, _ = breaker.Execute(t.Context(), b, func(context.Context) (int, error) { return 0, errBoom })
	}
	if _, err := breaker.Execute(t.Context(), b, func(context.Context) (int, error) { t.Fatal("ran while open"); return 0, nil }); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Execute on an open circuit: %v", err)
	}
}

func TestPanicReleasesPermitAndCountsAsFailure(t *testing.T) {
	clk := newClock()
	b := mustNew(t, small(clk, breaker.CountBased))
	b.Open()
	clk.Advance(10 * time.Second)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic was swallowed")
			}
		}()
		_, _ = breaker.Execute(t.Context(), b, func(context.Context) (int, error) { panic("boom") })
	}()
	if m := b.Metrics(); m.State != breaker.HalfOpen || m.Calls != 1 || m.FailedCalls != 1 {
		t.Fatalf("after a panicking trial: %+v", m)
	}
}

func TestEventsInOrderOutsideLocks(t *testing.T) {
	clk := newClock()
	var got []string
	var b *breaker.Breaker
	cfg := small(clk, breaker.CountBased)
	cfg.OnEvent = func(e breaker.Event) {
		_ = b.State() // calling back in must not deadlock
		if e.Type == breaker.EventStateTransition {
			got = append(got, e.From.String()+">"+e.To.String())
		} else {
			got = append(got, e.Type.String())
		}
	}
	b = mustNew(t, cfg)
	for range 4 {
		call(b, breaker.Failure)
	}
	clk.Advance(10 * time.Second)
	call(b, breaker.Success)
	call(b, breaker.Success)
	b.Disable()
	want := []string{"FAILURE_RATE_EXCEEDED", "CLOSED>OPEN", "OPEN>HALF_OPEN", "HALF_OPEN>CLOSED", "CLOSED>DISABLED"}
	if len(got) != len(want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events = %v, want %v", got, want)
		}
	}
}

func TestMetricsOnlyReportsCrossings(t *testing.T) {
	clk := newClock()
	var events []breaker.Event
	cfg := small(clk, breaker.CountBased)
	cfg.OnEvent = func(e breaker.Event) { events = append(events, e) }
	b := mustNew(t, cfg)
	b.MetricsOnly()
	for range 4 {
		call(b, breaker.Failure)
	}
	last := events[len(events)-1]
	if last.Type != breaker.EventFailureRateExceeded || last.FailureRate != 100 || b.State() != breaker.MetricsOnly {
		t.Fatalf("last event %+v, state %s", last, b.State())
	}
}

func TestSlowCalls(t *testing.T) {
	clk := newClock()
	cfg := small(clk, breaker.CountBased)
	cfg.SlowCallDurationThreshold = time.Second
	cfg.SlowCallRateThreshold = 50
	b := mustNew(t, cfg)
	for range 4 {
		p, _ := b.Allow()
		clk.Advance(2 * time.Second)
		p.Done(breaker.Success)
	}
	if b.State() != breaker.Open {
		t.Fatalf("four slow successes: state %s", b.State())
	}
}

func TestConfigValidation(t *testing.T) {
	cases := map[string]struct {
		cfg   breaker.Config
		field string
	}{
		"failure rate over 100":     {breaker.Config{FailureRateThreshold: 101}, "FailureRateThreshold"},
		"negative failure rate":     {breaker.Config{FailureRateThreshold: -1}, "FailureRateThreshold"},
		"slow rate over 100":        {breaker.Config{SlowCallRateThreshold: 100.5}, "SlowCallRateThreshold"},
		"negative window":           {breaker.Config{WindowSize: -1}, "WindowSize"},
		"negative wait":             {breaker.Config{WaitDurationInOpenState: -time.Second}, "WaitDurationInOpenState"},
		"negative permitted calls":  {breaker.Config{PermittedNumberOfCallsInHalfOpenState: -1}, "PermittedNumberOfCallsInHalfOpenState"},
		"unknown window type":       {breaker.Config{WindowType: 7}, "WindowType"},
		"negative max half-open":    {breaker.Config{MaxWaitDurationInHalfOpenState: -1}, "MaxWaitDurationInHalfOpenState"},
		"negative slow duration":    {breaker.Config{SlowCallDurationThreshold: -1}, "SlowCallDurationThreshold"},
		"negative minimum of calls": {breaker.Config{MinimumNumberOfCalls: -1}, "MinimumNumberOfCalls"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := breaker.New("x", tc.cfg)
			var ce *breaker.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("New = %v, want a ConfigError for %s", err, tc.field)
			}
		})
	}
	b := mustNew(t, breaker.Config{})
	if c := b.Config(); c.FailureRateThreshold != 50 || c.WindowSize != 100 || c.MinimumNumberOfCalls != 100 || c.PermittedNumberOfCallsInHalfOpenState != 10 || c.WaitDurationInOpenState != time.Minute {
		t.Fatalf("defaults = %+v", c)
	}
}

package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breaker/manualclock"
)

func TestOpenUntil(t *testing.T) {
	type want struct {
		state breaker.State
		until time.Duration // after the start; 0: no OpenError expected
		event bool          // a transition was published
	}
	cases := []struct {
		name    string
		prepare func(*breaker.Breaker, *manualclock.Clock)
		open    func(b *breaker.Breaker, start time.Time)
		want    want
	}{
		{"a closed circuit opens for as long as the server says",
			nil, func(b *breaker.Breaker, _ time.Time) { b.OpenFor(30 * time.Second) },
			want{breaker.Open, 30 * time.Second, true}},
		{"never longer than the cap",
			nil, func(b *breaker.Breaker, _ time.Time) { b.OpenFor(24 * time.Hour) },
			want{breaker.Open, 2 * time.Minute, true}},
		{"an HTTP date is measured from now",
			nil, func(b *breaker.Breaker, start time.Time) { b.OpenUntil(start.Add(45 * time.Second).Round(0)) },
			want{breaker.Open, 45 * time.Second, true}},
		{"a time in the past does nothing",
			nil, func(b *breaker.Breaker, start time.Time) { b.OpenUntil(start.Add(-time.Second)) },
			want{breaker.Closed, 0, false}},
		{"an open circuit is extended, without an event",
			func(b *breaker.Breaker, clk *manualclock.Clock) { b.Open() }, func(b *breaker.Breaker, _ time.Time) { b.OpenFor(90 * time.Second) },
			want{breaker.Open, 90 * time.Second, false}},
		{"an open circuit is not shortened",
			func(b *breaker.Breaker, clk *manualclock.Clock) { b.Open() }, func(b *breaker.Breaker, _ time.Time) { b.OpenFor(5 * time.Second) },
			want{breaker.Open, 10 * time.Second, false}},
		{"a half-open circuit opens again",
			func(b *breaker.Breaker, clk *manualclock.Clock) {
				b.Open()
				clk.Advance(10 * time.Second)
				_ = b.State()
			}, func(b *breaker.Breaker, _ time.Time) { b.OpenFor(20 * time.Second) },
			want{breaker.Open, 30 * time.Second, true}},
		{"forced open is a manual state",
			func(b *breaker.Breaker, clk *manualclock.Clock) { b.ForceOpen() }, func(b *breaker.Breaker, _ time.Time) { b.OpenFor(20 * time.Second) },
			want{breaker.ForcedOpen, 0, false}},
		{"disabled is a manual state",
			func(b *breaker.Breaker, clk *manualclock.Clock) { b.Disable() }, func(b *breaker.Breaker, _ time.Time) { b.OpenFor(20 * time.Second) },
			want{breaker.Disabled, 0, false}},
		{"metrics-only is a manual state",
			func(b *breaker.Breaker, clk *manualclock.Clock) { b.MetricsOnly() }, func(b *breaker.Breaker, _ time.Time) { b.OpenFor(20 * time.Second) },
			want{breaker.MetricsOnly, 0, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			cfg := small(clk, breaker.CountBased)
			cfg.OpenUntilCap = 2 * time.Minute
			cfg.AutomaticTransitionFromOpenToHalfOpen = true
			b := mustNew(t, cfg)
			start := clk.Now()
			if tc.prepare != nil {
				tc.prepare(b, clk)
			}
			var events []breaker.Event
			b.Subscribe(func(e breaker.Event) { events = append(events, e) })
			tc.open(b, clk.Now())
			if s := b.State(); s != tc.want.state {
				t.Fatalf("state %s, want %s", s, tc.want.state)
			}
			if (len(events) > 0) != tc.want.event {
				t.Fatalf("events %v, want an event: %v", events, tc.want.event)
			}
			if tc.want.until == 0 {
				return
			}
			_, err := b.Allow()
			var oe *breaker.OpenError
			if !errors.As(err, &oe) || !oe.Until.Equal(start.Add(tc.want.until)) {
				t.Fatalf("Allow: %v, want open until start+%v", err, tc.want.until)
			}
			clk.Advance(start.Add(tc.want.until - time.Nanosecond).Sub(clk.Now()))
			if _, err := b.Allow(); err == nil {
				t.Fatal("admitted before the server's time")
			}
			clk.Advance(time.Nanosecond)
			if p, err := b.Allow(); err != nil || b.State() != breaker.HalfOpen {
				t.Fatalf("at the server's time: %v in %s, want a trial call", err, b.State())
			} else {
				p.Done(breaker.Success)
			}
		})
	}
}

// TestOpenUntilCapDefaultsToTheOpenWait: without a cap a server cannot hold
// the circuit open longer than its own failures would.
func TestOpenUntilCapDefaultsToTheOpenWait(t *testing.T) {
	b := mustNew(t, breaker.Config{WaitDurationInOpenState: 15 * time.Second, Clock: newClock()})
	if c := b.Config().OpenUntilCap; c != 15*time.Second {
		t.Fatalf("OpenUntilCap = %v, want the open wait", c)
	}
	if _, err := breaker.New("x", breaker.Config{OpenUntilCap: -time.Second}); err == nil {
		t.Fatal("a negative cap was accepted")
	}
}

func TestOpenUntilCapFromAFileAndTheEnvironment(t *testing.T) {
	f, err := breaker.ParseFile([]byte(`{"defaults":{"waitDurationInOpenState":"10s","openUntilCap":"5m"},"circuits":{"mail":{"waitDurationInOpenState":"20s","openUntilCap":null}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ApplyEnviron("CB", []string{"CB_OPEN_UNTIL_CAP=3m"}); err != nil {
		t.Fatal(err)
	}
	r, err := f.Registry()
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Get("any").Config().OpenUntilCap; c != 3*time.Minute {
		t.Fatalf("defaults' cap %v, want 3m", c)
	}
	if c := r.Get("mail").Config().OpenUntilCap; c != 3*time.Minute {
		t.Fatalf("mail's cap %v, want the defaults' 3m", c)
	}
}

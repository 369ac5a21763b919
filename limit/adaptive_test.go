package limit_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breaker/manualclock"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// dependency is a callee with a fixed number of workers and a FIFO queue
// in front of them, simulated one millisecond at a time on a manual clock:
// a call takes service once it has a worker, so beyond the workers its
// latency grows with the calls in flight. Each caller (closed loop) calls
// again think after its answer or rejection.
type dependency struct {
	clk      *manualclock.Clock
	l        limit.Limiter
	workers  int
	service  time.Duration
	think    time.Duration
	now      time.Duration
	next     []time.Duration // per caller: when it calls next; -1 while its call is out
	queue    []call
	running  []call
	served   int
	rejected int
}

type call struct {
	pm     *limit.Permit
	caller int
	done   time.Duration
}

func newDependency(l limit.Limiter, clk *manualclock.Clock, callers, workers int) *dependency {
	d := &dependency{clk: clk, l: l, workers: workers, service: 10 * time.Millisecond, think: 100 * time.Millisecond, next: make([]time.Duration, callers)}
	for i := range d.next {
		d.next[i] = time.Duration(i) * time.Millisecond % d.think // spread the first calls
	}
	return d
}

// run advances the simulation by dur and reports the most calls in flight
// at the dependency (queued and served) during it.
func (d *dependency) run(dur time.Duration) (most int) {
	for end := d.now + dur; d.now < end; {
		d.now += time.Millisecond
		d.clk.Advance(time.Millisecond)
		kept := d.running[:0]
		for _, c := range d.running {
			if c.done > d.now {
				kept = append(kept, c)
				continue
			}
			c.pm.Release()
			d.served++
			d.next[c.caller] = d.now + d.think
		}
		d.running = kept
		for len(d.running) < d.workers && len(d.queue) > 0 {
			c := d.queue[0]
			d.queue = d.queue[1:]
			c.done = d.now + d.service
			d.running = append(d.running, c)
		}
		for i, at := range d.next {
			if at < 0 || at > d.now {
				continue
			}
			pm, err := d.l.Acquire(context.Background())
			if err != nil {
				d.rejected++
				d.next[i] = d.now + d.think
				continue
			}
			d.queue = append(d.queue, call{pm: &pm, caller: i})
			d.next[i] = -1
		}
		most = max(most, len(d.queue)+len(d.running))
	}
	return most
}

// TestAdaptiveFollowsTheCalleesCapacity: a callee with 20 workers slows
// from 10 ms to 2 s per call and recovers; 500 callers. The limit comes
// down to at most twice the workers and stays there while the callee is
// slow (after a settling time), keeps the workers busy (goodput within 10 %
// of what 20 workers serve), and is back above its initial limit once the
// callee is fast again. MinLimit and MaxLimit bound it throughout.
func TestAdaptiveFollowsTheCalleesCapacity(t *testing.T) {
	clk := manualclock.New(time.Time{})
	a, err := limit.NewAdaptive("account-access", limit.AdaptiveConfig{Clock: clk, MinLimit: 2, MaxLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	d := newDependency(a, clk, 500, 20)
	d.run(10 * time.Second)
	before := a.Metrics().MaxAllowedConcurrentCalls

	d.service = 2 * time.Second
	d.run(30 * time.Second) // settling
	served := d.served
	most := d.run(60 * time.Second)
	if most > 40 {
		t.Errorf("in flight at the slow callee: up to %d, want at most 2 × 20 workers", most)
	}
	if got, capacity := d.served-served, 60*20/2; got < capacity*9/10 {
		t.Errorf("served %d calls in 60 s at the slow callee, want at least 90 %% of the %d its workers can", got, capacity)
	}
	if m := a.Metrics(); m.MaxAllowedConcurrentCalls < 2 || m.MaxAllowedConcurrentCalls > 100 {
		t.Errorf("limit %d outside [2, 100]", m.MaxAllowedConcurrentCalls)
	}

	d.service = 10 * time.Millisecond
	d.run(5 * time.Second)
	served = d.served
	d.run(5 * time.Second)
	if got, capacity := d.served-served, 5*20*100; got < capacity*9/10 {
		t.Errorf("served %d calls in 5 s once the callee recovered, want at least 90 %% of the %d its workers can", got, capacity)
	}
	if m := a.Metrics(); m.MaxAllowedConcurrentCalls < 20 {
		t.Errorf("limit %d after the callee recovered, want at least its 20 workers (it had %d before)", m.MaxAllowedConcurrentCalls, before)
	}
}

// TestAdaptiveConfigErrorsNameTheField: a bad setting is a
// *breaker.ConfigError naming it, a MinLimit or InitialLimit above the
// default MaxLimit (200) included, rather than a MaxLimit raised to fit;
// zero values take the defaults.
func TestAdaptiveConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		field string
		cfg   limit.AdaptiveConfig
	}{
		{"MinLimit", limit.AdaptiveConfig{MinLimit: -1}},
		{"MaxLimit", limit.AdaptiveConfig{MaxLimit: -1}},
		{"InitialLimit", limit.AdaptiveConfig{MinLimit: 5, MaxLimit: 10, InitialLimit: 11}},
		{"WindowSamples", limit.AdaptiveConfig{WindowSamples: -1}},
		{"MinLimit", limit.AdaptiveConfig{MinLimit: 10, MaxLimit: 5}},
		{"MinLimit", limit.AdaptiveConfig{MinLimit: 300}},
		{"InitialLimit", limit.AdaptiveConfig{InitialLimit: 500}},
	} {
		a, err := limit.NewAdaptive("x", tc.cfg)
		var ce *breaker.ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			var got any = err
			if err == nil {
				got = a.Config()
			}
			t.Errorf("%+v: %v, want a ConfigError naming %s", tc.cfg, got, tc.field)
		}
	}
	a, err := limit.NewAdaptive("x", limit.AdaptiveConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if c := a.Config(); c.InitialLimit != 20 || c.MinLimit != 1 || c.MaxLimit != 200 || c.WindowSamples != 20 {
		t.Errorf("defaults %+v", c)
	}
	a, err = limit.NewAdaptive("x", limit.AdaptiveConfig{MinLimit: 300, MaxLimit: 400})
	if err != nil {
		t.Fatal(err)
	}
	if c := a.Config(); c.InitialLimit != 300 {
		t.Errorf("MinLimit 300, MaxLimit 400: %+v, want InitialLimit 300", c)
	}
}

// TestAdaptiveFollowsAnInjectedClock: everything the limit times follows
// its Clock. While a manual clock stands still, calls fill a window whose
// span cannot pass; they go on until more wall time has passed than any
// span (so that a timer on the system clock would have fired), then the
// clock moves on an hour and the callee serves one call at a time. The
// limit comes down to twice that, as it does without the burst before.
func TestAdaptiveFollowsAnInjectedClock(t *testing.T) {
	clk := manualclock.New(time.Time{})
	a, err := limit.NewAdaptive("account-access", limit.AdaptiveConfig{Clock: clk, MinLimit: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, start := 0, time.Now(); i < 400 || time.Since(start) < 200*time.Millisecond; i++ {
		pm, err := a.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pm.Release()
		runtime.Gosched()
	}
	clk.Advance(time.Hour)
	s := newClosedLoop(1, a, clk, 16, 1, 4*time.Millisecond, 0)
	s.run(20 * time.Second)
	if m := a.Metrics(); m.MaxAllowedConcurrentCalls > 2 {
		t.Fatalf("limit %d after 20 s at a callee that serves one call at a time, want 2 (%+v)", m.MaxAllowedConcurrentCalls, m)
	}
}

package breaker_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// model is a deliberately naive reference: it keeps every recorded outcome
// with its time, recomputes the window from scratch after every call, and
// follows Resilience4j's rules step by step.
type model struct {
	cfg       breaker.Config
	state     breaker.State
	gen       int
	since     time.Time
	openUntil time.Time
	attempt   int
	records   []record
	permits   int
	done      int
	failures  int
}

type record struct {
	at      time.Time
	failure bool
}

func (m *model) to(s breaker.State, now time.Time) {
	prev := m.state
	m.state, m.since, m.gen = s, now, m.gen+1
	m.records, m.permits, m.done, m.failures = nil, 0, 0, 0
	switch s {
	case breaker.Open:
		if prev == breaker.HalfOpen {
			m.attempt++
		} else {
			m.attempt = 1
		}
		m.openUntil = now.Add(m.cfg.WaitDurationInOpenState)
	case breaker.Closed, breaker.Disabled, breaker.ForcedOpen, breaker.MetricsOnly:
		if s == breaker.Closed {
			m.attempt = 0
		}
	}
}

func (m *model) window(now time.Time) (calls, failures int) {
	recs := m.records
	if m.cfg.WindowType == breaker.CountBased && len(recs) > m.cfg.WindowSize {
		recs = recs[len(recs)-m.cfg.WindowSize:]
	}
	for _, r := range recs {
		if m.cfg.WindowType == breaker.TimeBased && r.at.Unix() <= now.Unix()-int64(m.cfg.WindowSize) {
			continue
		}
		calls++
		if r.failure {
			failures++
		}
	}
	return calls, failures
}

func (m *model) stateAt(now time.Time) breaker.State {
	if m.state == breaker.HalfOpen && m.cfg.MaxWaitDurationInHalfOpenState > 0 && now.Sub(m.since) >= m.cfg.MaxWaitDurationInHalfOpenState {
		m.to(breaker.Open, now)
	}
	return m.state
}

// allow returns whether a call is admitted and the generation it belongs to.
func (m *model) allow(now time.Time) (bool, int) {
	switch m.stateAt(now) {
	case breaker.Closed, breaker.MetricsOnly, breaker.Disabled:
		return true, m.gen
	case breaker.Open:
		if now.Before(m.openUntil) {
			return false, 0
		}
		m.to(breaker.HalfOpen, now)
	case breaker.ForcedOpen:
		return false, 0
	}
	if m.stateAt(now) != breaker.HalfOpen || m.permits >= m.cfg.PermittedNumberOfCallsInHalfOpenState {
		return false, 0
	}
	m.permits++
	return true, m.gen
}

func (m *model) complete(gen int, o breaker.Outcome, now time.Time) {
	if gen != m.gen || m.state == breaker.Disabled {
		return
	}
	switch m.state {
	case breaker.Closed, breaker.MetricsOnly:
		if o == breaker.Ignore {
			return
		}
		m.records = append(m.records, record{now, o == breaker.Failure})
		calls, failures := m.window(now)
		if m.state == breaker.Closed && calls >= m.cfg.MinimumNumberOfCalls && float64(failures)*100/float64(calls) >= m.cfg.FailureRateThreshold {
			m.to(breaker.Open, now)
		}
	case breaker.HalfOpen:
		if o == breaker.Ignore {
			m.permits--
			return
		}
		m.done++
		if o == breaker.Failure {
			m.failures++
		}
		if n := m.cfg.PermittedNumberOfCallsInHalfOpenState; m.done == n {
			if float64(m.failures)*100/float64(n) >= m.cfg.FailureRateThreshold {
				m.to(breaker.Open, now)
			} else {
				m.to(breaker.Closed, now)
			}
		}
	}
}

type pending struct {
	permit breaker.Permit
	gen    int
}

// TestAgainstModel drives the breaker and the model with the same random
// sequence of calls, held permits, clock advances and manual transitions and
// compares them after every step.
func TestAgainstModel(t *testing.T) {
	for seed := range uint64(300) {
		for _, wt := range []breaker.WindowType{breaker.CountBased, breaker.TimeBased} {
			if err := runModel(seed, wt); err != nil {
				t.Fatalf("seed %d, %s: %v", seed, wt, err)
			}
		}
	}
}

func runModel(seed uint64, wt breaker.WindowType) error {
	rng := rand.New(rand.NewPCG(seed, 42))
	clk := newClock()
	cfg := breaker.Config{
		WindowType: wt, WindowSize: 1 + rng.IntN(8), MinimumNumberOfCalls: 1 + rng.IntN(6),
		FailureRateThreshold: float64(10 * (1 + rng.IntN(10))), WaitDurationInOpenState: time.Duration(1+rng.IntN(5)) * time.Second,
		PermittedNumberOfCallsInHalfOpenState: 1 + rng.IntN(4), Clock: clk,
	}
	if rng.IntN(2) == 0 {
		cfg.MaxWaitDurationInHalfOpenState = time.Duration(1+rng.IntN(5)) * time.Second
	}
	b, err := breaker.New("model", cfg)
	if err != nil {
		return err
	}
	resolved := b.Config()
	m := &model{cfg: resolved, since: clk.Now()}
	var held []pending
	var trace []string
	outcomes := []breaker.Outcome{breaker.Success, breaker.Failure, breaker.Ignore}
	for step := range 400 {
		now := clk.Now()
		var op string
		switch r := rng.IntN(100); {
		case r < 55: // a call that completes at once
			o := outcomes[rng.IntN(3)]
			p, err := b.Allow()
			ok, gen := m.allow(now)
			if (err == nil) != ok {
				return fmt.Errorf("step %d call: admitted %v, model %v\n%v", step, err == nil, ok, trace)
			}
			if ok {
				p.Done(o)
				m.complete(gen, o, now)
			}
			op = fmt.Sprintf("call %s admitted=%v", o, ok)
		case r < 65: // hold a permit
			p, err := b.Allow()
			ok, gen := m.allow(now)
			if (err == nil) != ok {
				return fmt.Errorf("step %d hold: admitted %v, model %v\n%v", step, err == nil, ok, trace)
			}
			if ok {
				held = append(held, pending{p, gen})
			}
			op = fmt.Sprintf("hold admitted=%v", ok)
		case r < 75 && len(held) > 0: // complete a held permit, perhaps from an old generation
			i := rng.IntN(len(held))
			o := outcomes[rng.IntN(3)]
			held[i].permit.Done(o)
			m.complete(held[i].gen, o, now)
			held = append(held[:i], held[i+1:]...)
			op = fmt.Sprintf("complete held %s", o)
		case r < 93:
			d := time.Duration(rng.IntN(2500)) * time.Millisecond
			clk.Advance(d)
			op = "advance " + d.String()
		default:
			manual := []struct {
				name string
				do   func()
				to   breaker.State
			}{
				{"Open", b.Open, breaker.Open}, {"Close", b.Close, breaker.Closed}, {"Disable", b.Disable, breaker.Disabled},
				{"ForceOpen", b.ForceOpen, breaker.ForcedOpen}, {"MetricsOnly", b.MetricsOnly, breaker.MetricsOnly}, {"Reset", b.Reset, breaker.Closed},
			}[rng.IntN(6)]
			manual.do()
			m.to(manual.to, now)
			op = manual.name
		}
		trace = append(trace, op)
		if len(trace) > 12 {
			trace = trace[1:]
		}
		if got, want := b.State(), m.stateAt(clk.Now()); got != want {
			return fmt.Errorf("step %d after %q: state %s, model %s\nlast ops: %v", step, op, got, want, trace)
		}
		if s := m.stateAt(clk.Now()); s == breaker.Closed || s == breaker.MetricsOnly {
			calls, failures := m.window(clk.Now())
			if got := b.Metrics(); got.Calls != int64(calls) || got.FailedCalls != int64(failures) {
				return fmt.Errorf("step %d after %q: window %d calls / %d failed, model %d / %d\nlast ops: %v", step, op, got.Calls, got.FailedCalls, calls, failures, trace)
			}
		}
	}
	return nil
}

package breaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// ErrOpen is matched (errors.Is) by every rejection of an open circuit.
var ErrOpen = errors.New("circuit breaker is open")

// OpenError is the rejection of a call by an OPEN, FORCED_OPEN or full
// HALF_OPEN circuit. One value is shared by every rejection of a generation,
// so failing fast allocates nothing; treat it as read-only.
type OpenError struct {
	// Breaker is the circuit's name.
	Breaker string
	// State is the state that rejected the call.
	State State
	// Until is when trial calls are allowed again; zero when unknown
	// (FORCED_OPEN, or HALF_OPEN with every permit taken).
	Until time.Time
}

func (e *OpenError) Error() string {
	if !e.Until.IsZero() {
		return fmt.Sprintf("circuit breaker %q is %s until %s", e.Breaker, e.State, e.Until.Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("circuit breaker %q is %s", e.Breaker, e.State)
}

// RetryAfter is how long after now trial calls are allowed again, or 0.
func (e *OpenError) RetryAfter(now time.Time) time.Duration {
	if e.Until.IsZero() || !now.Before(e.Until) {
		return 0
	}
	return e.Until.Sub(now)
}

// Is makes errors.Is(err, ErrOpen) true.
func (e *OpenError) Is(target error) bool { return target == ErrOpen }

// phase is one generation of the circuit: created by each transition and
// never reused, so a permit can tell whether its generation is still current
// by pointer comparison.
type phase struct {
	state     State
	gen       uint64
	since     time.Time
	openUntil time.Time // OPEN: when trial calls are allowed
	untilSec  int64     // openUntil's Unix second, for the coarse check
	rejection *OpenError
	attempt   int          // consecutive openings, for backoff
	window    window       // CLOSED and METRICS_ONLY
	armed     atomic.Bool  // the last evaluation saw failures below the minimum of calls
	evalSec   atomic.Int64 // the second of the last evaluation (TIME_BASED)

	// HALF_OPEN trial accounting.
	permits  atomic.Int32 // taken and not released
	done     atomic.Int32 // completed as success or failure
	failures atomic.Int32
	slow     atomic.Int32
}

// Breaker is one circuit. It is safe for concurrent use.
type Breaker struct {
	name string
	cfg  Config
	// coarse: the clock is the system clock, so TIME_BASED windows may read
	// the process-wide coarse second instead of calling time.Now per call.
	coarse bool
	// timed: slow calls are tracked, so permits carry their start time,
	// measured from base (which keeps the monotonic clock reading).
	timed bool
	base  time.Time

	cur    atomic.Pointer[phase]
	mu     sync.Mutex // serialises transitions
	events eventQueue
}

// New returns a CLOSED breaker, or a *ConfigError naming the invalid field.
func New(name string, cfg Config) (*Breaker, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	_, system := c.Clock.(systemClock)
	b := &Breaker{name: name, cfg: c, coarse: system && c.WindowType == TimeBased,
		timed: c.SlowCallDurationThreshold > 0, base: c.Clock.Now()}
	if b.coarse {
		startCoarse()
	}
	b.cur.Store(b.newPhase(Closed, nil, c.Clock.Now()))
	return b, nil
}

// Name returns the circuit's name.
func (b *Breaker) Name() string { return b.name }

// Config returns the configuration with defaults applied.
func (b *Breaker) Config() Config { return b.cfg }

// State returns the current state. With AutomaticTransitionFromOpenToHalfOpen
// an OPEN circuit whose wait has passed moves to HALF_OPEN here; a HALF_OPEN
// circuit past MaxWaitDurationInHalfOpenState moves back to OPEN.
func (b *Breaker) State() State {
	return b.settle(b.cur.Load(), b.cfg.Clock.Now()).state
}

// settle applies the transitions that time alone causes.
func (b *Breaker) settle(p *phase, now time.Time) *phase {
	switch p.state {
	case Open:
		if b.cfg.AutomaticTransitionFromOpenToHalfOpen && !now.Before(p.openUntil) {
			return b.transition(p, HalfOpen, now)
		}
	case HalfOpen:
		if w := b.cfg.MaxWaitDurationInHalfOpenState; w > 0 && now.Sub(p.since) >= w {
			return b.transition(p, Open, now)
		}
	}
	return p
}

// Permit is admission for one call. Complete it with Done exactly once.
// The zero Permit is inert.
type Permit struct {
	b     *Breaker
	p     *phase
	start time.Duration // since b.base, when slow calls are tracked
}

// Allow admits a call or returns an *OpenError. In CLOSED it is one atomic
// load: no lock, no allocation, no clock.
func (b *Breaker) Allow() (Permit, error) {
	p := b.cur.Load()
	if p.state == Closed && !b.timed {
		return Permit{b: b, p: p}, nil
	}
	return b.allow(p)
}

func (b *Breaker) allow(p *phase) (Permit, error) {
	switch p.state {
	case Closed, MetricsOnly, Disabled:
		return b.permit(p), nil
	case ForcedOpen:
		return Permit{}, p.rejection
	case Open:
		// Well inside the wait, the coarse second decides without a clock read.
		if b.coarse && coarse.sec.Load() < p.untilSec-1 {
			return Permit{}, p.rejection
		}
	}
	now := b.cfg.Clock.Now()
	for {
		switch p.state {
		case Open:
			if now.Before(p.openUntil) {
				return Permit{}, p.rejection
			}
			p = b.transition(p, HalfOpen, now)
		case HalfOpen:
			if q := b.settle(p, now); q != p {
				p = q
				continue
			}
			limit := int32(b.cfg.PermittedNumberOfCallsInHalfOpenState)
			for {
				n := p.permits.Load()
				if n >= limit {
					return Permit{}, p.rejection
				}
				if p.permits.CompareAndSwap(n, n+1) {
					return b.permit(p), nil
				}
			}
		default:
			return b.allow(b.cur.Load())
		}
	}
}

func (b *Breaker) permit(p *phase) Permit {
	pm := Permit{b: b, p: p}
	if b.timed && p.state != Disabled {
		pm.start = b.cfg.Clock.Now().Sub(b.base)
	}
	return pm
}

// Done records the call's outcome. A permit from an earlier generation (the
// circuit changed state since it was admitted) records nothing. Calling Done
// again on the same Permit does nothing.
func (pm *Permit) Done(o Outcome) {
	b, p := pm.b, pm.p
	if b == nil {
		return
	}
	pm.b = nil
	if p.state == Disabled || b.cur.Load() != p {
		return // stale generation: its result must not decide the current state
	}
	if o == Ignore {
		if p.state == HalfOpen {
			p.permits.Add(-1)
		}
		return
	}
	slow := false
	if b.timed {
		slow = b.cfg.Clock.Now().Sub(b.base)-pm.start > b.cfg.SlowCallDurationThreshold
	}
	switch p.state {
	case Closed, MetricsOnly:
		var sec int64 // count windows need no time
		if b.cfg.WindowType == TimeBased {
			sec = b.second()
		}
		p.window.record(sec, o == Failure, slow)
		if o == Failure || slow || p.armed.Load() || (b.cfg.WindowType == TimeBased && p.evalSec.Load() != sec) {
			b.evaluate(p, sec)
		}
	case HalfOpen:
		if o == Failure {
			p.failures.Add(1)
		}
		if slow {
			p.slow.Add(1)
		}
		if p.done.Add(1) == int32(b.cfg.PermittedNumberOfCallsInHalfOpenState) {
			b.decideHalfOpen(p, b.cfg.Clock.Now())
		}
	}
}

// DoneErr classifies err with the breaker's classifier and records it.
func (pm *Permit) DoneErr(err error) {
	if pm.b != nil {
		pm.Done(pm.b.cfg.Classifier(err))
	}
}

// evaluate trips a CLOSED circuit whose rates reached a threshold once the
// window holds the minimum number of calls, as Resilience4j does after every
// call. A success can only lower the rates, so successes skip it except when
// it could still trip: an earlier failure found too few calls ("armed"), or,
// in a time window, a second has passed since the last evaluation and
// expired successes may have raised the rates. Both keep the closed path
// free of aggregation without changing a single decision.
func (b *Breaker) evaluate(p *phase, sec int64) {
	if b.cfg.WindowType == TimeBased {
		p.evalSec.Store(sec)
	}
	c := p.window.snapshot(sec)
	if c.calls < int64(b.cfg.MinimumNumberOfCalls) {
		p.armed.Store(c.failures > 0 || c.slow > 0)
		return
	}
	p.armed.Store(false)
	fr := float64(c.failures) * 100 / float64(c.calls)
	sr := float64(c.slow) * 100 / float64(c.calls)
	failing, slow := fr >= b.cfg.FailureRateThreshold, sr >= b.cfg.SlowCallRateThreshold
	if !failing && !slow {
		return
	}
	now := b.cfg.Clock.Now()
	if p.state == MetricsOnly {
		ev := Event{Breaker: b.name, Type: EventFailureRateExceeded, From: MetricsOnly, To: MetricsOnly, At: now, FailureRate: fr, SlowCallRate: -1}
		if !failing {
			ev.Type, ev.FailureRate, ev.SlowCallRate = EventSlowCallRateExceeded, -1, sr
		}
		b.events.push(ev)
		b.events.drain(b.cfg.OnEvent)
		return
	}
	b.transition(p, Open, now)
}

// decideHalfOpen closes or reopens after the last trial call.
func (b *Breaker) decideHalfOpen(p *phase, now time.Time) {
	n := float64(b.cfg.PermittedNumberOfCallsInHalfOpenState)
	fr := float64(p.failures.Load()) * 100 / n
	sr := float64(p.slow.Load()) * 100 / n
	if fr >= b.cfg.FailureRateThreshold || sr >= b.cfg.SlowCallRateThreshold {
		b.transition(p, Open, now)
		return
	}
	b.transition(p, Closed, now)
}

// transition moves from phase from to state to, unless another goroutine
// already moved on from it; it returns the phase that is current afterwards.
// A nil from forces the transition (manual transitions).
func (b *Breaker) transition(from *phase, to State, now time.Time) *phase {
	b.mu.Lock()
	cur := b.cur.Load()
	if from != nil && cur != from {
		b.mu.Unlock()
		return cur
	}
	next := b.newPhase(to, cur, now)
	b.cur.Store(next)
	b.events.push(Event{Breaker: b.name, Type: EventStateTransition, From: cur.state, To: to, At: now, FailureRate: -1, SlowCallRate: -1})
	b.mu.Unlock()
	b.events.drain(b.cfg.OnEvent)
	return next
}

func (b *Breaker) newPhase(s State, prev *phase, now time.Time) *phase {
	p := &phase{state: s, since: now}
	if prev != nil {
		p.gen = prev.gen + 1
	}
	switch s {
	case Closed, MetricsOnly:
		p.window = newWindow(b.cfg)
		p.evalSec.Store(math.MinInt64)
	case Open:
		p.attempt = 1
		if prev != nil && prev.state == HalfOpen {
			p.attempt = prev.attempt + 1
		}
		p.openUntil = now.Add(b.openWait(p.attempt))
		p.untilSec = p.openUntil.Unix()
		p.rejection = &OpenError{Breaker: b.name, State: Open, Until: p.openUntil}
	case HalfOpen:
		if prev != nil {
			p.attempt = prev.attempt
		}
		p.rejection = &OpenError{Breaker: b.name, State: HalfOpen}
	case ForcedOpen:
		p.rejection = &OpenError{Breaker: b.name, State: ForcedOpen}
	}
	return p
}

func (b *Breaker) openWait(attempt int) time.Duration {
	if f := b.cfg.WaitIntervalFunction; f != nil {
		if d := f(attempt); d > 0 {
			return d
		}
	}
	return b.cfg.WaitDurationInOpenState
}

// Manual transitions. Each starts a new generation, so calls admitted before
// it cannot influence what follows.

// Open opens the circuit, which moves to HALF_OPEN after the open wait.
func (b *Breaker) Open() { b.transition(nil, Open, b.cfg.Clock.Now()) }

// Close closes the circuit with an empty window.
func (b *Breaker) Close() { b.transition(nil, Closed, b.cfg.Clock.Now()) }

// Disable admits everything and records nothing until another manual transition.
func (b *Breaker) Disable() { b.transition(nil, Disabled, b.cfg.Clock.Now()) }

// ForceOpen rejects everything until another manual transition.
func (b *Breaker) ForceOpen() { b.transition(nil, ForcedOpen, b.cfg.Clock.Now()) }

// MetricsOnly records and reports but never transitions by itself.
func (b *Breaker) MetricsOnly() { b.transition(nil, MetricsOnly, b.cfg.Clock.Now()) }

// Reset returns to CLOSED with an empty window and the backoff attempt count
// cleared.
func (b *Breaker) Reset() { b.transition(nil, Closed, b.cfg.Clock.Now()) }

// Metrics is a snapshot of the circuit for dashboards.
type Metrics struct {
	State State
	// Calls, FailedCalls and SlowCalls are in the current window (CLOSED and
	// METRICS_ONLY) or among the completed trial calls (HALF_OPEN).
	Calls, FailedCalls, SlowCalls int64
	// FailureRate and SlowCallRate are percentages, or -1 while the window
	// holds fewer than the minimum number of calls.
	FailureRate, SlowCallRate float64
}

// Metrics reads the circuit's current numbers.
func (b *Breaker) Metrics() Metrics {
	now := b.cfg.Clock.Now()
	p := b.settle(b.cur.Load(), now)
	m := Metrics{State: p.state, FailureRate: -1, SlowCallRate: -1}
	min := int64(b.cfg.MinimumNumberOfCalls)
	switch {
	case p.window != nil:
		c := p.window.snapshot(b.second())
		m.Calls, m.FailedCalls, m.SlowCalls = c.calls, c.failures, c.slow
	case p.state == HalfOpen:
		m.Calls, m.FailedCalls, m.SlowCalls = int64(p.done.Load()), int64(p.failures.Load()), int64(p.slow.Load())
		min = int64(b.cfg.PermittedNumberOfCallsInHalfOpenState)
	}
	if m.Calls > 0 && m.Calls >= min {
		m.FailureRate = float64(m.FailedCalls) * 100 / float64(m.Calls)
		m.SlowCallRate = float64(m.SlowCalls) * 100 / float64(m.Calls)
	}
	return m
}

// Execute runs fn if the circuit admits it and records its outcome. It
// returns the OpenError without calling fn when the circuit rejects the call.
// If the caller's ctx is canceled, context.Canceled is classified Ignore by
// the default classifier. A panic in fn counts as a failure and is re-raised.
func Execute[T any](ctx context.Context, b *Breaker, fn func(context.Context) (T, error)) (T, error) {
	pm, err := b.Allow()
	if err != nil {
		var zero T
		return zero, err
	}
	defer func() {
		if pm.b != nil { // fn panicked before Done
			pm.Done(Failure)
		}
	}()
	v, err := fn(ctx)
	pm.DoneErr(err)
	return v, err
}

// eventQueue delivers events in order, exactly once, outside the breaker's
// state lock: whoever finds the queue idle delivers everything queued,
// including events pushed by others meanwhile.
type eventQueue struct {
	mu         sync.Mutex
	pending    []Event
	delivering bool
}

func (q *eventQueue) push(e Event) {
	q.mu.Lock()
	q.pending = append(q.pending, e)
	q.mu.Unlock()
}

func (q *eventQueue) drain(deliver func(Event)) {
	q.mu.Lock()
	if q.delivering {
		q.mu.Unlock()
		return
	}
	q.delivering = true
	defer func() {
		// Also on a listener's panic, so later events are still delivered.
		q.delivering = false
		q.mu.Unlock()
	}()
	for len(q.pending) > 0 {
		e := q.pending[0]
		q.pending = q.pending[1:]
		q.mu.Unlock()
		if deliver != nil {
			func() {
				defer q.mu.Lock()
				deliver(e)
			}()
		} else {
			q.mu.Lock()
		}
	}
}

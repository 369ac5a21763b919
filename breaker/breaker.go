package breaker

import (
	"context"
	"errors"
	"fmt"
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
	// cfg is the configuration the phase was made under; timed and coarse
	// are derived from it (see Breaker.timed, Breaker.coarse of old). A
	// Registry.Update starts a new phase, so one phase never sees two.
	cfg           *Config
	timed, coarse bool
	state         State
	since         time.Time
	openUntil     time.Time // OPEN: when trial calls are allowed
	untilSec      int64     // openUntil's coarse (monotonic) second, for the fast check
	rejection     *OpenError
	attempt       int    // consecutive openings, for backoff
	window        window // CLOSED and METRICS_ONLY
	opener        *phase // OPEN: the phase whose numbers opened it, for Metrics

	// METRICS_ONLY: whether each rate was at or above its threshold at the
	// last check, so that a crossing is reported once.
	failingSeen, slowSeen atomic.Bool

	// HALF_OPEN trial accounting.
	permits  atomic.Int32 // taken and not released
	done     atomic.Int32 // completed as success or failure
	failures atomic.Int32
	slow     atomic.Int32
}

// Breaker is one circuit. It is safe for concurrent use.
type Breaker struct {
	name string
	// cfg is the configuration the breaker was built with; only its Clock,
	// Logger and OnEvent are used after construction (they never change).
	// The current settings are conf; each phase keeps the ones it was made
	// under.
	cfg  Config
	conf atomic.Pointer[Config]
	// base is when the breaker was built: permits of timed phases carry
	// their start measured from it (which keeps the monotonic reading).
	base time.Time
	// counting: Totals are kept (EnableTotals, or timed by request).
	counting atomic.Bool

	totals totals

	cur       atomic.Pointer[phase]
	mu        sync.Mutex // serialises transitions
	events    eventQueue
	listeners atomic.Pointer[[]*listener]
}

// New returns a CLOSED breaker, or a *ConfigError naming the invalid field.
func New(name string, cfg Config) (*Breaker, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return newBreaker(name, c), nil
}

// newBreaker builds a breaker from a validated, defaulted configuration.
func newBreaker(name string, c Config) *Breaker {
	b := &Breaker{name: name, cfg: c, base: c.Clock.Now()}
	b.conf.Store(&c)
	if c.RecordCallDurations {
		b.counting.Store(true)
	}
	if c.OnEvent != nil {
		b.listeners.Store(&[]*listener{{fn: c.OnEvent}})
	}
	b.cur.Store(b.newPhase(Closed, nil, c.Clock.Now()))
	return b
}

// Name returns the circuit's name.
func (b *Breaker) Name() string { return b.name }

// Config returns the configuration with defaults applied: the one given to
// New, or to the last Registry.Update.
func (b *Breaker) Config() Config { return *b.conf.Load() }

// timed: slow calls are tracked or durations recorded, so permits carry
// their start time.
func timed(c *Config) bool { return c.SlowCallDurationThreshold > 0 || c.RecordCallDurations }

// usesCoarse: the clock is the system clock, so TIME_BASED windows may read the
// process-wide coarse second instead of calling time.Now per call.
func usesCoarse(c *Config) bool {
	_, system := c.Clock.(systemClock)
	return system && c.WindowType == TimeBased
}

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
		if p.cfg.AutomaticTransitionFromOpenToHalfOpen && !now.Before(p.openUntil) {
			return b.transition(p, HalfOpen, now, nil)
		}
	case HalfOpen:
		if w := p.cfg.MaxWaitDurationInHalfOpenState; w > 0 && now.Sub(p.since) >= w {
			return b.transition(p, Open, now, nil)
		}
	}
	return p
}

// Permit is admission for one call. Complete it with Done. Completing is
// idempotent and safe for concurrent use: the first Done (or DoneErr) on a
// Permit records the outcome and every later one does nothing, so a
// response body's Close may race with a timeout. A copy of a Permit is a
// second handle on the same permit that does not share that guard: keep one
// and pass a pointer to it. The zero Permit is inert.
type Permit struct {
	b     *Breaker
	p     *phase
	start time.Duration // since b.base, when slow calls are tracked
	done  uint32        // set by the first Done
}

// Allow admits a call or returns an *OpenError. In CLOSED it is one atomic
// load: no lock, no allocation, no clock.
func (b *Breaker) Allow() (Permit, error) {
	p := b.cur.Load()
	if p.state == Closed && !p.timed {
		return Permit{b: b, p: p}, nil
	}
	return b.allow(p)
}

func (b *Breaker) allow(p *phase) (Permit, error) {
	switch p.state {
	case Closed, MetricsOnly, Disabled:
		return b.permit(p), nil
	case ForcedOpen:
		return b.reject(p)
	case Open:
		// Well inside the wait, the coarse second decides without a clock
		// read. Reading it through coarseSecond keeps its refresher running
		// (or starts it again), so the second never freezes under a caller
		// that waits for the circuit: the wait ends on time whatever else
		// the process does.
		if p.coarse && coarseSecond() < p.untilSec-1 {
			return b.reject(p)
		}
	}
	now := b.cfg.Clock.Now()
	for {
		switch p.state {
		case Open:
			if now.Before(p.openUntil) {
				return b.reject(p)
			}
			p = b.transition(p, HalfOpen, now, nil)
		case HalfOpen:
			if q := b.settle(p, now); q != p {
				p = q
				continue
			}
			limit := int32(p.cfg.PermittedNumberOfCallsInHalfOpenState)
			for {
				n := p.permits.Load()
				if n >= limit {
					return b.reject(p)
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

// reject counts a call that p does not permit and returns p's rejection.
func (b *Breaker) reject(p *phase) (Permit, error) {
	if b.counting.Load() {
		b.totals.notPermitted.Add(1)
	}
	return Permit{}, p.rejection
}

func (b *Breaker) permit(p *phase) Permit {
	var start time.Duration
	if p.timed && p.state != Disabled {
		start = b.cfg.Clock.Now().Sub(b.base)
	}
	return Permit{b: b, p: p, start: start}
}

// Done records the call's outcome. A permit from an earlier generation (the
// circuit changed state since it was admitted) records nothing. Only the
// first Done on a Permit counts.
//
// When Done returns, the outcome has been counted and checked: if it made
// the window's rate reach a threshold, the circuit is OPEN.
func (pm *Permit) Done(o Outcome) {
	b, p := pm.b, pm.p
	if b == nil || !atomic.CompareAndSwapUint32(&pm.done, 0, 1) {
		return
	}
	if p.state == Disabled {
		return
	}
	slow := false
	if p.timed {
		end := b.cfg.Clock.Now().Sub(b.base)
		elapsed := end - pm.start
		if b.counting.Load() {
			b.totals.record(o, elapsed, end)
		}
		slow = p.cfg.SlowCallDurationThreshold > 0 && elapsed > p.cfg.SlowCallDurationThreshold
	} else if b.counting.Load() {
		b.totals.count(o)
	}
	if b.cur.Load() != p {
		return // stale generation: its result must not decide the current state
	}
	switch o {
	case Ignore:
		if p.state == HalfOpen {
			p.permits.Add(-1)
		}
		return
	case Success, Failure:
	default:
		o = Success // an out-of-range outcome counts as a success, as Totals does
	}
	switch p.state {
	case Closed, MetricsOnly:
		var sec int64 // count windows need no time
		if p.cfg.WindowType == TimeBased {
			sec = b.second(p)
		}
		if !slow && (o == Success && p.window.success(sec) || o == Failure && p.window.failure(sec)) {
			return // counted without a check: it cannot bring a rate to its threshold
		}
		b.record(p, sec, o, slow)
	case HalfOpen:
		if o == Failure {
			p.failures.Add(1)
		}
		if slow {
			p.slow.Add(1)
		}
		if p.done.Add(1) == int32(p.cfg.PermittedNumberOfCallsInHalfOpenState) {
			b.decideHalfOpen(p, b.cfg.Clock.Now())
		}
	}
}

// record counts an outcome that needs a check, and checks it.
func (b *Breaker) record(p *phase, sec int64, o Outcome, slow bool) {
	var c counts
	if o == Success && !slow {
		p.window.checkedSuccess(sec, &c)
	} else {
		p.window.record(sec, o == Failure, slow, &c)
	}
	b.check(p, &c)
}

// DoneErr classifies err with the breaker's classifier and records it.
func (pm *Permit) DoneErr(err error) {
	if pm.b != nil && atomic.LoadUint32(&pm.done) == 0 {
		pm.Done(pm.p.cfg.Classifier(err))
	}
}

// percentages are a window's failure and slow-call rates, each -1 while
// fewer than the minimum number of calls were counted for it.
type percentages struct {
	Failure, SlowCall float64
}

func rates(cfg *Config, c *counts) percentages {
	r := percentages{Failure: -1, SlowCall: -1}
	min := max(int64(cfg.MinimumNumberOfCalls), 1)
	if c.calls >= min {
		r.Failure = 0
		if c.failures > 0 {
			r.Failure = float64(c.failures) * 100 / float64(c.calls)
		}
	}
	if c.slowCalls >= min {
		r.SlowCall = 0
		if c.slow > 0 {
			r.SlowCall = float64(c.slow) * 100 / float64(c.slowCalls)
		}
	}
	return r
}

// exceeded reports which thresholds r reaches.
func exceeded(cfg *Config, r percentages) (failing, slow bool) {
	return r.Failure >= cfg.FailureRateThreshold, r.SlowCall >= cfg.SlowCallRateThreshold
}

// check acts on the counts a record returned, which include that record and
// every one before it, as Resilience4j checks after every call: a CLOSED
// circuit whose rate reached a threshold opens; METRICS_ONLY reports each
// rate's crossing once.
func (b *Breaker) check(p *phase, c *counts) {
	if c.failures == 0 && c.slow == 0 && p.state == Closed {
		return // no rate can be above a threshold (both are > 0)
	}
	if p.state == Closed && clearlyBelow(p.cfg, c) {
		return
	}
	r := rates(p.cfg, c)
	failing, slow := exceeded(p.cfg, r)
	if p.state == MetricsOnly {
		b.reportCrossings(p, r, failing, slow)
		return
	}
	if failing || slow {
		b.transition(p, Open, b.cfg.Clock.Now(), &r)
	}
}

// clearlyBelow reports, without dividing, that both rates are below their
// thresholds by more than rounding could move them. It decides nothing
// else: near a threshold, rates and exceeded compare exactly.
func clearlyBelow(cfg *Config, c *counts) bool {
	return belowBy(cfg.FailureRateThreshold, cfg.SlowCallRateThreshold, c)
}

func belowBy(failure, slow float64, c *counts) bool {
	return float64(c.failures)*100 < failure*float64(c.calls)*roundingMargin &&
		float64(c.slow)*100 < slow*float64(c.slowCalls)*roundingMargin
}

// reportCrossings publishes a rate-exceeded event when a rate reaches its
// threshold after having been below it (or below the minimum of calls).
func (b *Breaker) reportCrossings(p *phase, r percentages, failing, slow bool) {
	crossed := func(seen *atomic.Bool, above bool) bool {
		if above {
			return !seen.Load() && seen.CompareAndSwap(false, true)
		}
		if seen.Load() {
			seen.Store(false)
		}
		return false
	}
	f, s := crossed(&p.failingSeen, failing), crossed(&p.slowSeen, slow)
	if !f && !s {
		return
	}
	now := b.cfg.Clock.Now()
	if f {
		b.events.push(Event{Breaker: b.name, Type: EventFailureRateExceeded, From: MetricsOnly, To: MetricsOnly, At: now, FailureRate: r.Failure, SlowCallRate: r.SlowCall})
	}
	if s {
		b.events.push(Event{Breaker: b.name, Type: EventSlowCallRateExceeded, From: MetricsOnly, To: MetricsOnly, At: now, FailureRate: r.Failure, SlowCallRate: r.SlowCall})
	}
	b.drain()
}

// decideHalfOpen closes or reopens after the last trial call.
func (b *Breaker) decideHalfOpen(p *phase, now time.Time) {
	n := float64(p.cfg.PermittedNumberOfCallsInHalfOpenState)
	r := percentages{Failure: float64(p.failures.Load()) * 100 / n, SlowCall: float64(p.slow.Load()) * 100 / n}
	if failing, slow := exceeded(p.cfg, r); failing || slow {
		b.transition(p, Open, now, &r)
		return
	}
	b.transition(p, Closed, now, &r)
}

// transition moves from phase from to state to, unless another goroutine
// already moved on from it; it returns the phase that is current afterwards.
// A nil from forces the transition (manual transitions); a manual transition
// to the current state starts a new generation but publishes nothing, as in
// Resilience4j. r, when known, are the rates that decided the transition:
// they are reported on the event, and an opening they caused is preceded by
// a rate-exceeded event for each rate at or above its threshold.
func (b *Breaker) transition(from *phase, to State, now time.Time, r *percentages) *phase {
	next := b.queue(from, to, now, r)
	b.drain()
	return next
}

// queueTransition makes a manual transition to state to and queues its
// event without delivering it: the caller, which holds a lock of its own,
// calls drain once it has released it.
func (b *Breaker) queueTransition(to State) { b.queue(nil, to, b.cfg.Clock.Now(), nil) }

// queue is transition without the delivery of the events it queues.
func (b *Breaker) queue(from *phase, to State, now time.Time, r *percentages) *phase {
	b.mu.Lock()
	cur := b.cur.Load()
	if from != nil && cur != from {
		b.mu.Unlock()
		return cur
	}
	next := b.newPhase(to, cur, now)
	b.cur.Store(next)
	ev := Event{Breaker: b.name, Type: EventStateTransition, From: cur.state, To: to, At: now, FailureRate: -1, SlowCallRate: -1}
	if r != nil {
		ev.FailureRate, ev.SlowCallRate = r.Failure, r.SlowCall
		if to == Open && cur.state == Closed {
			failing, slow := exceeded(cur.cfg, *r)
			if failing {
				b.events.push(Event{Breaker: b.name, Type: EventFailureRateExceeded, From: cur.state, To: cur.state, At: now, FailureRate: r.Failure, SlowCallRate: r.SlowCall})
			}
			if slow {
				b.events.push(Event{Breaker: b.name, Type: EventSlowCallRateExceeded, From: cur.state, To: cur.state, At: now, FailureRate: r.Failure, SlowCallRate: r.SlowCall})
			}
		}
	}
	if cur.state != to {
		b.events.push(ev)
	}
	b.mu.Unlock()
	return next
}

func (b *Breaker) newPhase(s State, prev *phase, now time.Time) *phase {
	cfg := b.conf.Load()
	p := &phase{cfg: cfg, timed: timed(cfg), coarse: usesCoarse(cfg), state: s, since: now}
	switch s {
	case Closed, MetricsOnly:
		p.window = newWindow(*cfg, s)
	case Open:
		p.attempt = 1
		if prev != nil && prev.state == HalfOpen {
			p.attempt = prev.attempt + 1
		}
		if prev != nil && (prev.window.held() || prev.state == HalfOpen) {
			p.opener = prev
		}
		b.setOpenUntil(p, now.Add(b.openWait(p.attempt)))
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

// OpenUntil opens the circuit until t, as a server asks with Retry-After
// (429, 503) or gRPC's RetryInfo and pushback: trial calls are allowed
// again at t, or after Config.OpenUntilCap from now if that is sooner. A
// CLOSED or HALF_OPEN circuit opens (publishing the transition, counting an
// opening for backoff as a failed trial does); an OPEN one stays open until
// the later of its wait and t, in a new generation; a t that is not in the
// future does nothing. DISABLED, FORCED_OPEN and METRICS_ONLY are manual
// states and are left alone. t may come from a header: only its distance
// from the clock's now is used, so the wait is measured on the monotonic
// clock like every other.
func (b *Breaker) OpenUntil(t time.Time) {
	now := b.cfg.Clock.Now()
	b.openFor(now, t.Sub(now))
}

// OpenFor is OpenUntil(now + d).
func (b *Breaker) OpenFor(d time.Duration) { b.openFor(b.cfg.Clock.Now(), d) }

func (b *Breaker) openFor(now time.Time, d time.Duration) {
	if d <= 0 {
		return
	}
	until := now.Add(min(d, b.conf.Load().OpenUntilCap))
	b.mu.Lock()
	cur := b.cur.Load()
	switch {
	case cur.state == Open && until.After(cur.openUntil):
	case cur.state == Closed || cur.state == HalfOpen:
	default:
		b.mu.Unlock()
		return
	}
	next := b.newPhase(Open, cur, now)
	if cur.state == Open {
		next.attempt, next.opener = cur.attempt, cur.opener
	}
	b.setOpenUntil(next, until)
	b.cur.Store(next)
	if cur.state != Open {
		b.events.push(Event{Breaker: b.name, Type: EventStateTransition, From: cur.state, To: Open, At: now, FailureRate: -1, SlowCallRate: -1})
	}
	b.mu.Unlock()
	b.drain()
}

// setOpenUntil sets when an OPEN phase allows trial calls.
func (b *Breaker) setOpenUntil(p *phase, until time.Time) {
	p.openUntil = until
	if p.coarse {
		p.untilSec = monoSecond(until)
	}
	p.rejection = &OpenError{Breaker: b.name, State: Open, Until: until}
}

func (b *Breaker) openWait(attempt int) time.Duration {
	cfg := b.conf.Load()
	if f := cfg.WaitIntervalFunction; f != nil {
		if d := f(attempt); d > 0 {
			return d
		}
	}
	return cfg.WaitDurationInOpenState
}

// Manual transitions. Each starts a new generation, so calls admitted before
// it cannot influence what follows. A transition to the state the circuit is
// already in publishes no event.

// Open opens the circuit, which moves to HALF_OPEN after the open wait.
func (b *Breaker) Open() { b.transition(nil, Open, b.cfg.Clock.Now(), nil) }

// Close closes the circuit with an empty window.
func (b *Breaker) Close() { b.transition(nil, Closed, b.cfg.Clock.Now(), nil) }

// Disable admits everything and records nothing until another manual transition.
func (b *Breaker) Disable() { b.transition(nil, Disabled, b.cfg.Clock.Now(), nil) }

// ForceOpen rejects everything until another manual transition.
func (b *Breaker) ForceOpen() { b.transition(nil, ForcedOpen, b.cfg.Clock.Now(), nil) }

// MetricsOnly records and reports but never transitions by itself.
func (b *Breaker) MetricsOnly() { b.transition(nil, MetricsOnly, b.cfg.Clock.Now(), nil) }

// Reset returns to CLOSED with an empty window and the backoff attempt count
// cleared, and publishes EventReset (after the transition's event, if the
// circuit was not CLOSED), as Resilience4j's reset does.
func (b *Breaker) Reset() {
	now := b.cfg.Clock.Now()
	b.mu.Lock()
	cur := b.cur.Load()
	b.cur.Store(b.newPhase(Closed, cur, now))
	if cur.state != Closed {
		b.events.push(Event{Breaker: b.name, Type: EventStateTransition, From: cur.state, To: Closed, At: now, FailureRate: -1, SlowCallRate: -1})
	}
	b.events.push(Event{Breaker: b.name, Type: EventReset, From: cur.state, To: Closed, At: now, FailureRate: -1, SlowCallRate: -1})
	b.mu.Unlock()
	b.drain()
}

// update makes c (validated and defaulted) the breaker's configuration,
// keeping its Clock, Logger and OnEvent. A CLOSED or METRICS_ONLY circuit
// goes on in a new generation under c with the window it has, if c's window
// has the same shape, or an empty one; it reports whether the counts were
// kept. Any other state keeps its phase (an OPEN wait, HALF_OPEN's trial
// calls) and c applies from its next transition. Calls admitted before the
// update are of the old generation: their outcomes decide nothing.
func (b *Breaker) update(c Config) bool {
	c.Clock, c.Logger, c.OnEvent = b.cfg.Clock, b.cfg.Logger, b.cfg.OnEvent
	b.mu.Lock()
	defer b.mu.Unlock()
	old, cur := b.conf.Load(), b.cur.Load()
	b.conf.Store(&c)
	if c.RecordCallDurations {
		b.counting.Store(true)
	}
	if !cur.window.held() {
		return true
	}
	next := b.newPhase(cur.state, cur, b.cfg.Clock.Now())
	kept := sameShape(old, &c)
	if kept {
		next.since = cur.since
		next.window = cur.window
		next.window.setLimits(&c)
		next.failingSeen.Store(cur.failingSeen.Load())
		next.slowSeen.Store(cur.slowSeen.Load())
	}
	b.cur.Store(next)
	return kept
}

// enableIfDisabled closes a DISABLED circuit and leaves any other alone: the
// registry's kill switch undoes only what it did.
func (b *Breaker) enableIfDisabled() {
	if p := b.cur.Load(); p.state == Disabled {
		b.transition(p, Closed, b.cfg.Clock.Now(), nil)
	}
}

// Metrics is a snapshot of the circuit for dashboards.
type Metrics struct {
	State State
	// Calls, FailedCalls and SlowCalls are in the current window (CLOSED and
	// METRICS_ONLY) or among the completed trial calls (HALF_OPEN). While
	// OPEN they are those of the window or the trial calls that opened it,
	// as in Resilience4j (a TIME_BASED window still slides).
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
	if p.opener != nil {
		// OPEN reports the numbers that opened it, as Resilience4j's open
		// state keeps the metrics of the state before it: an alert on the
		// failure rate stays on while the circuit is open.
		p = p.opener
	}
	switch {
	case p.window.held():
		var c counts
		p.window.snapshot(b.second(p), &c)
		m.Calls, m.FailedCalls, m.SlowCalls = c.calls, c.failures, c.slow
		r := rates(p.cfg, &c)
		m.FailureRate, m.SlowCallRate = r.Failure, r.SlowCall
	case p.state == HalfOpen:
		m.Calls, m.FailedCalls, m.SlowCalls = int64(p.done.Load()), int64(p.failures.Load()), int64(p.slow.Load())
		if n := int64(p.cfg.PermittedNumberOfCallsInHalfOpenState); m.Calls > 0 && m.Calls >= n {
			m.FailureRate = float64(m.FailedCalls) * 100 / float64(m.Calls)
			m.SlowCallRate = float64(m.SlowCalls) * 100 / float64(m.Calls)
		}
	}
	return m
}

// Execute runs fn if the circuit admits it and records its outcome. It
// returns ctx's error, without taking a permit or calling fn, when ctx is
// already done, and the OpenError without calling fn when the circuit
// rejects the call. A call during which the caller's ctx was canceled is
// ignored whatever fn returned and whatever the classifier says: with
// context.WithCancelCause (and errgroup.WithContext, which cancels the
// siblings with the first error) fn returns the cause, not
// context.Canceled, and the caller giving up is not the callee failing. A
// ctx whose deadline passed is classified as usual: running out of time is
// a failure. A panic in fn counts as a failure and is re-raised.
func Execute[T any](ctx context.Context, b *Breaker, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	pm, err := b.Allow()
	if err != nil {
		return zero, err
	}
	defer pm.Done(Failure) // a no-op after DoneErr; fn panicked otherwise
	v, err := fn(ctx)
	if CallerCanceled(ctx) {
		pm.Done(Ignore) // even with a nil error: the caller gave up
	} else {
		pm.DoneErr(err)
	}
	return v, err
}

// CallerCanceled reports whether ctx was canceled (not timed out): the
// caller gave up on the call, so whatever error the call returned is not
// the callee's failure. It judges the context, not the error, because a
// context canceled with a cause makes net/http and grpc-go return that
// cause instead of context.Canceled. Adapters (breakerhttp, breakergrpc)
// use it on the caller's context after a call.
func CallerCanceled(ctx context.Context) bool {
	return ctx.Err() == context.Canceled
}

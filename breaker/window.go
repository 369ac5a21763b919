package breaker

import (
	"sync"
	"sync/atomic"
)

// counts is what a window holds when a decision is made. Failures are
// counted among calls and slow calls among slowCalls (the same calls: both
// fields are kept so that the rates read alike).
type counts struct {
	calls, failures int64
	slowCalls, slow int64
}

// window is a sliding window of outcomes.
//
// A fast success can only lower a rate once the window holds the minimum
// number of calls, so from then on it is counted without a check: success
// adds it to a counter of the caller's own core and returns true. Before
// that (the success may complete the minimum, and a rate over the threshold
// then opens the circuit) it returns false, and the caller records it with
// checkedSuccess and checks the counts. A fast failure that a time window
// can prove leaves the failure rate below its threshold is counted the same
// way by failure (see timeWindow). Every other outcome goes through record,
// which returns counts that include it and every outcome whose recording
// returned before it began, for the check that follows. snapshot returns the
// counts without recording. Each takes the current Unix second; count
// windows ignore it.
type window struct {
	t *timeWindow
	c *countWindow
}

func newWindow(c Config) window {
	if c.WindowType == CountBased {
		w := &countWindow{pending: newStripes(), ring: make([]uint8, c.WindowSize)}
		w.min.Store(int64(c.MinimumNumberOfCalls))
		return window{c: w}
	}
	return window{t: newTimeWindow(int64(c.WindowSize), limitsOf(&c))}
}

// The methods dispatch on the concrete window so that counts stay on the
// caller's stack (an interface call would move them to the heap).

func (w window) held() bool { return w.t != nil || w.c != nil }

// sameShape reports whether a window made under a can go on counting under
// b: same type and size, and for a time window the same slow-call tracking.
// Everything else (thresholds, the minimum of calls) applies to the counts
// a window holds.
func sameShape(a, b *Config) bool {
	return a.WindowType == b.WindowType && a.WindowSize == b.WindowSize &&
		(a.WindowType == CountBased || (a.SlowCallDurationThreshold > 0) == (b.SlowCallDurationThreshold > 0))
}

// setLimits applies c's minimum of calls and thresholds to the counts the
// window holds: successes are checked again until the window holds the new
// minimum, and a time window takes back the failures it let cores count
// without a check (they were granted under the old thresholds).
func (w window) setLimits(c *Config) {
	if w.t != nil {
		w.t.setLimits(limitsOf(c))
		return
	}
	n := int64(c.MinimumNumberOfCalls)
	w.c.mu.Lock()
	w.c.drain(w.c.pending.sum())
	w.c.min.Store(n)
	w.c.warm.Store(w.c.tot.calls >= n)
	w.c.mu.Unlock()
}

// success counts a fast success that needs no check and reports whether it
// did; if not, the caller records it with checkedSuccess.
func (w window) success(sec int64) bool {
	if w.t != nil {
		return w.t.success(sec)
	}
	return w.c.success()
}

// failure counts a fast failure that needs no check and reports whether it
// did; if not, the caller records it with record. Count windows never do:
// their ring needs each failure's place among the calls.
func (w window) failure(sec int64) bool {
	return w.t != nil && w.t.failure(sec)
}

func (w window) checkedSuccess(sec int64, c *counts) {
	if w.t != nil {
		w.t.checkedSuccess(sec, c)
		return
	}
	w.c.record(sec, false, false, c)
}

func (w window) record(sec int64, failure, slow bool, c *counts) {
	if w.t != nil {
		w.t.record(sec, failure, slow, c)
		return
	}
	w.c.record(sec, failure, slow, c)
}

func (w window) snapshot(sec int64, c *counts) {
	if w.t != nil {
		w.t.snapshot(sec, c)
		return
	}
	w.c.snapshot(sec, c)
}

const (
	outcomeFailure uint8 = 1 << iota
	outcomeSlow
	outcomePresent
)

// countWindow keeps the last len(ring) outcomes and their running totals
// under one mutex, as Resilience4j's fixed-size window does. Fast successes
// wait in per-core counters and enter the ring, before the outcome that
// drains them, when a failure, a slow call or a snapshot takes the mutex:
// the successes are all alike, so the ring is the same as if each had taken
// the mutex itself, and the closed path writes no shared line. Until the
// ring holds the minimum number of calls (after which it never holds fewer)
// successes take the mutex and are checked like any other outcome.
//
// Failures do not get the time window's per-core budgets, and cannot
// without a shared write: a budget proves that the failure rate stays below
// its threshold now, but the ring's later rates depend on where each
// failure sits among the calls (which outcome the N-th next call evicts),
// and failures waiting on several cores have no order among themselves or
// with the successes beside them that a later drain could recover. A
// goroutine that failed on one core and succeeded on another (it moved, or
// handed work to another goroutine) must find its failure older in the
// ring; only a write every core sees, per failure, records that.
type countWindow struct {
	pending stripes // cumulative fast successes
	min     atomic.Int64
	warm    atomic.Bool // the ring holds at least min calls
	_       [cacheLine]byte

	mu       sync.Mutex
	consumed uint64 // successes of pending already in the ring
	ring     []uint8
	pos      int
	tot      counts
}

func (w *countWindow) success() bool {
	if !w.warm.Load() {
		return false
	}
	w.pending.add()
	return true
}

func (w *countWindow) record(_ int64, failure, slow bool, c *counts) {
	o := outcomePresent
	if failure {
		o |= outcomeFailure
	}
	if slow {
		o |= outcomeSlow
	}
	// The successes are summed before the mutex is taken, so that the lock
	// is not held across every core's line: the sum already holds every
	// success that returned before this call began, and those added since
	// are concurrent with it, so entering the ring after it is an order
	// they could have had.
	pending := w.pending.sum()
	w.mu.Lock()
	w.drain(pending)
	w.push(o)
	*c = w.tot
	if c.calls >= w.min.Load() && !w.warm.Load() {
		w.warm.Store(true)
	}
	w.mu.Unlock()
}

func (w *countWindow) snapshot(_ int64, c *counts) {
	pending := w.pending.sum()
	w.mu.Lock()
	w.drain(pending)
	*c = w.tot
	w.mu.Unlock()
}

// drain moves the pending successes, up to a sum of them read by the
// caller, into the ring. A sum below what an earlier holder of the mutex
// moved adds nothing: those successes are already in. Past a full ring of
// them the ring is all successes, whatever it held.
func (w *countWindow) drain(total uint64) {
	if total <= w.consumed {
		return
	}
	k := total - w.consumed
	w.consumed = total
	if k >= uint64(len(w.ring)) {
		for i := range w.ring {
			w.ring[i] = outcomePresent
		}
		n := int64(len(w.ring))
		w.tot = counts{calls: n, slowCalls: n}
		return
	}
	for ; k > 0; k-- {
		w.push(outcomePresent)
	}
}

func (w *countWindow) push(o uint8) {
	w.tot.add(w.ring[w.pos], -1)
	w.ring[w.pos] = o
	w.tot.add(o, 1)
	if w.pos++; w.pos == len(w.ring) {
		w.pos = 0
	}
}

func (c *counts) add(o uint8, d int64) {
	if o&outcomePresent == 0 {
		return
	}
	c.calls += d
	c.slowCalls += d
	if o&outcomeFailure != 0 {
		c.failures += d
	}
	if o&outcomeSlow != 0 {
		c.slow += d
	}
}

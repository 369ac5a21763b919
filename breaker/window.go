package breaker

import (
	"sync"
	"sync/atomic"
)

// counts is what a window holds when a decision is made. Failures are
// counted among calls; slow among slowCalls, which counts the same calls
// but may be read a few in-flight calls apart (see timeWindow).
type counts struct {
	calls, failures int64
	slowCalls, slow int64

	// lower: the successes in calls and slowCalls are a lower bound (a
	// recent reading, not the current total). A rate computed from such
	// counts is an upper bound: below a threshold it is truly below; at or
	// above it, or below the minimum of calls, exact must decide.
	lower bool
	// For exact: the calls of the window that are not fast successes, and
	// the reading of the successes at the window's start.
	badCalls, badSlowCalls int64
	goodBase               uint64
}

// window is a sliding window of outcomes.
//
// A fast success can only lower a rate once the window holds the minimum
// number of calls, so from then on it is counted without a check: success
// adds it to a counter of the caller's own core and returns false. Before
// that (the success may complete the minimum, and a rate over the threshold
// then opens the circuit) it returns the counts and true, and the caller
// checks them. Every other outcome (a failure, a slow call) goes through
// record, which returns counts that include it and every outcome whose
// recording returned before it began, for the check that follows. snapshot
// returns the counts without recording. Each takes the current Unix second;
// count windows ignore it.
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
	return window{t: newTimeWindow(int64(c.WindowSize), int64(c.MinimumNumberOfCalls), c.SlowCallDurationThreshold > 0)}
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

// setMin changes the minimum number of calls; successes are checked again
// until the window holds the new minimum.
func (w window) setMin(n int64) {
	if w.t != nil {
		w.t.min.Store(n)
		w.t.safeUntil.Store(minSecond)
		return
	}
	w.c.mu.Lock()
	w.c.drain()
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

func (w window) exact(c *counts) {
	if w.t != nil {
		w.t.exact(c)
	}
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
	w.mu.Lock()
	w.drain()
	w.push(o)
	*c = w.tot
	if c.calls >= w.min.Load() && !w.warm.Load() {
		w.warm.Store(true)
	}
	w.mu.Unlock()
}

func (w *countWindow) snapshot(_ int64, c *counts) {
	w.mu.Lock()
	w.drain()
	*c = w.tot
	w.mu.Unlock()
}

// drain moves the pending successes into the ring. Past a full ring of
// them the ring is all successes, whatever it held.
func (w *countWindow) drain() {
	total := w.pending.sum()
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

// A tally packs two cumulative counters into one word so that a single
// atomic add counts a call and, with it, whether it failed (or was slow):
// calls in the high 32 bits, the kind in the low 31. Bit 31 takes the low
// counter's carry when it wraps, and is cleared by whoever sees it, so a
// wrap never leaks into the calls. Differences are taken modulo each field,
// so a window is exact while it holds fewer than 2^31 such calls.
const (
	tallyCall  = 1 << 32
	tallyKind  = 1<<31 - 1
	tallyCarry = 1 << 31
)

// tallyDiff is the calls and kind counted between two readings of a tally.
func tallyDiff(now, then uint64) (calls, kind int64) {
	calls = int64(uint32(now>>32 - then>>32))
	kind = int64((now&tallyKind - then&tallyKind) & tallyKind)
	return calls, kind
}

// add adds d to a tally and clears the carry bit it may have set.
func add(t *atomic.Uint64, d uint64) uint64 {
	v := t.Add(d)
	if v&tallyCarry != 0 {
		t.And(^uint64(tallyCarry))
	}
	return v
}

// timeWindow counts the outcomes of the last size seconds.
//
// Fast successes go to per-core cumulative counters (good). Every other
// outcome is one atomic add to a cumulative tally of calls and failures
// (fail), and with slow-call tracking to a second one of calls and slow
// calls (slow). The window's counts are each total now minus its reading at
// the start of the oldest second in the window (the base). A failure's add
// returns the tally including it and every earlier failure, so a failure is
// never counted without its call.
//
// The check after a failure needs the successes too. Summing every core's
// counter is the one expensive read, so it first uses goodSeen, a recent
// reading of that sum: successes only grow, so a rate computed with it is
// an upper bound, and when that is below the threshold so is the rate. Only
// a failure whose bound reaches a threshold (or the minimum of calls) sums
// the counters; each sum refreshes goodSeen.
//
// A success needs a check after a roll, since the outcomes that left the
// window may have raised a rate (Resilience4j checks after every call), and
// while the window holds fewer than the minimum number of calls. safeUntil
// is the second up to which neither can be: set by a checked success that
// found the minimum, reset by every roll. Up to it a success is one add.
//
// Readings are taken by the first call of each second, under a mutex, and
// kept only for seconds that had calls: memory is bounded by the window's
// active seconds and no call ever walks the window.
type timeWindow struct {
	size      int64
	min       atomic.Int64
	trackSlow bool
	good      stripes
	head      atomic.Int64 // the newest second with a reading
	safeUntil atomic.Int64

	_        [cacheLine]byte
	base     atomic.Pointer[mark] // a copy of the oldest reading, per roll
	goodSeen atomic.Uint64

	_          [cacheLine]byte
	fail, slow atomic.Uint64 // tallies of the outcomes that are not fast successes
	_          [cacheLine]byte

	mu       sync.Mutex // serialises rolls
	marks    []mark     // ring of readings, oldest at first
	first, n int
}

// mark is the counters' reading at the start of second sec.
type mark struct {
	sec              int64
	fail, slow, good uint64
}

func newTimeWindow(seconds, minCalls int64, trackSlow bool) *timeWindow {
	w := &timeWindow{size: seconds, trackSlow: trackSlow, good: newStripes(), marks: make([]mark, min(seconds, 8))}
	w.min.Store(minCalls)
	w.head.Store(minSecond)
	w.safeUntil.Store(minSecond)
	w.base.Store(&mark{})
	return w
}

// minSecond is before any second a clock reports.
const minSecond = -1 << 62

func (w *timeWindow) success(sec int64) bool {
	// safeUntil is never past head, so a safe second needs no roll.
	if sec > w.safeUntil.Load() {
		if sec > w.head.Load() {
			w.roll(sec)
		}
		return false
	}
	w.good.add()
	return true
}

func (w *timeWindow) checkedSuccess(sec int64, c *counts) {
	w.good.add()
	w.snapshot(sec, c)
	if c.calls >= w.min.Load() {
		// Until the next roll only calls are added: no success can raise a
		// rate. (A roll that raced this resets safeUntil after its own
		// second, which is past sec.)
		w.safeUntil.Store(sec)
	}
}

func (w *timeWindow) record(sec int64, failure, slow bool, c *counts) {
	if sec > w.head.Load() {
		w.roll(sec)
	}
	// The base is read before the add, so it is an earlier reading of the
	// same tally: the difference can only count too much of the oldest
	// second (by the time a roll takes), never go negative.
	base := w.base.Load()
	d := uint64(tallyCall)
	if failure {
		d++
	}
	c.badCalls, c.failures = tallyDiff(add(&w.fail, d), base.fail)
	if w.trackSlow {
		d := uint64(tallyCall)
		if slow {
			d++
		}
		c.badSlowCalls, c.slow = tallyDiff(add(&w.slow, d), base.slow)
	}
	var good int64
	if seen := w.goodSeen.Load(); seen > base.good {
		good = int64(seen - base.good)
	}
	c.lower, c.goodBase = true, base.good
	w.complete(c, good)
}

// complete fills in the calls from the bad outcomes and good successes.
func (w *timeWindow) complete(c *counts, good int64) {
	c.calls = c.badCalls + good
	c.slowCalls = c.calls
	if w.trackSlow {
		c.slowCalls = c.badSlowCalls + good
	}
}

// exact replaces the lower bound of successes in c with their sum now.
func (w *timeWindow) exact(c *counts) {
	if !c.lower {
		return
	}
	total := w.sawGood()
	c.lower = false
	w.complete(c, int64(total-c.goodBase))
}

// sawGood sums the successes and keeps the largest sum seen.
func (w *timeWindow) sawGood() uint64 {
	total := w.good.sum()
	for {
		seen := w.goodSeen.Load()
		if seen >= total || w.goodSeen.CompareAndSwap(seen, total) {
			return total
		}
	}
}

func (w *timeWindow) snapshot(sec int64, c *counts) {
	if sec > w.head.Load() {
		w.roll(sec)
	}
	base := w.base.Load()
	*c = counts{lower: true, goodBase: base.good}
	c.badCalls, c.failures = tallyDiff(w.fail.Load(), base.fail)
	if w.trackSlow {
		c.badSlowCalls, c.slow = tallyDiff(w.slow.Load(), base.slow)
	}
	w.exact(c)
}

// roll starts second sec: it takes the counters' reading, drops the
// readings that left the window, and publishes the oldest one left as the
// base. The oldest reading kept is for the first second with calls inside
// the window; no call came between the window's start and that second, so
// its reading is the window's start.
func (w *timeWindow) roll(sec int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sec <= w.head.Load() {
		return
	}
	w.push(mark{sec: sec, fail: w.fail.Load(), slow: w.slow.Load(), good: w.sawGood()})
	for w.marks[w.first].sec <= sec-w.size {
		w.first = (w.first + 1) % len(w.marks)
		w.n--
	}
	oldest := w.marks[w.first]
	w.base.Store(&oldest)
	// The outcomes that left may have raised a rate: the next success checks.
	w.safeUntil.Store(minSecond)
	w.head.Store(sec)
}

// push appends m, growing the ring when full (at most to the window's size,
// since older readings are dropped on every roll).
func (w *timeWindow) push(m mark) {
	if w.n == len(w.marks) {
		grown := make([]mark, 2*len(w.marks))
		for i := range w.n {
			grown[i] = w.marks[(w.first+i)%len(w.marks)]
		}
		w.marks, w.first = grown, 0
	}
	w.marks[(w.first+w.n)%len(w.marks)] = m
	w.n++
}

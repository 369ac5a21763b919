package breaker

import (
	"sync"
	"sync/atomic"
)

// limits are what a time window needs of its configuration to prove that
// failures counted without a check cannot bring a rate to its threshold.
type limits struct {
	min           int64
	failure, slow float64 // thresholds, in percent
}

func limitsOf(c *Config) limits {
	return limits{min: max(int64(c.MinimumNumberOfCalls), 1), failure: c.FailureRateThreshold, slow: c.SlowCallRateThreshold}
}

// roundingMargin keeps "clearly below" clear of the float comparisons that
// decide at a threshold (see clearlyBelow).
const roundingMargin = 1 - 1e-9

// failBelow reports that f failures among n calls are at least the minimum
// of calls and a failure rate clearly below the threshold.
func (l limits) failBelow(f, n int64) bool {
	return n >= l.min && float64(f)*100 < l.failure*float64(n)*roundingMargin
}

// below reports that c holds the minimum of calls and both rates are clearly
// below their thresholds: no check of c can open the circuit.
func (l limits) below(c *counts) bool {
	return l.failBelow(c.failures, c.calls) && belowBy(l.failure, l.slow, c)
}

// room is the most failures that can join f failures among n calls, with no
// more successes, and leave the failure rate clearly below its threshold.
func (l limits) room(f, n int64) int64 {
	if !l.failBelow(f, n) {
		return 0
	}
	// (f+k)/(n+k) grows with k (f < n), so a k that passes failBelow proves
	// every smaller one; halving absorbs the formula's rounding.
	m := l.failure * roundingMargin
	k := int64(min((m*float64(n)-100*float64(f))/(100-m), 1<<40))
	for k > 0 && !l.failBelow(f+k, n+k) {
		k /= 2
	}
	return k
}

// maxGrant bounds one lane's grant, so that no core sits on the window's
// whole margin.
const maxGrant = 1 << 20

// timeWindow counts the outcomes of the last size seconds.
//
// Fast successes, and fast failures within a budget, are counted on per-core
// lanes; every other outcome (a failure beyond the budget, a slow call, a
// success that must be checked) is counted under mu. The window's counts are
// the cumulative totals now minus a reading of them at the start of the
// oldest second in the window (the base).
//
// A success needs a check after a roll, since the outcomes that left the
// window may have raised a rate (Resilience4j checks after every call), and
// while the window holds fewer than the minimum number of calls. safeUntil
// is the second up to which neither can be: set by a checked success that
// found the minimum, reset by every roll. Up to it a success is one add.
//
// A failure raises the failure rate, and it needs a check only if it can
// bring the rate to its threshold. A lane's budget (avail) is failures that
// provably cannot: the holder of mu grants it only while the invariant
//
//	failBelow(F + G', C + G')
//
// holds, where F and C are the window's failures and calls, and G' the
// failures granted to lanes and not yet counted. A failure counted within a
// budget moves one from G' to F and to C, which leaves both sums as they
// were; a success only adds to C; so between the operations of mu's holder
// the invariant cannot break, and every instant's rate, F/C, is below
// (F+G')/(C+G'). Such a failure is one compare-and-swap on its own core's
// line and returns without a check, and rightly: no order of the calls in
// flight can make its rate reach the threshold. What can break the
// invariant is done under mu, and takes the budgets back (revoke: each lane's
// avail to zero) before it takes effect: a call counted under mu (tested
// with it counted first), a roll that drops seconds (tested against the new
// base), new limits. After a revocation no lane counts a failure until mu's
// holder grants again, so the counts it reads are exact, and the failure
// that brought the rate to its threshold is checked on them.
//
// Reads are in one order: the lanes' failures (their avail), then their
// successes. Each only grows, so every success that returned before a
// counted failure began is counted too: a decision never sees a failure
// without the successes before it. Summing the successes is the one
// expensive read, so the bounds use goodSeen, the last sum, which is below
// the true total and so makes the rate an upper bound; only a bound that
// fails sums again.
//
// Readings are taken by the first call of each second, under mu, and kept
// only for seconds that had calls: memory is bounded by the window's active
// seconds and no call ever walks the window.
type timeWindow struct {
	size      int64
	lanes     []lane
	mask      int
	head      atomic.Int64 // the newest second with a reading
	safeUntil atomic.Int64

	_ [cacheLine]byte

	mu       sync.Mutex
	lim      limits
	bad      mark  // cumulative outcomes counted under mu (sec unused)
	granted  int64 // the lanes' granted, summed
	out      bool  // some lane may have avail: without it, granted is exact
	goodSeen uint64
	base     mark   // the oldest reading in the window
	marks    []mark // ring of readings, oldest at first
	first, n int
}

// mark is a reading of the cumulative counts at the start of second sec:
// every call (the lanes' too), the failures and the slow calls.
type mark struct {
	sec                   int64
	calls, failures, slow int64
}

func newTimeWindow(seconds int64, l limits) *timeWindow {
	w := &timeWindow{size: seconds, lim: l, marks: make([]mark, min(seconds, 8))}
	w.lanes, w.mask = newLanes()
	w.head.Store(minSecond)
	w.safeUntil.Store(minSecond)
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
	w.lanes[procPin()&w.mask].good.Add(1)
	procUnpin()
	return true
}

// failure counts a failure against its lane's budget, if the lane has one
// and no roll is due (a roll may drop outcomes, and decides itself whether
// the budgets still hold).
func (w *timeWindow) failure(sec int64) bool {
	if sec > w.head.Load() {
		return false
	}
	l := &w.lanes[procPin()&w.mask]
	for {
		v := l.avail.Load()
		if v <= 0 {
			procUnpin()
			return false
		}
		// Only a revocation races this (the P is pinned).
		if l.avail.CompareAndSwap(v, v-1) {
			procUnpin()
			return true
		}
	}
}

func (w *timeWindow) checkedSuccess(sec int64, c *counts) {
	w.lanes[procPin()&w.mask].good.Add(1)
	procUnpin()
	w.mu.Lock()
	w.snapshotLocked(sec, c)
	if c.calls >= w.lim.min {
		// Until the next roll only calls are added: no success can raise a
		// rate. (A roll that raced this resets safeUntil after its own
		// second, which is past sec.)
		w.safeUntil.Store(sec)
	}
	w.mu.Unlock()
}

func (w *timeWindow) record(sec int64, failure, slow bool, c *counts) {
	i := procPin() & w.mask
	procUnpin()
	var f, s int64
	if failure {
		f = 1
	}
	if slow {
		s = 1
	}
	w.mu.Lock()
	if sec > w.head.Load() {
		w.rollLocked(sec)
	}
	// The budgets must hold with this outcome counted before it is, or no
	// lane may spend them after it.
	if w.out && !w.bounded(1, f) {
		w.sawGood()
		if !w.bounded(1, f) {
			w.revoke()
		}
	}
	w.bad.calls++
	w.bad.failures += f
	w.bad.slow += s
	// With budgets out, these counts take every granted failure as counted:
	// an upper bound, used only when it is clearly below.
	w.countsFrom(c, w.granted, w.goodSeen)
	if !w.lim.below(c) {
		w.countsFrom(c, w.granted, w.sawGood())
		if !w.lim.below(c) && w.out {
			w.revoke()
			w.countsFrom(c, w.granted, w.sawGood())
		}
	}
	if failure && !slow {
		w.grant(i)
	}
	w.mu.Unlock()
}

// bounded reports whether the invariant holds with calls more calls of
// which failures failed, every granted failure counted and no more
// successes than goodSeen.
func (w *timeWindow) bounded(calls, failures int64) bool {
	var c counts
	w.countsFrom(&c, w.granted, w.goodSeen)
	return w.lim.failBelow(c.failures+failures, c.calls+calls)
}

// grant gives lane i, if it has none left, a share of the failures that
// keep the invariant.
func (w *timeWindow) grant(i int) {
	l := &w.lanes[i]
	if l.avail.Load() > 0 {
		return
	}
	var c counts
	w.countsFrom(&c, w.granted, w.goodSeen)
	room := w.lim.room(c.failures, c.calls)
	if room <= 0 {
		return
	}
	k := min(max(room/int64(len(w.lanes)), 1), maxGrant)
	l.granted += k
	w.granted += k
	w.out = true
	l.avail.Add(k)
}

// revoke takes back every failure granted and not counted: afterwards
// granted is the lanes' failures, exactly, until the next grant.
func (w *timeWindow) revoke() {
	if !w.out {
		return
	}
	for i := range w.lanes {
		l := &w.lanes[i]
		left := l.avail.Swap(0)
		l.granted -= left
		w.granted -= left
	}
	w.out = false
}

// counted is the failures the lanes have counted so far.
func (w *timeWindow) counted() int64 {
	n := w.granted
	if w.out {
		for i := range w.lanes {
			n -= w.lanes[i].avail.Load()
		}
	}
	return n
}

// countsFrom fills c from the counts under mu, the lanes' failures and their
// successes.
func (w *timeWindow) countsFrom(c *counts, laneFailures int64, good uint64) {
	c.calls = w.bad.calls + laneFailures + int64(good) - w.base.calls
	c.failures = w.bad.failures + laneFailures - w.base.failures
	c.slow = w.bad.slow - w.base.slow
	c.slowCalls = c.calls
}

// sawGood sums the lanes' successes into goodSeen.
func (w *timeWindow) sawGood() uint64 {
	var t uint64
	for i := range w.lanes {
		t += w.lanes[i].good.Load()
	}
	w.goodSeen = max(w.goodSeen, t)
	return w.goodSeen
}

func (w *timeWindow) snapshot(sec int64, c *counts) {
	w.mu.Lock()
	w.snapshotLocked(sec, c)
	w.mu.Unlock()
}

func (w *timeWindow) snapshotLocked(sec int64, c *counts) {
	if sec > w.head.Load() {
		w.rollLocked(sec)
	}
	f := w.counted() // the failures before the successes (see timeWindow)
	w.countsFrom(c, f, w.sawGood())
}

// setLimits applies new limits to the window's counts; budgets granted
// under the old ones are taken back.
func (w *timeWindow) setLimits(l limits) {
	w.mu.Lock()
	w.revoke()
	w.lim = l
	w.safeUntil.Store(minSecond)
	w.mu.Unlock()
}

func (w *timeWindow) roll(sec int64) {
	w.mu.Lock()
	w.rollLocked(sec)
	w.mu.Unlock()
}

// rollLocked starts second sec: it drops the readings that left the window,
// takes the counts' reading, and makes the oldest one left the base. The
// oldest reading kept is for the first second with calls inside the window;
// no call came between the window's start and that second, so its reading
// is the window's start. Dropped outcomes may raise the failure rate, so the
// budgets are tested against the new base first, and taken back before the
// reading if they no longer hold.
func (w *timeWindow) rollLocked(sec int64) {
	if sec <= w.head.Load() {
		return
	}
	for w.n > 0 && w.marks[w.first].sec <= sec-w.size {
		w.first = (w.first + 1) % len(w.marks)
		w.n--
	}
	if w.n == 0 {
		w.revoke() // the window starts empty, below any minimum
	} else if w.out {
		w.base = w.marks[w.first]
		if !w.bounded(0, 0) {
			w.revoke()
		}
	}
	f := w.counted()
	w.push(mark{sec: sec, calls: w.bad.calls + f + int64(w.sawGood()), failures: w.bad.failures + f, slow: w.bad.slow})
	w.base = w.marks[w.first]
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

package breaker

import (
	"sync"
	"sync/atomic"
)

// counts is what a window holds when a decision is made. Failures are
// counted among Calls; Slow among SlowCalls, which counts the same calls
// but is kept in a second word (see timeWindow), so the two may differ by
// the calls in flight between the two words.
type counts struct {
	calls, failures int64
	slowCalls, slow int64
}

// window is a sliding window of outcomes. record adds one outcome and
// returns the window's counts including it and every outcome recorded
// before it; snapshot returns the counts without recording. Both take the
// current Unix second; count windows ignore it.
type window interface {
	record(sec int64, failure, slow bool) counts
	snapshot(sec int64) counts
}

func newWindow(c Config) window {
	if c.WindowType == CountBased {
		return &countWindow{ring: make([]uint8, c.WindowSize)}
	}
	return newTimeWindow(int64(c.WindowSize), c.SlowCallDurationThreshold > 0)
}

const (
	outcomeFailure uint8 = 1 << iota
	outcomeSlow
	outcomePresent
)

// countWindow keeps the last len(ring) outcomes and their running totals
// under one mutex, as Resilience4j's fixed-size window does: each record
// returns totals that include every earlier record, so the check that
// follows it is linearizable, and it costs the same for any window size.
type countWindow struct {
	mu   sync.Mutex
	ring []uint8
	pos  int
	tot  counts
}

func (w *countWindow) record(_ int64, failure, slow bool) counts {
	o := outcomePresent
	if failure {
		o |= outcomeFailure
	}
	if slow {
		o |= outcomeSlow
	}
	w.mu.Lock()
	w.tot.add(w.ring[w.pos], -1)
	w.ring[w.pos] = o
	w.tot.add(o, 1)
	if w.pos++; w.pos == len(w.ring) {
		w.pos = 0
	}
	c := w.tot
	w.mu.Unlock()
	return c
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

func (w *countWindow) snapshot(int64) counts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tot
}

// A tally packs two cumulative counters into one word so that a single
// atomic add counts a call and, with it, whether it failed (or was slow):
// calls in the high 32 bits, the kind in the low 31. Bit 31 takes the low
// counter's carry when it wraps, and is cleared by whoever sees it, so a
// wrap never leaks into the calls. Differences are taken modulo each field,
// so a window is exact while it holds fewer than 2^31 calls.
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

// timeWindow counts the outcomes of the last size seconds.
//
// Each outcome is one atomic add to a cumulative tally; the counts of the
// window are the tally now minus its reading at the start of the oldest
// second in the window (the base). Both readings are of the same word, so
// every failure in a difference has its call in it too, and the add's own
// result includes every earlier add: a decision never sees torn counts and
// the call that crosses a threshold always sees the crossing. Readings are
// taken lazily, by the first call of each second, and kept only for seconds
// that had calls: memory is bounded by the window's active seconds and no
// call ever walks the window.
type timeWindow struct {
	size      int64
	trackSlow bool

	fail, slow         atomic.Uint64 // tallies: calls|failures, calls|slow calls
	baseFail, baseSlow atomic.Uint64 // their readings at the window's start
	head               atomic.Int64  // the newest second with a reading

	mu       sync.Mutex // serialises rolls
	marks    []mark     // ring of readings, oldest at first
	first, n int
}

// mark is the tallies' reading at the start of second sec.
type mark struct {
	sec        int64
	fail, slow uint64
}

func newTimeWindow(seconds int64, trackSlow bool) *timeWindow {
	w := &timeWindow{size: seconds, trackSlow: trackSlow, marks: make([]mark, min(seconds, 8))}
	w.head.Store(minSecond)
	return w
}

// minSecond is before any second a clock reports.
const minSecond = -1 << 62

func (w *timeWindow) record(sec int64, failure, slow bool) counts {
	if sec > w.head.Load() {
		w.roll(sec)
	}
	var c counts
	// The base is read before the add, so it is an earlier reading of the
	// same tally: the difference can only count too much of the oldest
	// second (by the time a roll takes), never go negative.
	base := w.baseFail.Load()
	d := uint64(tallyCall)
	if failure {
		d++
	}
	c.calls, c.failures = tallyDiff(add(&w.fail, d), base)
	if w.trackSlow {
		base := w.baseSlow.Load()
		d := uint64(tallyCall)
		if slow {
			d++
		}
		c.slowCalls, c.slow = tallyDiff(add(&w.slow, d), base)
	} else {
		c.slowCalls = c.calls
	}
	return c
}

// add adds d to a tally and clears the carry bit it may have set.
func add(t *atomic.Uint64, d uint64) uint64 {
	v := t.Add(d)
	if v&tallyCarry != 0 {
		t.And(^uint64(tallyCarry))
	}
	return v
}

func (w *timeWindow) snapshot(sec int64) counts {
	if sec > w.head.Load() {
		w.roll(sec)
	}
	var c counts
	base := w.baseFail.Load()
	c.calls, c.failures = tallyDiff(w.fail.Load(), base)
	if w.trackSlow {
		base := w.baseSlow.Load()
		c.slowCalls, c.slow = tallyDiff(w.slow.Load(), base)
	} else {
		c.slowCalls = c.calls
	}
	return c
}

// roll starts second sec: it takes the tallies' reading, drops the readings
// that left the window, and publishes the oldest one left as the base. The
// oldest reading kept is for the first second with calls inside the window;
// no call came between the window's start and that second, so its reading
// is the window's start.
func (w *timeWindow) roll(sec int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sec <= w.head.Load() {
		return
	}
	w.push(mark{sec: sec, fail: w.fail.Load(), slow: w.slow.Load()})
	for w.marks[w.first].sec <= sec-w.size {
		w.first = (w.first + 1) % len(w.marks)
		w.n--
	}
	oldest := w.marks[w.first]
	w.baseFail.Store(oldest.fail)
	w.baseSlow.Store(oldest.slow)
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

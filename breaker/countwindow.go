package breaker

import (
	"sync"
	"sync/atomic"
)

// countWindow keeps the last len(ring) outcomes and their running totals,
// as Resilience4j's fixed-size window does.
//
// The ring is exact only under mu, after a sync (seal): between syncs, fast
// successes and failures within a budget are counted on their own core's
// lane and enter the ring, in their order, at the next sync. Every outcome
// that needs a check (a failure beyond its lane's budget, a slow call, a
// success before the minimum) and every read of the counts is a sync.
//
// # Order
//
// A failure's place among the calls decides when it leaves the window, so a
// failure counted on a lane records the order it needs: the number of
// successes counted so far on every lane, summed (seen). It is placed after
// exactly that many successes: every success that returned before it began
// is among them (each lane only grows, and the sum is the total at some
// instant during the failure), and none that began after it returned. The
// lanes' failures enter the ring sorted by what they saw, which is an order
// of every outcome consistent with real time: a goroutine that failed on one
// core and succeeded on another finds its failure older in the ring.
//
// A sync seals every lane first (an odd generation in its word), then sums
// the successes: a failure's compare-and-swap either landed before the seal,
// and then its sum was read before the sync's and the sync moves it into the
// ring, or it fails and the failure waits for the unseal. So the counts a
// sync reads include every outcome that returned before it began.
//
// # Budgets
//
// A failure on a lane is not checked, so it must provably leave the failure
// rate clearly below its threshold whatever else happens. At each sync, with
// the ring exact, the window computes room[s]: the most failures that may
// join it, in any order with s successes, without any window on the way
// reaching the threshold. The worst case of f failures and s successes is
// the ring's s+f oldest outcomes leaving and all f failures staying: each
// success only lowers the rate and each failure only raises it, so room
// grows with s. Each lane holds a share of the room (the shares add up to at
// most one), and may count its k-th failure since the sync when it saw s
// successes and k ≤ room[s] × share: every failure placed before any point
// saw at most that point's successes, so there are at most room[s] of them
// for that point's s, and the window there is clearly below its threshold.
// A failure beyond its lane's share takes the mutex, is checked on the exact
// ring, and the room is shared again in proportion to each lane's failures.
//
// With one lane (GOMAXPROCS 1) there are no budgets: every failure takes the
// mutex, which is then never contended and cheaper than a budget's
// bookkeeping. Nor are there any in METRICS_ONLY: a crossing is reported
// only after a checked outcome saw the rate below its threshold, and an
// unchecked failure could take a rate (the slow-call rate too) below it and
// leave the next crossing unseen.
type countWindow struct {
	// Read by every fast outcome, written only when the limits change.
	lanes   []countLane
	mask    int
	budgets bool        // more than one lane and not METRICS_ONLY
	warm    atomic.Bool // the ring holds at least min calls
	min     atomic.Int64
	_       [cacheLine - 48]byte
	// Written by syncs, read by failures on a budget.
	base atomic.Uint64              // the successes summed at the last sync
	room [roomLen / 4]atomic.Uint64 // room[s], 16 bits each
	_    [cacheLine]byte

	mu       sync.Mutex
	failRate float64 // threshold, in percent
	ring     []uint8
	pos      int
	tot      counts
	consumed uint64   // the successes summed at the last sync: base, for mu
	locked   int64    // outcomes counted under mu (for tests)
	sealed   []uint32 // per lane, the failures it counted before the seal
	next     []uint32 // per lane, the next of them to enter the ring
	heads    []uint64 // seal's merge heap, one entry per lane (see head)
}

// roomLen bounds the successes a lane's budget grows with between syncs.
const roomLen = 64

// laneLog is how many failures a lane counts between two syncs at most.
const laneLog = 58

// allShare is a lane's share of the room when it has all of it.
const allShare = 1 << 16

// countLane is one core's share of a count window: its fast successes on a
// line of their own, and on the next two its failures since the last sync.
type countLane struct {
	good atomic.Uint64 // cumulative fast successes
	_    [cacheLine - 8]byte
	// word is the lane's generation (high 32 bits, odd while a sync reads
	// the lane) and the failures counted on it since the last sync.
	word atomic.Uint64
	// share is the lane's part of room, in 1/allShare: the lanes' shares
	// add up to at most allShare.
	share atomic.Uint32
	// seen holds, 16 bits each, what the lane's k-th failure since the last
	// sync saw: the successes summed over every lane, less base.
	seen [laneLog / 2]atomic.Uint32
}

func newCountWindow(c *Config, budgets bool) *countWindow {
	return newCountWindowLanes(c, budgets, laneCount())
}

func newCountWindowLanes(c *Config, budgets bool, n int) *countWindow {
	w := &countWindow{
		lanes: make([]countLane, n), mask: n - 1, budgets: budgets && n > 1,
		failRate: c.FailureRateThreshold, ring: make([]uint8, c.WindowSize),
		sealed: make([]uint32, n), next: make([]uint32, n), heads: make([]uint64, 0, n),
	}
	for i := range w.lanes {
		w.lanes[i].share.Store(uint32(allShare / n))
	}
	w.min.Store(int64(c.MinimumNumberOfCalls))
	return w
}

func (w *countWindow) success() bool {
	if !w.warm.Load() {
		return false
	}
	w.lanes[procPin()&w.mask].good.Add(1)
	procUnpin()
	return true
}

// failure counts a failure within its lane's budget and reports whether it
// did. While a sync reads the lane it waits for the sync on the mutex (the
// runtime parks it if the sync takes long) and tries once more, with the
// mutex held so that no other sync seals the lane meanwhile.
func (w *countWindow) failure() bool {
	if !w.budgets {
		return false
	}
	switch w.tryFailure() {
	case counted:
		return true
	case refused:
		return false
	}
	w.mu.Lock()
	r := w.tryFailure()
	w.mu.Unlock()
	return r == counted
}

const (
	counted = iota
	refused
	sealed
)

func (w *countWindow) tryFailure() int {
	i := procPin()
	if i > w.mask {
		// GOMAXPROCS grew since the window was made: a lane's log has one
		// writer, so this P has none.
		procUnpin()
		return refused
	}
	l := &w.lanes[i]
	v := l.word.Load()
	if v>>32&1 != 0 {
		procUnpin()
		return sealed
	}
	k, share := uint64(uint32(v)), uint64(l.share.Load())
	if k >= laneLog || k >= w.roomAt(roomLen-1)*share/allShare { // room only grows with s
		procUnpin()
		return refused
	}
	var total uint64
	for i := range w.lanes {
		total += w.lanes[i].good.Load()
	}
	s := total - w.base.Load() // wraps if the sync that set base came after v: the CAS then fails
	if s >= 1<<16 || k >= w.roomAt(s)*share/allShare {
		procUnpin()
		return refused
	}
	// Only this lane's failures write its log, one after another (the P is
	// pinned): the other half of the pair is the one before, or unused.
	e := &l.seen[k/2]
	e.Store(e.Load()&^(0xffff<<(16*(k%2))) | uint32(s)<<(16*(k%2)))
	if !l.word.CompareAndSwap(v, v+1) { // only a seal changes the word of a pinned P's lane
		procUnpin()
		return sealed
	}
	procUnpin()
	return counted
}

// roomAt is room[s]: s beyond the table has at least its last entry.
func (w *countWindow) roomAt(s uint64) uint64 {
	s = min(s, roomLen-1)
	return w.room[s/4].Load() >> (16 * (s % 4)) & 0xffff
}

func (w *countWindow) record(_ int64, failure, slow bool, c *counts) {
	o := outcomePresent
	if failure {
		o |= outcomeFailure
	}
	if slow {
		o |= outcomeSlow
	}
	self := -1 // a failure beyond its lane's budget asks for more of the room
	if failure && !slow && w.budgets {
		self = procPin() & w.mask
		procUnpin()
	}
	w.mu.Lock()
	w.locked++
	w.seal()
	w.push(o)
	*c = w.tot
	if c.calls >= w.min.Load() && !w.warm.Load() {
		w.warm.Store(true)
	}
	w.unseal(self)
	w.mu.Unlock()
}

func (w *countWindow) snapshot(_ int64, c *counts) {
	w.mu.Lock()
	w.seal()
	*c = w.tot
	w.unseal(-1)
	w.mu.Unlock()
}

// setLimits applies a new minimum of calls and failure-rate threshold to
// the counts the ring holds, and the budgets to them.
func (w *countWindow) setLimits(c *Config) {
	n := int64(c.MinimumNumberOfCalls)
	w.mu.Lock()
	w.seal()
	w.failRate = c.FailureRateThreshold
	w.min.Store(n)
	w.warm.Store(w.tot.calls >= n)
	w.unseal(-1)
	w.mu.Unlock()
}

// seal stops every lane from counting failures and moves what the lanes
// counted since the last sync into the ring, in order: the failures sorted
// by the successes they saw, each after that many of the successes.
func (w *countWindow) seal() {
	if w.mask == 0 { // no budgets (see failure)
		total := w.lanes[0].good.Load()
		w.pushSuccesses(total - w.consumed)
		w.consumed = total
		return
	}
	for i := range w.lanes {
		w.sealed[i] = uint32(w.lanes[i].word.Add(1 << 32))
		w.next[i] = 0
	}
	var total uint64
	for i := range w.lanes {
		total += w.lanes[i].good.Load()
	}
	base := w.consumed
	var failures uint64
	for i := range w.lanes {
		failures += uint64(w.sealed[i])
	}
	// Of more than a ring of outcomes only the last len(ring) stay: the
	// others are skipped, and the ring starts empty for the rest.
	skip := uint64(0)
	if n := total - base + failures; n >= uint64(len(w.ring)) {
		skip = n - uint64(len(w.ring))
		clear(w.ring)
		w.tot, w.pos = counts{}, 0
	}
	successes := func(k uint64) {
		d := min(k, skip)
		skip -= d
		w.pushSuccesses(k - d)
	}
	// Each lane's log is sorted (its failures follow one another and the
	// sum only grows): a k-way merge over the lanes' heads, the smallest
	// seen first and of equal ones the lowest lane.
	h := w.heads[:0]
	for i := range w.lanes {
		if w.sealed[i] > 0 {
			h = append(h, w.head(i))
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	done := uint64(0) // successes since base already in the ring
	for len(h) > 0 {
		lane, first := int(uint32(h[0])), h[0]>>32
		if w.next[lane]++; w.next[lane] < w.sealed[lane] {
			h[0] = w.head(lane)
		} else {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		siftDown(h, 0)
		successes(first - done)
		done = first
		if skip > 0 {
			skip--
		} else {
			w.push(outcomePresent | outcomeFailure)
		}
	}
	successes(total - base - done)
	w.consumed = total
	w.base.Store(total)
}

// head is lane i's next failure to enter the ring, as a heap entry: what
// it saw in the high 32 bits, the lane in the low.
func (w *countWindow) head(i int) uint64 {
	k := w.next[i]
	return uint64(w.lanes[i].seen[k/2].Load()>>(16*(k%2))&0xffff)<<32 | uint64(i)
}

// siftDown restores the min-heap h below i.
func siftDown(h []uint64, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1] < h[c] {
			c++
		}
		if h[i] <= h[c] {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// unseal gives the lanes budgets for the counts the ring holds now and lets
// them count again. The room is shared in proportion to the failures each
// lane counted since the last sync, and self (a lane whose failure found
// its budget spent, or -1) asks for one more: a core that fails gets room,
// a core that does not leaves it to the others.
func (w *countWindow) unseal(self int) {
	if w.mask == 0 {
		return
	}
	if w.budgets {
		w.fillRoom()
	}
	demand := uint64(0)
	for i := range w.lanes {
		demand += uint64(w.sealed[i])
	}
	if self >= 0 {
		demand++
	}
	for i := range w.lanes {
		l := &w.lanes[i]
		if demand > 0 {
			d := uint64(w.sealed[i])
			if i == self {
				d++
			}
			if share := uint32(d * allShare / demand); l.share.Load() != share {
				l.share.Store(share)
			}
		}
		l.word.Store((l.word.Load()>>32 + 1) << 32)
	}
}

// fillRoom computes room[s] for the ring as it is (see countWindow): the
// most failures f such that, after the ring's s+f oldest outcomes left and
// f failures joined, the window holds the minimum of calls and a failure
// rate clearly below the threshold. Both s and f only grow through the
// loop, and so does the number of the ring's outcomes that left (gone), so
// one pass over the oldest outcomes counts the failures among them.
func (w *countWindow) fillRoom() {
	n, size := w.tot.calls, int64(len(w.ring))
	oldest := (int64(w.pos) - n + size) % size
	full := w.mostFailures(size)
	limit := min(int64(len(w.lanes))*laneLog, 0xffff) // no more can be counted before a sync
	var gone, goneFailures, f int64
	var packed uint64
	for s := range int64(roomLen) {
		for w.warm.Load() && f < limit {
			q := s + f + 1 // the outcomes that joined, with one more failure
			for target := min(max(n+q-size, 0), n); gone < target; gone++ {
				if w.ring[(oldest+gone)%size]&outcomeFailure != 0 {
					goneFailures++
				}
			}
			calls, most := min(n+q, size), full
			if calls < size {
				most = w.mostFailures(calls)
			}
			if w.tot.failures-goneFailures+f+1 > most {
				break
			}
			f++
		}
		packed |= uint64(f) << (16 * (s % 4))
		if s%4 == 3 {
			if r := &w.room[s/4]; r.Load() != packed { // a sync mostly finds the room it left
				r.Store(packed)
			}
			packed = 0
		}
	}
}

// mostFailures is the most failures among calls that leave the failure
// rate clearly below its threshold, or -1 if calls are fewer than the
// minimum (or none can).
func (w *countWindow) mostFailures(calls int64) int64 {
	if calls < w.min.Load() {
		return -1
	}
	below := func(f int64) bool { return float64(f)*100 < w.failRate*float64(calls)*roundingMargin }
	f := int64(w.failRate * float64(calls) / 100)
	for f >= 0 && !below(f) {
		f--
	}
	for below(f + 1) {
		f++
	}
	return f
}

// pushSuccesses moves k successes into the ring. Past a full ring of them
// the ring is all successes, whatever it held.
func (w *countWindow) pushSuccesses(k uint64) {
	if k >= uint64(len(w.ring)) {
		for i := range w.ring {
			w.ring[i] = outcomePresent
		}
		n := int64(len(w.ring))
		w.tot = counts{calls: n, slowCalls: n}
		return
	}
	for ; k > 0; k-- {
		if o := w.ring[w.pos]; o&outcomePresent == 0 {
			w.tot.calls++
			w.tot.slowCalls++
		} else {
			w.tot.failures -= int64(o & outcomeFailure) // 1 or 0
			if o&outcomeSlow != 0 {
				w.tot.slow--
			}
		}
		w.ring[w.pos] = outcomePresent
		if w.pos++; w.pos == len(w.ring) {
			w.pos = 0
		}
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

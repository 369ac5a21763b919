package breaker

import (
	"runtime"
	"sort"
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
// rate clearly below its threshold whatever else happens. Two kinds of
// window can end at it: those that reach back before the last sync, and
// those that hold only outcomes since.
//
// For the first, at each sync, with the ring exact, the window computes
// room[s]: the most failures that may join it, in any order with s
// successes, without any window on the way reaching the threshold. The
// worst case of f failures and s successes is the ring's s+f oldest
// outcomes leaving and all f failures staying: each success only lowers the
// rate and each failure only raises it, so room grows with s. Each lane
// holds a share of the room (the shares add up to at most one), and may
// count its k-th failure since the sync when it saw s successes and
// k ≤ room[s] × share: every failure placed before any point saw at most
// that point's successes, so there are at most room[s] of them for that
// point's s, and the window there is clearly below its threshold. Once s+k
// reaches the ring's size, no window ending at the failure reaches back
// before the sync, and this test is not needed.
//
// For the second, let full be the most failures a ring's size of calls may
// hold clearly below the threshold, and c = full × share a lane's part of
// them: a lane counts a failure only if it and its c failures before span
// at least size−full successes. A window of size calls with more than full
// failures, all since the sync, would hold more than c of some lane's
// (the parts add up to at most full), so c+1 of them in a row, and with
// them size−full successes: more than size calls. So a lane keeps counting
// for as long as its failures stay spread among successes, and its log is
// a ring of the last laneLog (see leaves).
//
// A failure that fails either test takes the mutex, is checked on the
// exact ring, and the room is shared again (see unseal).
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
	size    uint64       // len(ring)
	full    atomic.Int64 // mostFailures(size), as of the last sync

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
	heat     []uint64 // per lane, what its share of room follows (see unseal)
	heads    []uint64 // seal's merge heap, one entry per lane (see head)
}

// roomLen is how many entries room has, one every roomStep successes: a
// lane's budget grows with up to roomLen×roomStep successes between syncs,
// and between entries has the one below (room only grows with s).
const (
	roomLen  = 64
	roomStep = 4
)

// laneLog is how many of a lane's failures since the last sync its log
// holds: the last ones, which are all a sync can need (see leaves). 122
// fills the lane's four lines after word and share.
const laneLog = 122

// allShare is a lane's share of the room when it has all of it.
const allShare = 1 << 16

// countLane is one core's share of a count window: its fast successes on a
// line of their own, and on the next four its failures since the last sync.
type countLane struct {
	good atomic.Uint64 // cumulative fast successes
	_    [cacheLine - 8]byte
	// word is the lane's generation (high 32 bits, odd while a sync reads
	// the lane) and the failures counted on it since the last sync.
	word atomic.Uint64
	// share is the lane's part of room, in 1/allShare: the lanes' shares
	// add up to at most allShare.
	share atomic.Uint32
	// seen holds what the lane's k-th failure since the last sync saw: the
	// successes summed over every lane, less base. Plain stores, published
	// by the compare-and-swap of word that counts them: a sync reads only
	// the entries below the count it sealed, and only this lane's pinned P
	// writes the next one (a locked store here cost a fast failure 10 ns).
	seen [laneLog]uint16
}

func newCountWindow(c *Config, budgets bool) *countWindow {
	return newCountWindowLanes(c, budgets, laneCount())
}

func newCountWindowLanes(c *Config, budgets bool, n int) *countWindow {
	w := &countWindow{
		lanes: make([]countLane, n), mask: n - 1, budgets: budgets && n > 1, size: uint64(c.WindowSize),
		failRate: c.FailureRateThreshold, ring: make([]uint8, c.WindowSize),
		sealed: make([]uint32, n), next: make([]uint32, n), heat: make([]uint64, n), heads: make([]uint64, 0, n),
	}
	for i := range w.lanes {
		w.lanes[i].share.Store(uint32(allShare / n))
	}
	w.min.Store(int64(c.MinimumNumberOfCalls))
	w.full.Store(-1) // until the first sync with budgets fills room
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
// did. While a sync reads the lane it yields its P and tries again: a sync
// takes about a microsecond, and parking on the mutex instead left the
// core idle for far longer than that (a parked goroutine waits for a
// spinning thread to steal it back). After a thousand tries it waits on
// the mutex and tries once more, with the mutex held so that no other sync
// seals the lane meanwhile. A failure beyond its budget does the same when
// a sync ended since it read its lane: that sync gave every lane a budget
// again, and cores that spend their shares at the same rate would
// otherwise sync twice, one after the other.
func (w *countWindow) failure() bool {
	if !w.budgets {
		return false
	}
	r, gen := w.tryFailure()
	for i := 0; r == sealed && i < 1000; i++ {
		runtime.Gosched()
		r, gen = w.tryFailure()
	}
	if r == counted {
		return true
	}
	w.mu.Lock()
	if r == refused && w.lanes[0].word.Load()>>32 == gen { // no sync since: every lane's generation moves together
		w.mu.Unlock()
		return false
	}
	r, _ = w.tryFailure()
	w.mu.Unlock()
	return r == counted
}

const (
	counted = iota
	refused
	sealed
)

// tryFailure also returns the generation it found its lane in.
func (w *countWindow) tryFailure() (int, uint64) {
	i := procPin()
	if i > w.mask {
		// GOMAXPROCS grew since the window was made: a lane's log has one
		// writer, so this P has none.
		procUnpin()
		return refused, 0
	}
	r, gen := w.countOn(&w.lanes[i])
	procUnpin()
	return r, gen
}

// countOn is tryFailure on lane l, whose P is pinned (or, in tests, that
// no one else writes).
func (w *countWindow) countOn(l *countLane) (int, uint64) {
	v := l.word.Load()
	gen := v >> 32
	if gen&1 != 0 {
		return sealed, gen
	}
	k, share := uint64(uint32(v)), uint64(l.share.Load())
	if k >= 1<<31 || !w.warm.Load() {
		return refused, gen
	}
	var total uint64
	for i := range w.lanes {
		total += w.lanes[i].good.Load()
	}
	s := total - w.base.Load() // wraps if the sync that set base came after v: the CAS then fails
	if s >= 1<<16 || s+k < w.size && k >= w.roomAt(s)*share/allShare || !w.spans(l, k, s, share) || !w.leaves(l, k, s) {
		// The tests read this lane's log, which the next failure on this
		// P, maybe another goroutine's, writes: a release on word orders
		// the two, as a counted failure's swap does.
		l.word.Add(0)
		return refused, gen
	}
	l.seen[k%laneLog] = uint16(s)       // only this lane's failures write its log, one after another (the P is pinned)
	if !l.word.CompareAndSwap(v, v+1) { // only a seal changes the word of a pinned P's lane
		// The entry just written counts for nothing, but the next failure
		// on this P, maybe another goroutine's, writes it again: a release
		// on word orders the two, as a successful swap does.
		l.word.Add(0)
		return sealed, gen
	}
	return counted, gen
}

// leaves reports whether the lane's log, a ring, may take its k-th failure
// since the sync, seen after s successes. Once it is counted, a sync reads
// the last laneLog−1 entries (the slot of the one before them is the next
// to be written, maybe while the sync reads), so the entry that drops out
// of them must have a ring's worth of outcomes after it: the successes
// since it and this lane's failures since, this one among them. No sync
// ever needs where such a failure went.
func (w *countWindow) leaves(l *countLane, k, s uint64) bool {
	if k+1 < laneLog {
		return true
	}
	j := k + 1 - laneLog
	return s-uint64(l.seen[j%laneLog])+k-j >= w.size
}

// spans reports whether the lane's k-th failure since the sync, seen
// after s successes, leaves every window of the ring's size that holds only
// outcomes since the sync clearly below the threshold (see countWindow):
// with c = share×full, it and the c failures before it on this lane span at
// least size−full successes. A lane with no share (c = 0) may count none.
func (w *countWindow) spans(l *countLane, k, s, share uint64) bool {
	full := w.full.Load()
	if full < 0 {
		return false
	}
	c := uint64(full) * share / allShare
	switch {
	case c == 0 || c >= laneLog: // c >= laneLog: the first of them may no longer be in the log
		return k < c
	case k < c:
		return true
	}
	return s-uint64(l.seen[(k-c)%laneLog]) >= w.size-uint64(full)
}

// roomAt is room[s]: s beyond the table has at least its last entry.
func (w *countWindow) roomAt(s uint64) uint64 {
	i := min(s/roomStep, roomLen-1)
	return w.room[i/4].Load() >> (16 * (i % 4)) & 0xffff
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
	w.recordFrom(self, o, c)
}

// recordFrom is record of o, asked for by lane self (or -1).
func (w *countWindow) recordFrom(self int, o uint8, c *counts) {
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
		w.next[i] = w.oldest(i)
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
	skip, done := uint64(0), uint64(0) // done: successes since base already placed
	if n := total - base + failures; n >= uint64(len(w.ring)) {
		clear(w.ring)
		w.tot, w.pos = counts{}, 0
		if n > uint64(len(w.ring)) {
			done, skip = w.cut(total-base, uint64(len(w.ring)))
		}
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
		if w.next[i] < w.sealed[i] {
			h = append(h, w.head(i))
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
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

// cut skips what a sync of more than size outcomes would only push out
// again: of the s successes and the lanes' failures, only the last size
// stay. It finds the most successes c after which at least size outcomes
// follow (successes after c, and failures that saw c or more), starts each
// lane's merge at its first failure that saw c, and returns c and how many
// of the failures that saw exactly c still go before the last size (they
// come first in the merge). So a sync costs at most a ring of pushes
// however long since the last.
func (w *countWindow) cut(s, size uint64) (c, extra uint64) {
	after := func(c uint64) uint64 { // the outcomes after the c-th success; sets next
		n := s - c
		for i := range w.lanes {
			lo := w.oldest(i)
			w.next[i] = lo + uint32(sort.Search(int(w.sealed[i]-lo), func(k int) bool { return w.seenAt(i, lo+uint32(k)) >= c }))
			n += uint64(w.sealed[i] - w.next[i])
		}
		return n
	}
	lo, hi := uint64(0), s // after(0) is every outcome, more than size
	for lo < hi {
		if mid := lo + (hi-lo+1)/2; after(mid) >= size {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, after(lo) - size
}

// seenAt is what lane i's k-th failure since the last sync saw.
func (w *countWindow) seenAt(i int, k uint32) uint64 {
	return uint64(w.lanes[i].seen[k%laneLog])
}

// oldest is lane i's first failure a sync reads in its log. Those before
// it had a ring of outcomes after them (see leaves): cut starts past them.
func (w *countWindow) oldest(i int) uint32 {
	return w.sealed[i] - min(w.sealed[i], laneLog-1)
}

// head is lane i's next failure to enter the ring, as a heap entry: what
// it saw in the high 32 bits, the lane in the low.
func (w *countWindow) head(i int) uint64 {
	return w.seenAt(i, w.next[i])<<32 | uint64(i)
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
// them count again. The room is shared in proportion to each lane's heat:
// the failures it counted since the last sync, plus half its heat before,
// so that shares follow the cores that fail without swinging with the few
// failures of a short interval (a lane left with no share refuses its next
// failure, and that sync would take the share from another). Self (a lane
// whose failure found its budget spent, or -1) is at once as hot as the
// hottest lane: a core that fails gets room, and a core that stops failing
// leaves its room to the others within a few syncs.
func (w *countWindow) unseal(self int) {
	if w.mask == 0 {
		return
	}
	if w.budgets {
		w.fillRoom()
	}
	var total, hottest uint64
	for i := range w.lanes {
		w.heat[i] = w.heat[i]/2 + uint64(min(w.sealed[i], laneLog))<<8
		hottest = max(hottest, w.heat[i])
	}
	if self >= 0 {
		w.heat[self] = max(w.heat[self], hottest, 1)
	}
	for i := range w.lanes {
		total += w.heat[i]
	}
	for i := range w.lanes {
		l := &w.lanes[i]
		if total > 0 {
			if share := uint32(w.heat[i] * allShare / total); l.share.Load() != share {
				l.share.Store(share)
			}
		}
		reopen(l)
	}
}

// reopen ends a sync for lane l: the next generation, even, with no
// failures counted. It is an add, not a store. A failure that found the
// lane sealed after writing its log entry (its swap failed) publishes that
// write with an add of zero, and the next failure on its P, maybe another
// goroutine's, writes the same entry after acquiring the word. A store
// here would end that add's release sequence: an add of zero landing
// between this sync's read of the word and a store of the new generation
// would be ordered before no later failure, and their two writes of the
// entry would be a data race (the race detector reports it; the memory
// model has no other order for goroutines that take turns on one P). An
// add keeps every release on the word. Nothing else changes a sealed word
// (a failure's swap fails, its add adds zero), so the add is exact.
func reopen(l *countLane) { reopenFrom(l, l.word.Load()) }

// reopenFrom is reopen of a lane whose sealed word read v.
func reopenFrom(l *countLane, v uint64) { l.word.Add((v>>32+1)<<32 - v) }

// fillRoom computes room[s] for the ring as it is (see countWindow): the
// most failures f such that, after the ring's s+f oldest outcomes left and
// f failures joined, the window holds the minimum of calls and a failure
// rate clearly below the threshold. Both s and f only grow through the
// loop, and so does the number of the ring's outcomes that left (gone), so
// one pass over the oldest outcomes counts the failures among them.
func (w *countWindow) fillRoom() {
	n, size := w.tot.calls, int64(len(w.ring))
	limit := min(int64(len(w.lanes))*laneLog, 0xffff) // no more can be counted before a sync
	if !w.warm.Load() {
		limit = 0
	}
	full := w.mostFailures(size)
	if w.full.Load() != full {
		w.full.Store(full)
	}
	if n == size {
		w.fillRoomFull(full, limit)
		return
	}
	oldest := (int64(w.pos) - n + size) % size
	var gone, goneFailures, f int64
	var packed uint64
	for i := range int64(roomLen) {
		s := i * roomStep
		for f < limit {
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
		w.storeRoom(i, f, &packed)
	}
}

// fillRoomFull is fillRoom for a full ring, where every sync finds it: the
// window always holds size calls, so the test for s successes and f
// failures is that the successes among the ring's s+f+1 oldest outcomes
// (those beyond the ring count as successes) are at most slack+s, slack
// being how many failures the ring could still take. So room[s] is where
// the ring's (slack+s+1)-th oldest success is, less s+1: one pass over the
// oldest outcomes up to that success, for all 64 entries.
func (w *countWindow) fillRoomFull(full, limit int64) {
	size := int64(len(w.ring))
	slack := full - w.tot.failures
	at := int64(w.pos)     // the oldest outcome of a full ring is at pos
	var seen, passed int64 // successes seen, outcomes passed
	var packed uint64
	for i := range int64(roomLen) {
		s, f := i*roomStep, int64(0)
		if j := slack + s + 1; j > 0 {
			for seen < j && passed < size {
				if w.ring[at]&outcomeFailure == 0 {
					seen++
				}
				passed++
				if at++; at == size {
					at = 0
				}
			}
			where := passed // the j-th success, 1-based, beyond the ring if need be
			if seen < j {
				where += j - seen
			}
			f = min(max(where-s-1, 0), limit)
		}
		w.storeRoom(i, f, &packed)
	}
}

// storeRoom packs entry i of room, f, storing each word of four once it is whole
// and only if it changed: a sync mostly finds the room it left.
func (w *countWindow) storeRoom(i, f int64, packed *uint64) {
	*packed |= uint64(f) << (16 * (i % 4))
	if i%4 == 3 {
		if r := &w.room[i/4]; r.Load() != *packed {
			r.Store(*packed)
		}
		*packed = 0
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

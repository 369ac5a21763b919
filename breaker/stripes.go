package breaker

import (
	"runtime"
	"sync/atomic"
	_ "unsafe" // for go:linkname
)

// procPin and procUnpin return the current P's index and keep the goroutine
// on it in between. They are the runtime's own (sync.Pool uses them), kept
// linkable on purpose: see go.dev/issue/67401.
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// cacheLine is the size that keeps two stripes from sharing a line.
const cacheLine = 64

type stripe struct {
	n atomic.Uint64
	_ [cacheLine - 8]byte
}

// stripes is a cumulative counter split into one cache line per P, so that
// calls on different cores never write the same line. Adding is one atomic
// add to the caller's own line; reading sums every line, which only the
// calls that need a global view (failures, slow calls, snapshots and the
// once-a-second roll) do.
type stripes struct {
	s    []stripe
	mask int
}

func newStripes() stripes {
	n := 1
	for n < runtime.GOMAXPROCS(0) {
		n <<= 1
	}
	return stripes{s: make([]stripe, n), mask: n - 1}
}

// add counts one. If GOMAXPROCS grew since the stripes were made, two Ps
// may share a line: still correct, only slower.
func (s *stripes) add() {
	i := procPin() & s.mask
	s.s[i].n.Add(1)
	procUnpin()
}

// sum reads every stripe. Each stripe only grows, so the result lies between
// the total when the read began and the total when it ended, and is the
// total at some instant in between.
func (s *stripes) sum() uint64 {
	var t uint64
	for i := range s.s {
		t += s.s[i].n.Load()
	}
	return t
}

// lane is one core's cache line of a time window: its fast successes, and
// the failures it may still count without a check (see timeWindow).
type lane struct {
	good  atomic.Uint64
	avail atomic.Int64
	// granted is the failures the window let this lane count without a
	// check, less what it took back; granted - avail of them were counted.
	// Only the holder of the window's mutex touches it.
	granted int64
	_       [cacheLine - 24]byte
}

// newLanes returns one lane per P (rounded up to a power of two) and the
// mask that picks a P's lane.
func newLanes() ([]lane, int) {
	n := 1
	for n < runtime.GOMAXPROCS(0) {
		n <<= 1
	}
	return make([]lane, n), n - 1
}

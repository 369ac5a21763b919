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

// cacheLine is the size that keeps two cores' counters from sharing a line.
const cacheLine = 64

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

// newLanes returns one lane per P (see laneCount) and the mask that picks a
// P's lane.
func newLanes() ([]lane, int) {
	n := laneCount()
	return make([]lane, n), n - 1
}

// laneCount is the number of per-core lanes a window keeps: GOMAXPROCS
// rounded up to a power of two, so that a P's lane is its index masked. If
// GOMAXPROCS grew since a window was made, two Ps may share a lane: still
// correct, only slower.
func laneCount() int {
	n := 1
	for n < runtime.GOMAXPROCS(0) {
		n <<= 1
	}
	return n
}

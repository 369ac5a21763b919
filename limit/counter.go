package limit

import (
	"runtime"
	"sync/atomic"
	_ "unsafe" // for go:linkname
)

// procPin and procUnpin return the current P's index and keep the goroutine
// on it in between. They are the runtime's own (sync.Pool uses them), kept
// linkable on purpose: see go.dev/issue/67401. The breaker core uses them
// the same way.
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// counter counts on one cache line per P, so that the cores rejecting
// calls at once do not write one line between them: a rejection stays a
// few nanoseconds with every core rejecting (one shared counter cost about
// twice the bare channel's rejection at -cpu 2). Reading it sums the lines.
type counter struct {
	lanes []lane
	mask  int
}

type lane struct {
	n atomic.Uint64
	_ [56]byte // the rest of the cache line
}

func newCounter() counter {
	n := 1
	for n < runtime.GOMAXPROCS(0) {
		n <<= 1
	}
	return counter{lanes: make([]lane, n), mask: n - 1}
}

func (c *counter) add() {
	p := procPin()
	procUnpin()
	c.lanes[p&c.mask].n.Add(1)
}

func (c *counter) load() uint64 {
	var sum uint64
	for i := range c.lanes {
		sum += c.lanes[i].n.Load()
	}
	return sum
}

package breaker

import (
	"sync"
	"sync/atomic"
	"time"
)

// coarseResolution is how often the process-wide second is refreshed. An
// outcome can land in the previous second for up to this long after a
// second begins, which moves nothing that matters in a window of seconds.
const coarseResolution = 50 * time.Millisecond

// coarseIdleTicks is how many refreshes without a reader stop the
// goroutine: after 200 ms without a TIME_BASED call it exits, so a program
// (or a goleak check) that is done with its breakers has no goroutine left.
const coarseIdleTicks = 4

// coarse is the current second on the monotonic clock (seconds since
// monoBase), kept by one goroutine so that the
// closed path of a TIME_BASED window and the rejections of an OPEN circuit
// do not call time.Now on every call (tens of nanoseconds on virtual
// machines). Every reader keeps the goroutine alive, and a reader that finds
// it stopped starts it again with a fresh second, so the second a reader
// gets is never more than a refresh (plus scheduling) old: no deadline that
// is compared with it depends on any other call being made. The goroutine
// stops when readers stop coming, so an idle process holds none.
var coarse struct {
	sec   atomic.Int64
	state atomic.Uint32 // coarseRunning | coarseUsed
	mu    sync.Mutex    // serialises starting and stopping
}

const (
	coarseRunning = 1 << iota
	coarseUsed    // a reader came since the last refresh
)

// monoBase is the origin of the coarse second. Every reading is
// time.Now().Sub(monoBase), which uses the monotonic clock: a step of the
// wall clock (NTP, an operator, a VM resumed) moves no coarse second, so an
// OPEN wait judged on them is neither lengthened nor shortened by it.
var monoBase = time.Now()

// monoSecond is t's second on the coarse scale; t must carry a monotonic
// reading (the system clock's do) for a wall step to leave it alone.
func monoSecond(t time.Time) int64 {
	d := t.Sub(monoBase)
	s := int64(d / time.Second)
	if d < 0 && d%time.Second != 0 {
		s-- // floor, so that the second before monoBase is -1
	}
	return s
}

// coarseSecond returns the current coarse second. In the steady state it is
// two atomic loads.
func coarseSecond() int64 {
	if coarse.state.Load() != coarseRunning|coarseUsed {
		wakeCoarse()
	}
	return coarse.sec.Load()
}

// wakeCoarse marks a reader and starts the refresher if it is not running.
func wakeCoarse() {
	if coarse.state.Or(coarseUsed)&coarseRunning != 0 {
		return
	}
	coarse.mu.Lock()
	defer coarse.mu.Unlock()
	if coarse.state.Load()&coarseRunning != 0 {
		return
	}
	coarse.sec.Store(monoSecond(time.Now()))
	coarse.state.Store(coarseRunning | coarseUsed)
	go refreshCoarse()
}

// refreshCoarse keeps coarse.sec current until no reader has come for
// coarseIdleTicks refreshes. It stops only if no reader marked itself
// since the last refresh (the compare-and-swap fails otherwise), and a
// reader that comes after it stopped starts it again.
func refreshCoarse() {
	t := time.NewTicker(coarseResolution)
	defer t.Stop()
	idle := 0
	for range t.C {
		coarse.sec.Store(monoSecond(time.Now()))
		if coarse.state.And(^uint32(coarseUsed))&coarseUsed != 0 {
			idle = 0
			continue
		}
		if idle++; idle < coarseIdleTicks {
			continue
		}
		coarse.mu.Lock()
		stopped := coarse.state.CompareAndSwap(coarseRunning, 0)
		coarse.mu.Unlock()
		if stopped {
			return
		}
		idle = 0
	}
}

// second is the current second for the bookkeeping of p's window: the
// coarse second for a TIME_BASED window on the system clock, the injected
// clock's Unix second otherwise. One window uses one scale throughout.
func (b *Breaker) second(p *phase) int64 {
	if p.coarse {
		return coarseSecond()
	}
	return b.cfg.Clock.Now().Unix()
}

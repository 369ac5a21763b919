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

// coarse is the current Unix second, kept by one goroutine so that the
// closed path of a TIME_BASED window does not call time.Now on every call
// (tens of nanoseconds on virtual machines). The goroutine starts with the
// first reader and stops when readers stop coming.
var coarse struct {
	sec     atomic.Int64
	running atomic.Bool
	used    atomic.Bool // a reader came since the last refresh
	mu      sync.Mutex  // serialises starting and stopping
}

// coarseSecond returns the current Unix second, starting the refresher if
// it is not running. In the steady state it is three atomic loads.
func coarseSecond() int64 {
	if !coarse.used.Load() {
		coarse.used.Store(true)
	}
	if !coarse.running.Load() {
		startCoarse()
	}
	return coarse.sec.Load()
}

func startCoarse() {
	coarse.mu.Lock()
	defer coarse.mu.Unlock()
	if coarse.running.Load() {
		return
	}
	coarse.sec.Store(time.Now().Unix())
	coarse.running.Store(true)
	go refreshCoarse()
}

// refreshCoarse keeps coarse.sec current until no reader has come for
// coarseIdleTicks refreshes. A reader that saw running just before it
// stopped read a second that was current then; the next one restarts it.
func refreshCoarse() {
	t := time.NewTicker(coarseResolution)
	defer t.Stop()
	idle := 0
	for range t.C {
		coarse.sec.Store(time.Now().Unix())
		if coarse.used.Swap(false) {
			idle = 0
			continue
		}
		if idle++; idle < coarseIdleTicks {
			continue
		}
		coarse.mu.Lock()
		if coarse.used.Load() {
			coarse.mu.Unlock()
			idle = 0
			continue
		}
		coarse.running.Store(false)
		coarse.mu.Unlock()
		return
	}
}

// second is the current Unix second for window bookkeeping.
func (b *Breaker) second() int64 {
	if b.coarse {
		return coarseSecond()
	}
	return b.cfg.Clock.Now().Unix()
}

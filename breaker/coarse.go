package breaker

import (
	"sync"
	"sync/atomic"
	"time"
)

// coarseResolution is how often the process-wide second is refreshed. An
// outcome can land in the previous second's bucket for up to this long after
// a second begins, which moves nothing that matters in a window of seconds.
const coarseResolution = 50 * time.Millisecond

// coarse is the current Unix second, kept by one goroutine per process so
// that the closed path of a TIME_BASED window does not pay for time.Now on
// every call (tens of nanoseconds on virtual machines). It starts with the
// first such breaker and runs for the life of the process.
var coarse struct {
	once sync.Once
	sec  atomic.Int64
}

// startCoarse starts the process-wide second, once.
func startCoarse() {
	coarse.once.Do(func() {
		coarse.sec.Store(time.Now().Unix())
		go func() {
			for now := range time.Tick(coarseResolution) {
				coarse.sec.Store(now.Unix())
			}
		}()
	})
}

// second is the current Unix second for window bookkeeping.
func (b *Breaker) second() int64 {
	if b.coarse {
		return coarse.sec.Load()
	}
	return b.cfg.Clock.Now().Unix()
}

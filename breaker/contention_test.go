package breaker_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// atomicClock is a clock held still, as a user's simulation keeps one: its
// reading is an atomic, so the clock itself adds no synchronisation between
// the goroutines that read it (a mutex would order them for the race
// detector and hide a race in the breaker).
type atomicClock struct{ ns atomic.Int64 }

func (c *atomicClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// padded calls done depth frames down, each with a 1 KiB frame, so that the
// goroutine's stack grows (and moves) between outcomes: stack growth is a
// point where the scheduler may switch goroutines on a P.
//
//go:noinline
func padded(depth int, done func()) byte {
	var pad [1024]byte
	pad[depth%len(pad)] = byte(depth)
	if depth == 0 {
		done()
		return pad[0]
	}
	return padded(depth-1, done) + pad[depth%len(pad)]
}

// TestContendedOutcomesAreRaceFreeAndExact: eight goroutines each complete
// 2,000 × (a success, a failure) on one breaker with a clock held still,
// some of their Done calls a few frames deeper under 1 KiB stack pads. The
// true failure rate is never above 50 %, so a threshold of 50.01 % with a
// minimum of 3 calls must never open the circuit, and once every call
// returned the window holds all of them. Under -race it is the check that
// the windows' lanes, which count outcomes per core without a lock, publish
// what they write; run it with -count in the hundreds on a busy machine
// (see CONTRIBUTING.md).
func TestContendedOutcomesAreRaceFreeAndExact(t *testing.T) {
	const goroutines, pairs = 8, 2000
	for _, wt := range []struct {
		typ  breaker.WindowType
		size int
	}{{breaker.TimeBased, 10}, {breaker.CountBased, 65536}} {
		t.Run(wt.typ.String(), func(t *testing.T) {
			clk := &atomicClock{}
			clk.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			b := mustNew(t, breaker.Config{
				WindowType: wt.typ, WindowSize: wt.size, MinimumNumberOfCalls: 3,
				FailureRateThreshold: 50.01, WaitDurationInOpenState: time.Hour, Clock: clk,
			})
			var rejected atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range pairs {
						for _, o := range []breaker.Outcome{breaker.Success, breaker.Failure} {
							p, err := b.Allow()
							if err != nil {
								rejected.Add(1)
								continue
							}
							if depth := (g + i) % 4; depth > 0 {
								padded(depth, func() { p.Done(o) })
							} else {
								p.Done(o)
							}
						}
					}
				})
			}
			wg.Wait()
			m := b.Metrics()
			if m.State != breaker.Closed || rejected.Load() != 0 {
				t.Fatalf("%s with %d calls rejected at a true failure rate of at most 50%% (threshold 50.01%%): %+v", m.State, rejected.Load(), m)
			}
			if want := int64(goroutines * pairs * 2); m.Calls != want || m.FailedCalls != want/2 {
				t.Fatalf("window %+v, want %d calls of which %d failed", m, want, want/2)
			}
		})
	}
}

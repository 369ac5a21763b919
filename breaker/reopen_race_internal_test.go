//go:build race

package breaker

import (
	"testing"
	"time"
)

// TestReopeningKeepsAFailedSwapsRelease is the race detector's: a failure
// on a lane wrote its log entry, found the lane sealed (its swap failed)
// and published the write with an add of zero, after the sync had read the
// word and before it reopened the lane. The next failure on the lane (on
// the same P, another goroutine) writes the same entry: the two writes are
// ordered only if the reopening keeps the add's release, which a store of
// the new generation does not. The goroutines are put in that order by
// sleeps, which order nothing for the race detector; with a store it
// reports "race detected during execution of test".
func TestReopeningKeepsAFailedSwapsRelease(t *testing.T) {
	w := newCountWindowLanes(&Config{WindowSize: 10, MinimumNumberOfCalls: 1, FailureRateThreshold: 50}, true, 2)
	l := &w.lanes[0]
	l.word.Add(1 << 32) // the sync seals the lane,
	v := l.word.Load()  // reads its word,
	go func() {         // meanwhile the failure whose swap failed:
		l.seen[0] = 7
		l.word.Add(0)
	}()
	time.Sleep(50 * time.Millisecond)
	reopenFrom(l, v) // and reopens the lane.
	done := make(chan uint64)
	go func() { // The next failure on the lane.
		gen := l.word.Load() >> 32
		l.seen[0] = 8
		done <- gen
	}()
	if gen := <-done; gen&1 != 0 {
		t.Fatalf("generation %d after reopening: still sealed", gen)
	}
}

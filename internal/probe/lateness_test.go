package probe

import (
	"testing"
	"time"
)

// TestLatenessHysteresis: Late rises after three late probes in a row and
// clears after three on time in a row; anything shorter (a garbage
// collection, one slow tick) changes nothing. Late means more than half an
// interval late.
func TestLatenessHysteresis(t *testing.T) {
	const interval = time.Second
	late, onTime, edge := 2*time.Second, time.Duration(0), interval/2
	steps := []struct {
		lag  time.Duration
		want bool
	}{
		{late, false}, {late, false}, {onTime, false}, // two late, then one on time: reset
		{late, false}, {late, false}, {late, true}, // three in a row
		{edge, true}, {onTime, true}, {late, true}, // half an interval is on time; one late resets the count
		{onTime, true}, {onTime, true}, {onTime, false}, // three on time clear it
		{late, false},
	}
	var o Observation
	for i, s := range steps {
		o = lateness(o, s.lag, interval)
		if o.Late != s.want {
			t.Fatalf("step %d (lag %v): Late %v, want %v", i, s.lag, o.Late, s.want)
		}
	}
}

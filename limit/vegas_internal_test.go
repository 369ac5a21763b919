package limit

import (
	"math"
	"testing"
)

// TestVegasSteps: each rule of the estimate, one window at a time.
func TestVegasSteps(t *testing.T) {
	const ms = 1e6
	steady := func(rtt float64, inFlight int64) observation {
		return observation{avg: rtt, min: rtt, max: rtt, inFlight: inFlight}
	}
	for _, tc := range []struct {
		name       string
		v          vegas
		o          observation
		want       float64
		wantNoLoad float64 // the no-load latency after the window
	}{
		{"no queue and enough calls: grows by beta", vegas{limit: 20, noLoad: 10 * ms},
			steady(10*ms, 20), 20 + 6*math.Log10(20), 10 * ms},
		{"a short queue: grows by log10", vegas{limit: 100, noLoad: 10 * ms},
			observation{avg: 10.5 * ms, min: 10 * ms, max: 11 * ms, inFlight: 100}, 102, 10 * ms},
		{"a queue between alpha and beta: holds", vegas{limit: 100, noLoad: 10 * ms},
			observation{avg: 11 * ms, min: 10 * ms, max: 12 * ms, inFlight: 100}, 100, 10 * ms},
		{"too few calls in flight to learn: holds", vegas{limit: 100, noLoad: 10 * ms},
			steady(10*ms, 40), 100, 10 * ms},
		{"a long queue: cut to the calls served without queueing plus alpha", vegas{limit: 40, noLoad: 2000 * ms},
			steady(4000*ms, 40), 20 + 3*math.Log10(40), 2000 * ms},
		{"a cut takes at most half", vegas{limit: 40, noLoad: 10 * ms},
			steady(2000*ms, 40), 20, 10 * ms},
		{"a faster call lowers the no-load latency", vegas{limit: 40, noLoad: 10 * ms},
			steady(5*ms, 40), 40 + 6*math.Log10(40), 5 * ms},
		{"latency that did not follow a cut is the callee's own", vegas{limit: 20, noLoad: 10 * ms, cut: cut{rtt: 2000 * ms, from: 40, to: 20}},
			observation{avg: 2000 * ms, min: 1990 * ms, max: 2010 * ms, inFlight: 20}, 20 + 6*math.Log10(20), 1990 * ms},
		{"a window that straddled the slowdown is judged by its slowest call", vegas{limit: 11, noLoad: 10 * ms, cut: cut{rtt: 2005 * ms, from: 22, to: 11}},
			observation{avg: 2000 * ms, min: 2000 * ms, max: 2002 * ms, inFlight: 11}, 11 + 6*math.Log10(11), 2000 * ms},
		{"latency that followed a cut keeps the estimate", vegas{limit: 20, noLoad: 1000 * ms, cut: cut{rtt: 4000 * ms, from: 40, to: 20}},
			steady(2000*ms, 20), 10 + 3*math.Log10(20), 1000 * ms},
		{"latency that rose after a cut is a queue still filling", vegas{limit: 31, noLoad: 100 * ms, cut: cut{rtt: 160 * ms, from: 40, to: 31}},
			observation{avg: 313 * ms, min: 301 * ms, max: 320 * ms, inFlight: 31}, 31 / 2.0, 100 * ms},
		{"never above the maximum", vegas{limit: 195, noLoad: 10 * ms},
			steady(10*ms, 195), 200, 10 * ms},
		{"never below the minimum", vegas{limit: 16, noLoad: 10 * ms},
			steady(2000*ms, 16), 10, 10 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.v
			if got := v.update(tc.o, 10, 200); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("limit %v, want %v", got, tc.want)
			}
			if v.noLoad != tc.wantNoLoad {
				t.Fatalf("no-load latency %v ms, want %v ms", v.noLoad/ms, tc.wantNoLoad/ms)
			}
		})
	}
}

package limit

import (
	"math"
	"testing"
)

// TestVegasSteps: each rule of the estimate, one window at a time.
func TestVegasSteps(t *testing.T) {
	const ms = 1e6
	// steady is a window whose calls all took rtt, with n in flight at each
	// admission.
	steady := func(rtt, n float64) observation {
		return observation{rtt: rtt, min: rtt, inFlight: n, peak: n}
	}
	// window is one whose fastest three quarters took rtt on average, the
	// fastest of them 10 ms.
	window := func(rtt, n float64) observation {
		return observation{rtt: rtt, min: 10 * ms, inFlight: n, peak: n}
	}
	u := func(n float64) float64 { return min(max(1, math.Log10(n)), n*0.075) }
	for _, tc := range []struct {
		name       string
		v          vegas
		o          observation
		lo         float64 // MinLimit; 1 unless set
		want       float64
		wantNoLoad float64 // the no-load latency after the window
	}{
		{name: "no queue and every permit in use: grows by beta", v: vegas{limit: 20, noLoad: 10 * ms},
			o: steady(10*ms, 20), want: 20 + 6*u(20), wantNoLoad: 10 * ms},
		{name: "a short queue: grows by a unit", v: vegas{limit: 100, noLoad: 10 * ms},
			o: window(10.5*ms, 100), want: 102, wantNoLoad: 10 * ms},
		{name: "a queue between alpha and beta: holds", v: vegas{limit: 100, noLoad: 10 * ms},
			o: window(11*ms, 100), want: 100, wantNoLoad: 10 * ms},
		{name: "one window with a long queue holds: a pause passes", v: vegas{limit: 40, noLoad: 10 * ms},
			o: steady(2000*ms, 40), want: 40, wantNoLoad: 10 * ms},
		{name: "a long queue in two windows in a row: cut to the calls served without queueing plus alpha", v: vegas{limit: 40, noLoad: 2000 * ms, long: true},
			o: steady(4000*ms, 40), want: 20 + 3*u(40), wantNoLoad: 2000 * ms},
		{name: "a cut takes at most half the calls in flight", v: vegas{limit: 40, noLoad: 10 * ms, long: true},
			o: steady(2000*ms, 40), want: 20, wantNoLoad: 10 * ms},
		{name: "the queue is reckoned on the calls in flight, not the limit", v: vegas{limit: 100, noLoad: 4 * ms, long: true},
			o: steady(8*ms, 16), want: 8 + 3*u(16), wantNoLoad: 4 * ms},
		{name: "a small limit tolerates a queue of less than half its calls", v: vegas{limit: 3, noLoad: 4 * ms, long: true},
			o: steady(12*ms, 3), want: 1 + 3*u(3), wantNoLoad: 4 * ms},
		{name: "a limit above twice the calls in flight comes down toward twice them", v: vegas{limit: 100, noLoad: 10 * ms},
			o: observation{rtt: 10 * ms, min: 10 * ms, inFlight: 20, peak: 30}, want: 60, wantNoLoad: 10 * ms},
		{name: "a limit never grows past twice the calls in flight", v: vegas{limit: 30, noLoad: 10 * ms},
			o: observation{rtt: 10 * ms, min: 10 * ms, inFlight: 12, peak: 16}, want: 32, wantNoLoad: 10 * ms},
		{name: "the calls in flight of the last windows bound it, not the last window's alone", v: vegas{limit: 30, noLoad: 10 * ms, peaks: [peakWindows]float64{40}, w: 1},
			o: observation{rtt: 10 * ms, min: 10 * ms, inFlight: 12, peak: 16}, want: 30 + 6*u(12), wantNoLoad: 10 * ms},
		{name: "a faster call lowers the no-load latency", v: vegas{limit: 40, noLoad: 10 * ms},
			o: steady(5*ms, 40), want: 40 + 6*u(40), wantNoLoad: 5 * ms},
		{name: "latency that did not follow the calls in flight down is the callee's own: the limit goes back to where it was before the cuts", v: vegas{limit: 20, noLoad: 10 * ms, cut: cut{rtt: 2000 * ms, min: 1995 * ms, inFlight: 40}, before: 40},
			o: observation{rtt: 2000 * ms, min: 1990 * ms, inFlight: 20, peak: 20}, want: 40, wantNoLoad: 1990 * ms},
		{name: "a window whose fastest call followed the calls in flight down is not the callee's own latency (a pause slows some calls, not all)", v: vegas{limit: 20, noLoad: 10 * ms, cut: cut{rtt: 2000 * ms, min: 1995 * ms, inFlight: 40}, before: 40},
			o: observation{rtt: 2000 * ms, min: 900 * ms, inFlight: 20, peak: 20}, want: 20, wantNoLoad: 10 * ms},
		{name: "latency that followed the calls in flight down keeps the estimate", v: vegas{limit: 20, noLoad: 1000 * ms, cut: cut{rtt: 4000 * ms, min: 4000 * ms, inFlight: 40}, long: true},
			o: steady(2000*ms, 20), want: 10 + 3*u(20), wantNoLoad: 1000 * ms},
		// Issue 55: 64 callers, a limit cut from 85 to 42: the calls in
		// flight fell from 64 to 42, not in proportion to the limit, and
		// so did the latency (32 ms to 24). That is a queue of ours.
		{name: "with fewer callers than the limit, latency that fell with the calls in flight is a queue of ours", v: vegas{limit: 42, noLoad: 4 * ms, cut: cut{rtt: 32 * ms, min: 30 * ms, inFlight: 64}, long: true},
			o: observation{rtt: 24 * ms, min: 22 * ms, inFlight: 42, peak: 42}, want: 21, wantNoLoad: 4 * ms},
		{name: "a cut that took too few calls out of flight tests nothing", v: vegas{limit: 60, noLoad: 4 * ms, cut: cut{rtt: 32 * ms, min: 30 * ms, inFlight: 64}, long: true},
			o: steady(32*ms, 60), want: 30, wantNoLoad: 4 * ms},
		{name: "latency that rose after a cut is a queue still filling", v: vegas{limit: 31, noLoad: 100 * ms, cut: cut{rtt: 160 * ms, min: 150 * ms, inFlight: 40}, long: true},
			o: observation{rtt: 301 * ms, min: 290 * ms, inFlight: 20, peak: 31}, want: 31 / 2.0, wantNoLoad: 100 * ms},
		{name: "never above the maximum", v: vegas{limit: 195, noLoad: 10 * ms},
			o: steady(10*ms, 195), want: 200, wantNoLoad: 10 * ms},
		{name: "never below the minimum", v: vegas{limit: 16, noLoad: 10 * ms, long: true},
			o: steady(2000*ms, 16), lo: 10, want: 10, wantNoLoad: 10 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, lo := tc.v, max(tc.lo, 1)
			if got := v.update(tc.o, lo, 200); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("limit %v, want %v", got, tc.want)
			}
			if v.noLoad != tc.wantNoLoad {
				t.Fatalf("no-load latency %v ms, want %v ms", v.noLoad/ms, tc.wantNoLoad/ms)
			}
		})
	}
}

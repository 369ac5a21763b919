package limit

import (
	"math"
	"slices"
)

// vegas is the adaptive limit's estimate, TCP Vegas's idea as Netflix's
// concurrency-limits applies it to calls: with the callee's latency
// without load (noLoad) and the latency of recent calls (rtt), the calls of
// ours that wait in its queue are inFlight × (1 − noLoad/rtt), by Little's
// law. Below alpha of them the limit grows, above beta it shrinks, between
// them it holds. alpha and beta grow with the log of the calls in flight,
// so many calls tolerate a longer queue, and are below a quarter and a
// half of them, so a small limit holds within twice what the callee
// serves (one queued behind one served is too many).
//
// The queue is reckoned on the calls that were in flight when the window's
// calls were admitted, not on the limit: a call site with fewer callers
// than its limit has fewer calls queued than the limit would say. A
// window's latency is the mean of its fastest three quarters of calls, and
// the no-load latency the fastest call seen. A mean, because by Little's
// law it is the mean that grows with the calls queued, and a callee that
// serves in batches lets some calls through without a wait while a queue
// stands (every call admitted just before a batch ends); its slowest
// quarter left out, because a call's own noise (a pause, a slow worker)
// only ever adds. The price of comparing a mean with the fastest call:
// calls whose service time spreads read part of the spread as queue, a few
// percent of the calls in flight at ±10 %, which is within the queue a
// limit of a hundred or two tolerates; a spread of ±25 % holds a callee of
// a hundred workers near forty.
//
// Changes from Netflix's VegasLimit:
//
//   - A cut is a step to the estimate, not a nibble: the limit goes to the
//     calls the callee serves without queueing (inFlight × noLoad/rtt)
//     plus alpha, but never below half the calls in flight per window.
//     Netflix takes log10(limit) off per sample, which needs hundreds of
//     slow samples to come down from a high limit. But it takes two
//     windows in a row above beta: a pause of the callee or of this
//     machine fills one window with slow calls and passes, a queue of ours
//     stays.
//
//   - The no-load latency is tested, not only probed. After a cut, fewer
//     of our calls are in flight, and a queue of ours shrinks with them:
//     the next window's latency falls in proportion to the calls in flight
//     (not to the limit: with fewer callers than the limit, the calls in
//     flight fall less), but not below the no-load latency. If it fell by
//     less than a third of that, and has not risen (which a queue still
//     filling does), and so did its fastest call (a pause slows some calls
//     of a window, a slower callee every one), the latency is the callee's
//     own: its new no-load latency is that window's fastest call, and the
//     limit goes back to where it was before the cuts that read it as a
//     queue. A cut that took less than a quarter of the calls out of
//     flight tests nothing. Netflix resets the no-load latency every 30 ×
//     limit samples instead, which is minutes at a slow callee, while the
//     stale estimate keeps cutting the limit to its minimum.
//
//   - The limit stays within twice the most calls in flight of the last
//     16 windows: above that it learns nothing and only exposes the callee
//     to a burst (failsafe-go's adaptive limiter caps it at five times),
//     and the most of 16 windows, not the last one's, keeps the headroom a
//     lull would take from the next burst.
type vegas struct {
	limit  float64
	noLoad float64              // the fastest call seen since the last reset, ns; 0 before the first
	cut    cut                  // the last window's cut, tested by the next window
	before float64              // the limit before the current run of windows with a long queue; 0: none
	long   bool                 // the last window's queue was above beta
	peaks  [peakWindows]float64 // the most calls in flight of the last windows, a ring
	w      int                  // the next slot of peaks
}

// peakWindows is how many windows the calls in flight that bound the
// limit are remembered for: a limit within twice the most of them
// follows a demand that varies from window to window (a burst, a lull)
// without dropping below what the next burst needs.
const peakWindows = 16

// demand records the most calls in flight of a window and returns the
// most of the last peakWindows windows.
func (v *vegas) demand(peak float64) float64 {
	v.peaks[v.w%peakWindows] = peak
	v.w++
	return slices.Max(v.peaks[:])
}

// risen is how far above the latency before a cut the next window's may
// be and still count as "did not move": call-to-call noise.
const risen = 1.1

// telling is how far a cut must bring the calls in flight down for the
// next window's latency to tell a queue of ours from the callee's own.
const telling = 0.75

type cut struct {
	rtt, min, inFlight float64 // zero when the last window did not cut
}

// observation is one window of calls admitted under the same limit.
type observation struct {
	rtt      float64 // the window's latency: the mean of its fastest three quarters of calls, ns
	min      float64 // its fastest call, ns
	inFlight float64 // the mean of the calls in flight when each was admitted
	peak     float64 // the most of them
}

// unit is the queue that l calls in flight tolerate per step: log10(l), at
// least 1, at most 7.5 % of them (so that beta, six of them, is below half
// the calls in flight, and a small limit holds within twice what the callee
// serves).
func unit(l float64) float64 { return min(max(1, math.Log10(l)), l*0.075) }

// update returns the limit after window o, clamped to [lo, hi].
func (v *vegas) update(o observation, lo, hi float64) float64 {
	if v.noLoad == 0 || o.min < v.noLoad {
		v.noLoad = o.min
	}
	restore := 0.0
	if c := v.cut; c.inFlight > 0 {
		v.cut = cut{}
		// Both the window's latency and its fastest call: a pause of this
		// machine slows some calls of a window, a slower callee every one.
		stayed := func(before, now float64) bool {
			drained := max(v.noLoad, before*o.inFlight/c.inFlight)
			return now > before-(before-drained)/3 && now <= before*risen
		}
		if o.inFlight <= c.inFlight*telling && stayed(c.rtt, o.rtt) && stayed(c.min, o.min) {
			// The latency did not follow the calls in flight down: it is
			// the callee's own. The cuts since the last window that saw no
			// queue read it as ours, against a stale no-load latency: the
			// limit goes back to where it was before them.
			v.noLoad = o.min
			restore = v.before
		}
	}
	l, n := v.limit, o.inFlight
	demand := v.demand(o.peak)
	queue := n * (1 - v.noLoad/o.rtt)
	u := unit(n) // the queue's tolerance follows the calls that could queue
	alpha, beta := 3*u, 6*u
	next, long := l, queue > beta
	switch {
	case long && v.long:
		next = max(min(l, demand)/2, n*v.noLoad/o.rtt+alpha)
	case long:
		// One window with a long queue holds: a pause of the callee's
		// or of this machine's reads as one, and passes; a queue of ours
		// is there in the next window too.
	case demand*2 < l:
		// Too few calls to learn anything about a higher limit, and a
		// limit this far above them only exposes the callee to a burst.
		next = max(2*demand, l/2)
	case queue <= u:
		next = l + beta
	case queue < alpha:
		next = l + u
	}
	v.long = long
	next = min(next, max(l, 2*demand)) // never grow past twice the calls in flight
	next = min(max(next, restore, lo), hi)
	switch {
	case long && restore == 0:
		if v.before == 0 {
			v.before = l
		}
	default:
		v.before = 0
	}
	if next < l {
		v.cut = cut{rtt: o.rtt, min: o.min, inFlight: n}
	}
	v.limit = next
	return next
}

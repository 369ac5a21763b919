package limit

import "math"

// vegas is the adaptive limit's estimate, TCP Vegas's idea as Netflix's
// concurrency-limits applies it to calls: with the callee's latency
// without load (noLoad) and the latency of recent calls (rtt), the calls of
// ours that wait in its queue are inFlight × (1 − noLoad/rtt), by Little's
// law. Below alpha of them the limit grows, above beta it shrinks, between
// them it holds. alpha and beta grow with the log of the calls in flight,
// so many calls tolerate a longer queue, and are at most a sixth and a
// third of them, so a small limit holds within 1.5 times what the callee
// serves.
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
// Three changes from Netflix's VegasLimit:
//
//   - A cut is a step to the estimate, not a nibble: the limit goes to the
//     calls the callee serves without queueing (inFlight × noLoad/rtt)
//     plus alpha, but never below half the calls in flight per window.
//     Netflix takes log10(limit) off per sample, which needs hundreds of
//     slow samples to come down from a high limit.
//
//   - The no-load latency is tested, not only probed. After a cut, fewer
//     of our calls are in flight, and a queue of ours shrinks with them:
//     the next window's latency falls in proportion to the calls in flight
//     (not to the limit: with fewer callers than the limit, the calls in
//     flight fall less), but not below the no-load latency. If it stays
//     above halfway between that and the latency before (and has not
//     risen, which a queue still filling does), the latency is the
//     callee's own, and its new no-load latency is that window's fastest
//     call. A cut that took too few calls out of flight to tell, less
//     than a quarter, tests nothing. Netflix resets the no-load latency
//     every 30 × limit samples instead, which is minutes at a slow callee,
//     while the stale estimate keeps cutting the limit to its minimum.
//
//   - The limit stays within twice the most calls in flight of the last
//     window: above that it learns nothing and only exposes the callee to
//     a burst (failsafe-go's adaptive limiter caps it at five times).
type vegas struct {
	limit  float64
	noLoad float64 // the fastest call seen since the last reset, ns; 0 before the first
	cut    cut     // the last window's cut, tested by the next window
}

// risen is how far above the latency before a cut the next window's may
// be and still count as "did not move": call-to-call noise.
const risen = 1.1

// telling is how far a cut must bring the calls in flight down for the
// next window's latency to tell a queue of ours from the callee's own.
const telling = 0.75

type cut struct {
	rtt, inFlight float64 // zero when the last window did not cut
}

// observation is one window of calls admitted under the same limit.
type observation struct {
	rtt      float64 // the window's latency: the mean of its fastest three quarters of calls, ns
	min      float64 // its fastest call, ns
	inFlight float64 // the mean of the calls in flight when each was admitted
	peak     float64 // the most of them
}

// unit is the queue that l calls in flight tolerate per step: log10(l), at
// least 1, at most l/18 (so that beta, six of them, is at most a third of
// the calls in flight, and a limit holds within 1.5 times what the callee
// serves even when it is small).
func unit(l float64) float64 { return min(max(1, math.Log10(l)), l/18) }

// update returns the limit after window o, clamped to [lo, hi].
func (v *vegas) update(o observation, lo, hi float64) float64 {
	if v.noLoad == 0 || o.min < v.noLoad {
		v.noLoad = o.min
	}
	if c := v.cut; c.inFlight > 0 {
		v.cut = cut{}
		if o.inFlight <= c.inFlight*telling {
			drained := max(v.noLoad, c.rtt*o.inFlight/c.inFlight)
			if o.rtt > (drained+c.rtt)/2 && o.rtt <= c.rtt*risen {
				v.noLoad = o.min // the latency did not follow the calls in flight down
			}
		}
	}
	l, n := v.limit, o.inFlight
	queue := n * (1 - v.noLoad/o.rtt)
	u := unit(n) // the queue's tolerance follows the calls that could queue
	alpha, beta := 3*u, 6*u
	next := l
	switch {
	case queue > beta:
		next = max(min(l, o.peak)/2, n*v.noLoad/o.rtt+alpha)
	case o.peak*2 < l:
		// Too few calls to learn anything about a higher limit, and a
		// limit this far above them only exposes the callee to a burst.
		next = max(2*o.peak, l/2)
	case queue <= u:
		next = l + beta
	case queue < alpha:
		next = l + u
	}
	next = min(next, max(l, 2*o.peak)) // never grow past twice the calls in flight
	next = min(max(next, lo), hi)
	if next < l {
		v.cut = cut{rtt: o.rtt, inFlight: n}
	}
	v.limit = next
	return next
}

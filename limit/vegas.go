package limit

import "math"

// vegas is the adaptive limit's estimate, TCP Vegas's idea as Netflix's
// concurrency-limits applies it to calls: with the callee's latency
// without load (noLoad) and the latency of recent calls (rtt), the calls of
// ours that wait in its queue are limit × (1 − noLoad/rtt), by Little's
// law. Below alpha of them the limit grows, above beta it shrinks, between
// them it holds; alpha and beta grow with the log of the limit, so a large
// limit tolerates a longer queue.
//
// Two changes from Netflix's VegasLimit, both for a callee whose latency
// jumps (10 ms to 2 s) and stays there:
//
//   - A cut is a step to the estimate, not a nibble: the limit goes to the
//     calls the callee serves without queueing (limit × noLoad/rtt) plus
//     alpha, but never below half the limit per window. Netflix takes
//     log10(limit) off per sample, which needs hundreds of slow samples to
//     come down from a high limit.
//
//   - The no-load latency is tested, not only probed: after a cut, the next
//     window's latency should fall in proportion (a queue of ours drains).
//     If it stays above halfway between that and the old latency (and has
//     not risen, which a queue still filling does), the latency is the
//     callee's own, and its new no-load latency is that window's fastest
//     call. Netflix resets it every 30 × limit samples
//     instead, which is minutes at a slow callee, while the stale 10 ms
//     estimate keeps cutting the limit to its minimum.
type vegas struct {
	limit  float64
	noLoad float64 // the fastest call seen since the last reset, ns; 0 before the first
	cut    cut     // the last window's cut, tested by the next window
}

// risen is how far above the latency before a cut the next window's may
// be and still count as "did not move": call-to-call noise.
const risen = 1.1

type cut struct {
	rtt, from, to float64 // zero when the last window did not cut
}

// observation is one window of calls admitted under the same limit.
type observation struct {
	avg, min, max float64 // latency, ns
	inFlight      int64   // the most calls in flight the window saw
}

// lg is log10 with a floor of 1, so that small limits still have a queue
// they tolerate.
func lg(limit float64) float64 { return max(1, math.Log10(limit)) }

// update returns the limit after window o, clamped to [lo, hi].
func (v *vegas) update(o observation, lo, hi float64) float64 {
	if v.noLoad == 0 || o.min < v.noLoad {
		v.noLoad = o.min
	}
	if c := v.cut; c.from > 0 {
		v.cut = cut{}
		// Queueing of ours would have fallen in proportion to the cut
		// (to/from of c.rtt) and a callee's own latency not at all; take
		// the halfway mark between them. A latency that rose instead is
		// a queue still filling, which says neither. The slowest call
		// compares: a window that straddled the callee's slowdown has
		// fast calls in its average but not in its maximum.
		if o.max > c.rtt*(1+c.to/c.from)/2 && o.max <= c.rtt*risen {
			v.noLoad = o.min // the latency did not follow the limit down
		}
	}
	l := v.limit
	queue := l * (1 - v.noLoad/o.avg)
	alpha, beta := 3*lg(l), 6*lg(l)
	next := l
	switch {
	case queue > beta:
		next = max(l/2, l*v.noLoad/o.avg+alpha)
	case float64(o.inFlight)*2 < l:
		// Too few calls to learn anything about a higher limit.
	case queue <= lg(l):
		next = l + beta
	case queue < alpha:
		next = l + lg(l)
	}
	next = min(max(next, lo), hi)
	if next < l {
		v.cut = cut{rtt: o.max, from: l, to: next}
	}
	v.limit = next
	return next
}

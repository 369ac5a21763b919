package breaker

import (
	"sync/atomic"
	"time"
)

// Totals are a circuit's cumulative call counts since counting started
// (Breaker.EnableTotals): they survive transitions and Reset, so that a
// monitoring system can take rates of them. They are what Resilience4j's
// Micrometer binding exports as the resilience4j.circuitbreaker.calls timer
// and the not.permitted.calls counter, and like that binding they count
// from when a consumer attaches. Calls admitted while DISABLED are not
// counted, as Resilience4j publishes no call events in that state; a call
// whose generation ended before it completed is counted (it happened) but
// not recorded in the window.
type Totals struct {
	// Counting is whether the breaker counts calls: EnableTotals was called
	// or RecordCallDurations is set. Without it every count is zero.
	Counting bool
	// Successful, Failed and Ignored count completed calls by outcome.
	Successful, Failed, Ignored uint64
	// NotPermitted counts calls rejected by OPEN, FORCED_OPEN or a full
	// HALF_OPEN circuit.
	NotPermitted uint64
	// Timed is whether call durations are measured (Config.RecordCallDurations
	// or slow-call tracking is on). Without it the duration fields are zero
	// and mean "not measured", not "instant".
	Timed bool
	// SuccessfulTime, FailedTime and IgnoredTime are the summed durations of
	// the calls counted above.
	SuccessfulTime, FailedTime, IgnoredTime time.Duration
	// SuccessfulMax, FailedMax and IgnoredMax are the longest such call of
	// the latest clock minute that had one, reported until that minute ends
	// more than a minute ago, then zero: a decaying maximum, as Micrometer's
	// timer max is.
	SuccessfulMax, FailedMax, IgnoredMax time.Duration
}

// outcomeTime is one outcome's measured durations. max packs the minute
// (counted from Breaker.base) in its high 24 bits and the longest duration
// in that minute, in nanoseconds, in the low 40 (about 18 minutes; longer
// calls are clamped).
type outcomeTime struct {
	nanos, max atomic.Uint64
}

const (
	maxNanosBits = 40
	maxNanosMask = 1<<maxNanosBits - 1
)

// totals are kept per breaker, on cache lines of their own.
type totals struct {
	_            [64]byte
	n            [3]atomic.Uint64 // indexed by Outcome
	notPermitted atomic.Uint64
	times        [3]outcomeTime // indexed by Outcome; only when timed
	_            [64]byte
}

// count counts one completed call whose duration is not measured.
func (t *totals) count(o Outcome) {
	t.n[outcomeIndex(o)].Add(1)
}

// outcomeIndex maps an out-of-range Outcome to Success, as the window counts it.
func outcomeIndex(o Outcome) Outcome {
	if o < Success || o > Ignore {
		return Success
	}
	return o
}

// record counts one completed call that took elapsed and ended at end
// (since the breaker's base); both are clamped at zero, as a test clock may
// run backwards.
func (t *totals) record(o Outcome, elapsed, end time.Duration) {
	t.count(o)
	ot := &t.times[outcomeIndex(o)]
	elapsed, end = max(elapsed, 0), max(end, 0)
	ot.nanos.Add(uint64(elapsed))
	d := min(uint64(elapsed), maxNanosMask)
	minute := uint64(end/time.Minute) << maxNanosBits
	for {
		cur := ot.max.Load()
		if cur&^maxNanosMask == minute && cur&maxNanosMask >= d {
			return // the common case: not a new maximum in this minute
		}
		if cur&^maxNanosMask > minute {
			return // a later minute already started; this call is old news
		}
		next := minute | d
		if cur&^maxNanosMask == minute {
			next = minute | max(d, cur&maxNanosMask)
		}
		if ot.max.CompareAndSwap(cur, next) {
			return
		}
	}
}

// maxAt is the decaying maximum as seen at now (since the breaker's base):
// the packed value's duration if it was recorded in this minute or the last.
func (ot *outcomeTime) maxAt(now time.Duration) time.Duration {
	v := ot.max.Load()
	if v == 0 {
		return 0
	}
	minute := v >> maxNanosBits
	if cur := uint64(now / time.Minute); cur > minute+1 {
		return 0
	}
	return time.Duration(v & maxNanosMask)
}

// EnableTotals starts counting calls for Totals; it is idempotent.
// Counting is off until then because it costs an atomic add per call on a
// cache line that every core calling the breaker shares: with two cores
// calling one TIME_BASED breaker without pause, the closed path went from
// 15–23 to 44–47 ns here (BenchmarkClosedSuccessCounting); one core pays
// about 1 ns. breakerprom enables it for the registries it exports.
func (b *Breaker) EnableTotals() { b.counting.Store(true) }

// Totals reads the circuit's cumulative counts. The fields are read one by
// one, so a snapshot taken during calls may be off by the calls in flight.
func (b *Breaker) Totals() Totals {
	t := &b.totals
	s, f, i := &t.times[Success], &t.times[Failure], &t.times[Ignore]
	out := Totals{
		Counting:     b.counting.Load(),
		Successful:   t.n[Success].Load(),
		Failed:       t.n[Failure].Load(),
		Ignored:      t.n[Ignore].Load(),
		NotPermitted: t.notPermitted.Load(),
		Timed:        timed(b.conf.Load()),
	}
	if out.Timed {
		now := b.cfg.Clock.Now().Sub(b.base)
		out.SuccessfulTime, out.FailedTime, out.IgnoredTime = time.Duration(s.nanos.Load()), time.Duration(f.nanos.Load()), time.Duration(i.nanos.Load())
		out.SuccessfulMax, out.FailedMax, out.IgnoredMax = s.maxAt(now), f.maxAt(now), i.maxAt(now)
	}
	return out
}

package breaker

// counts is what a window holds when a decision is made. Failures are
// counted among calls and slow calls among slowCalls (the same calls: both
// fields are kept so that the rates read alike).
type counts struct {
	calls, failures int64
	slowCalls, slow int64
}

// window is a sliding window of outcomes.
//
// A fast success can only lower a rate once the window holds the minimum
// number of calls, so from then on it is counted without a check: success
// adds it to a counter of the caller's own core and returns true. Before
// that (the success may complete the minimum, and a rate over the threshold
// then opens the circuit) it returns false, and the caller records it with
// checkedSuccess and checks the counts. A fast failure that the window can
// prove leaves the failure rate below its threshold is counted the same way
// by failure (see timeWindow and countWindow). Every other outcome goes through record,
// which returns counts that include it and every outcome whose recording
// returned before it began, for the check that follows. snapshot returns the
// counts without recording. Each takes the current Unix second; count
// windows ignore it.
type window struct {
	t *timeWindow
	c *countWindow
}

// newWindow makes a window for a circuit in state s (CLOSED or
// METRICS_ONLY).
func newWindow(c Config, s State) window {
	if c.WindowType == CountBased {
		return window{c: newCountWindow(&c, s != MetricsOnly)}
	}
	return window{t: newTimeWindow(int64(c.WindowSize), limitsOf(&c))}
}

// The methods dispatch on the concrete window so that counts stay on the
// caller's stack (an interface call would move them to the heap).

func (w window) held() bool { return w.t != nil || w.c != nil }

// sameShape reports whether a window made under a can go on counting under
// b: same type and size, and for a time window the same slow-call tracking.
// Everything else (thresholds, the minimum of calls) applies to the counts
// a window holds.
func sameShape(a, b *Config) bool {
	return a.WindowType == b.WindowType && a.WindowSize == b.WindowSize &&
		(a.WindowType == CountBased || (a.SlowCallDurationThreshold > 0) == (b.SlowCallDurationThreshold > 0))
}

// setLimits applies c's minimum of calls and thresholds to the counts the
// window holds: successes are checked again until the window holds the new
// minimum, and a time window takes back the failures it let cores count
// without a check (they were granted under the old thresholds).
func (w window) setLimits(c *Config) {
	if w.t != nil {
		w.t.setLimits(limitsOf(c))
		return
	}
	w.c.setLimits(c)
}

// success counts a fast success that needs no check and reports whether it
// did; if not, the caller records it with checkedSuccess.
func (w window) success(sec int64) bool {
	if w.t != nil {
		return w.t.success(sec)
	}
	return w.c.success()
}

// failure counts a fast failure that needs no check and reports whether it
// did; if not, the caller records it with record.
func (w window) failure(sec int64) bool {
	if w.t != nil {
		return w.t.failure(sec)
	}
	return w.c.failure()
}

func (w window) checkedSuccess(sec int64, c *counts) {
	if w.t != nil {
		w.t.checkedSuccess(sec, c)
		return
	}
	w.c.record(sec, false, false, c)
}

func (w window) record(sec int64, failure, slow bool, c *counts) {
	if w.t != nil {
		w.t.record(sec, failure, slow, c)
		return
	}
	w.c.record(sec, failure, slow, c)
}

func (w window) snapshot(sec int64, c *counts) {
	if w.t != nil {
		w.t.snapshot(sec, c)
		return
	}
	w.c.snapshot(sec, c)
}

const (
	outcomeFailure uint8 = 1 << iota
	outcomeSlow
	outcomePresent
)

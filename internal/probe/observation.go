package probe

import "time"

// Verdict is what a webhook's consecutive probe results say against the
// breaker's thresholds.
type Verdict string

// Verdicts.
const (
	// VerdictPending: neither count has reached its threshold.
	VerdictPending Verdict = "Pending"
	// VerdictUnhealthy: failureThreshold consecutive probes failed.
	VerdictUnhealthy Verdict = "Unhealthy"
	// VerdictHealthy: successThreshold consecutive probes succeeded.
	VerdictHealthy Verdict = "Healthy"
)

// Observation is a monitor's current view of one webhook. The consecutive
// counts saturate at their thresholds: beyond that they change no decision.
type Observation struct {
	// Verdict is the counts against the thresholds: the one place a probe
	// count becomes "down" or "up". Empty before the first probe (Pending).
	Verdict              Verdict
	ConsecutiveFailures  int32
	ConsecutiveSuccesses int32
	// Last is the most recent result; its Status is empty before the first probe.
	Last Result
	// Late: the last lateRun probes each started more than half an interval
	// late, so probes cannot keep their interval (too many breakers for the
	// CPU): every loop's ticks are stretched alike, circuits still open and
	// close, only later. It clears after lateRun probes on time.
	Late bool
	// Starved: starvedRun probes were discarded within starvedHold because
	// the controller could not run long enough to judge their timeouts,
	// and the last within starvedHold. While starved, explicit failures
	// (refused, reset, TLS, 5xx) and the API server signal count as always;
	// timeouts only once confirmed.
	Starved bool
	// HealthySince is when the verdict last became Healthy; zero while it
	// is not (a half-open trial waits for the probes to have been healthy
	// this long, and the counts saturate at the threshold).
	HealthySince time.Time
	// late and onTime count consecutive late and punctual probes.
	late, onTime int
	// starvedAt is when the last starvedRun probes were discarded as
	// starved, the latest first.
	starvedAt [starvedRun]time.Time
}

// starvedHold is how long Starved holds after the last starved probe: the
// report changes at most once a minute or so, not with every probe.
const starvedHold = time.Minute

// starvedRun is how many probes discarded as starved within starvedHold
// make the controller starved: one stall, such as a new leader's start-up
// (70 ms of a 250 ms timeout after each leader change, seen in a cluster),
// or a garbage collection, says nothing of its CPU.
const starvedRun = 3

// lateRun is how many consecutive late (or punctual) probes change Late: a
// single hiccup, such as a garbage collection, says nothing.
const lateRun = 3

// starvation folds one result into an observation's Starved: it turns
// true at the starvedRun-th starved probe within starvedHold and holds
// until starvedHold after the last.
func starvation(o Observation, r Result, now time.Time) Observation {
	if r.Discard == DiscardStarved {
		copy(o.starvedAt[1:], o.starvedAt[:starvedRun-1])
		o.starvedAt[0] = now
	}
	recent := func(at time.Time) bool { return !at.IsZero() && now.Sub(at) < starvedHold }
	switch {
	case !recent(o.starvedAt[0]):
		o.Starved = false
	case recent(o.starvedAt[starvedRun-1]):
		o.Starved = true
	}
	return o
}

// healthySince keeps when the verdict became Healthy.
func healthySince(prev, o Observation, now time.Time) Observation {
	switch {
	case o.Verdict != VerdictHealthy:
		o.HealthySince = time.Time{}
	case prev.Verdict != VerdictHealthy || o.HealthySince.IsZero():
		o.HealthySince = now
	}
	return o
}

// lateness folds one probe's lag into an observation's Late.
func lateness(o Observation, lag, interval time.Duration) Observation {
	if lag > interval/2 {
		o.late, o.onTime = o.late+1, 0
	} else {
		o.late, o.onTime = 0, o.onTime+1
	}
	switch {
	case o.late >= lateRun:
		o.Late = true
	case o.onTime >= lateRun:
		o.Late = false
	}
	return o
}

// observe folds one result into an observation.
func observe(o Observation, r Result, s Settings) Observation {
	o.Last = r
	switch r.Status {
	case Healthy:
		o.ConsecutiveFailures = 0
		o.ConsecutiveSuccesses = min(o.ConsecutiveSuccesses+1, s.SuccessThreshold)
	case Unhealthy:
		o.ConsecutiveSuccesses = 0
		o.ConsecutiveFailures = min(o.ConsecutiveFailures+1, s.FailureThreshold)
	case Discarded:
		// Neither evidence of health nor of its absence: the counts stand.
	default:
		// Unknown says nothing about health in either direction.
		o.ConsecutiveFailures, o.ConsecutiveSuccesses = 0, 0
	}
	o.Verdict = verdictOf(o, s)
	return o
}

// verdictOf is o's verdict under s's thresholds.
func verdictOf(o Observation, s Settings) Verdict {
	return VerdictOf(o.ConsecutiveFailures, o.ConsecutiveSuccesses, s.FailureThreshold, s.SuccessThreshold)
}

// VerdictOf adds consecutive failures and successes up against their
// thresholds: the one rule by which probe counts become "down" or "up",
// for the monitor's observations and for the counts a status shows. A
// threshold under one is a settings bug, never a verdict.
func VerdictOf(failures, successes, failureThreshold, successThreshold int32) Verdict {
	switch {
	case failureThreshold > 0 && failures >= failureThreshold:
		return VerdictUnhealthy
	case successThreshold > 0 && successes >= successThreshold:
		return VerdictHealthy
	}
	return VerdictPending
}

// Change is how much one probe changed an observation, for a caller that
// decides on observations and reports them.
type Change int

// Changes, from least to most.
const (
	// Unchanged: at most a count moved, or a verdict fell back to Pending
	// (one failed probe of a healthy webhook, one answer during an
	// outage): a status shows the counts as of its last write, and the
	// metrics every probe. Reporting each such probe cost a status write
	// per breaker at the start of every outage, just before its decisions.
	Unchanged Change = iota
	// ReportChange: something a report shows changed, but nothing a decision
	// to write acts on: the webhook becoming or ceasing to be unprobeable
	// (which blocks writes, never makes one), the endpoint counts, or
	// whether probes keep their interval or the controller is starved. A
	// first probe that reaches no verdict is no change: the report waits for
	// the verdict (a thousand new breakers would otherwise cost a thousand
	// status writes more).
	ReportChange
	// DecisionChange: the verdict reached a threshold (Unhealthy or
	// Healthy), which is what opens and closes circuits.
	DecisionChange
)

// Compare says how much next differs from prev. Probes that only move a
// count, or fall back from a verdict to Pending, change nothing.
func Compare(prev, next Observation) Change {
	verdict := func(o Observation) Verdict {
		if o.Verdict == "" {
			return VerdictPending // before the first probe
		}
		return o.Verdict
	}
	pv, nv := verdict(prev), verdict(next)
	if pv != nv && nv != VerdictPending {
		return DecisionChange
	}
	p, n := prev.Last, next.Last
	unknown := func(r Result) bool { return r.Status == Unknown }
	if unknown(p) != unknown(n) || (unknown(n) && p.Reason != n.Reason) ||
		(p.Status != "" && (p.Healthy != n.Healthy || p.Total != n.Total)) || prev.Late != next.Late || prev.Starved != next.Starved {
		return ReportChange
	}
	return Unchanged
}

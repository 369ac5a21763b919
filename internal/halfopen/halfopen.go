// Package halfopen judges the half-open trial that ends an open Bypass
// circuit (spec.halfOpen): when one starts, how it ends, and how long the
// next waits. It is pure: the caller gathers the record, the probes' view
// and the API server's counts of the trial's calls, and writes what the
// verdict asks for (internal/circuit's TrialPatch, EndTrialPatch,
// ClosePatch).
//
// Healthy probes say the webhook answers tripswitch; only the API server's
// real calls say admission works. So a trial lets a sample of real requests
// through under failurePolicy Ignore, and the circuit closes when, after
// the trial's window, those calls reached the signal's minimum with a
// failure rate under its threshold. Any probe failure, or the trial's calls
// reaching the threshold, fails the trial at once: back to full Bypass,
// and the next trial waits after, doubled for each failed trial, up to
// maxBackoff. The first trial also waits after from the open: probes that
// passed while the API server's calls failed say nothing new. A trial that
// sees too few calls to judge closes on the probes after maxWait: a quiet
// webhook must not stay open for ever.
package halfopen

import (
	"fmt"
	"time"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Step is what the trial asks for now.
type Step string

// Steps.
const (
	// Wait: no trial runs, and none may start yet.
	Wait Step = "Wait"
	// Start a trial (one write: TrialPatch).
	Start Step = "Start"
	// Run: a trial runs and cannot be judged yet.
	Run Step = "Run"
	// Pass: the trial's calls passed; close (ClosePatch).
	Pass Step = "Pass"
	// Fail: back to full Bypass (EndTrialPatch) until Verdict.Next.
	Fail Step = "Fail"
	// NoTraffic: the trial saw too few calls within maxWait; close on the
	// probes alone (ClosePatch), and say so.
	NoTraffic Step = "NoTraffic"
)

// Reasons, for the status, events and metrics.
const (
	ReasonWaiting       = "TrialWaiting"
	ReasonRunning       = "TrialRunning"
	ReasonPassed        = "TrialPassed"
	ReasonFailed        = "TrialFailed"
	ReasonNoTraffic     = "TrialNoTraffic"
	ReasonSignalBlind   = "TrialSignalUnreadable"
	ReasonTrialStarted  = "TrialStarted"
	ReasonProbeFailed   = "TrialProbeFailed"
	ReasonCallsFailed   = "TrialCallsFailed"
	ReasonAwaitingCalls = "TrialAwaitingCalls"
)

// Calls are the API server's calls to the webhook since the trial began.
type Calls struct {
	Calls, Failures int64
	// Failing: at least minimumCalls and the failure rate at the threshold.
	Failing bool
	// Unreadable: the API server's metrics could not be read; Message says why.
	Unreadable bool
	Message    string
}

// Input is what a trial's verdict depends on.
type Input struct {
	Now  time.Time
	Spec v1alpha1.ResolvedHalfOpen
	// Record is the open circuit's record.
	Record *v1alpha1.CircuitRecord
	// HealthyFor is how long the probes have been healthy without a
	// failure (consecutive successes times the interval); 0 unless the
	// probes' verdict is healthy. Only the part since the circuit opened
	// counts toward halfOpen.after.
	HealthyFor time.Duration
	// ProbeFailed: the probes' verdict is unhealthy.
	ProbeFailed bool
	// Calls are the trial's calls (meaningful while a trial runs).
	Calls Calls
	// MinimumCalls is the signal's minimum of calls to judge a rate.
	MinimumCalls int32
}

// Verdict is the trial's step and why.
type Verdict struct {
	Step Step
	// Reason and Message explain the step.
	Reason, Message string
	// Next is when the next trial may start (Fail), or when to look again
	// (Wait, Run): zero when nothing is due.
	Next time.Time
	// SamplePercent is the share of requests a trial it starts lets through.
	SamplePercent int32
}

// Judge returns the trial's verdict.
func Judge(in Input) Verdict {
	if in.Record == nil {
		return Verdict{Step: Wait, Reason: ReasonWaiting, Message: "the circuit is closed"}
	}
	if in.Record.Trial == nil {
		return judgeWaiting(in)
	}
	return judgeRunning(in)
}

func judgeWaiting(in Input) Verdict {
	rec := in.Record
	if rec.NextTrialAt != nil && in.Now.Before(rec.NextTrialAt.Time) {
		return Verdict{Step: Wait, Reason: ReasonWaiting, Next: rec.NextTrialAt.Time,
			Message: fmt.Sprintf("%d failed trial(s); the next starts at %s at the earliest, once the probes are healthy", rec.FailedTrials, rec.NextTrialAt.UTC().Format(time.RFC3339))}
	}
	// Health from before the open says nothing new: the API server's calls
	// may have opened the circuit while the probes passed.
	healthy := min(in.HealthyFor, max(in.Now.Sub(rec.OpenedAt.Time), 0))
	if in.ProbeFailed || healthy < in.Spec.After {
		v := Verdict{Step: Wait, Reason: ReasonWaiting,
			Message: fmt.Sprintf("a trial starts after %s of healthy probes since the circuit opened (healthy for %s)", in.Spec.After, healthy.Round(time.Second))}
		if !in.ProbeFailed {
			v.Next = in.Now.Add(in.Spec.After - healthy)
		}
		return v
	}
	return Verdict{Step: Start, Reason: ReasonTrialStarted, SamplePercent: in.Spec.SamplePercent,
		Message: fmt.Sprintf("probes healthy for %s since the circuit opened: a trial lets %s of requests reach the webhook under failurePolicy Ignore", healthy.Round(time.Second), v1alpha1.SampleShare(in.Spec.SamplePercent))}
}

func judgeRunning(in Input) Verdict {
	t := in.Record.Trial
	ran := in.Now.Sub(t.StartedAt.Time)
	c := in.Calls
	counts := fmt.Sprintf("%d trial call(s), %d failed", c.Calls, c.Failures)
	switch {
	case in.ProbeFailed:
		return in.fail(ReasonProbeFailed, "a probe failed during the trial ("+counts+")")
	case c.Failing:
		return in.fail(ReasonCallsFailed, fmt.Sprintf("the API server's calls in the trial failed: %s (%.0f%%)", counts, 100*float64(c.Failures)/float64(c.Calls)))
	case ran < in.Spec.Window:
		return Verdict{Step: Run, Reason: ReasonRunning, Next: t.StartedAt.Add(in.Spec.Window),
			Message: fmt.Sprintf("trial of %s of requests since %s: %s; judged at %s", t.SamplePercent, t.StartedAt.UTC().Format(time.RFC3339), counts, t.StartedAt.Add(in.Spec.Window).UTC().Format(time.RFC3339))}
	case !c.Unreadable && c.Calls >= int64(in.MinimumCalls) && c.Calls > 0:
		return Verdict{Step: Pass, Reason: ReasonPassed, Message: fmt.Sprintf("the trial's real calls passed (%s in %s); restoring the original policy", counts, ran.Round(time.Second))}
	case ran >= in.Spec.MaxWait:
		why := fmt.Sprintf("only %s in %s, fewer than the %d needed to judge", counts, ran.Round(time.Second), in.MinimumCalls)
		reason := ReasonNoTraffic
		if c.Unreadable {
			why, reason = "the API server's metrics could not be read ("+c.Message+")", ReasonSignalBlind
		}
		return Verdict{Step: NoTraffic, Reason: reason, Message: why + "; closing on the healthy probes after halfOpen.maxWait"}
	}
	msg := fmt.Sprintf("trial of %s of requests: %s, waiting for %d to judge (closing on the probes at %s if they do not come)",
		t.SamplePercent, counts, in.MinimumCalls, t.StartedAt.Add(in.Spec.MaxWait).UTC().Format(time.RFC3339))
	if c.Unreadable {
		msg = "trial: the API server's metrics cannot be read (" + c.Message + "); closing on the probes at " + t.StartedAt.Add(in.Spec.MaxWait).UTC().Format(time.RFC3339)
	}
	return Verdict{Step: Run, Reason: ReasonAwaitingCalls, Next: t.StartedAt.Add(in.Spec.MaxWait), Message: msg}
}

// fail ends the trial; the next waits after × 2^(failed trials so far), at
// most maxBackoff.
func (in Input) fail(reason, why string) Verdict {
	wait := Backoff(in.Spec, in.Record.FailedTrials)
	next := in.Now.Add(wait)
	return Verdict{Step: Fail, Reason: reason, Next: next,
		Message: fmt.Sprintf("%s; back to full Bypass, the next trial in %s at the earliest", why, wait)}
}

// Backoff is the wait before the next trial after failed trials already
// failed (the one failing now not counted): halfOpen.after, doubled for
// each earlier failure, at most halfOpen.maxBackoff.
func Backoff(spec v1alpha1.ResolvedHalfOpen, failed int32) time.Duration {
	wait := spec.After
	for range failed {
		if wait >= spec.MaxBackoff/2 {
			return spec.MaxBackoff
		}
		wait *= 2
	}
	return min(wait, spec.MaxBackoff)
}

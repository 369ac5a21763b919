package probe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Settings are one monitored webhook's probe settings.
type Settings struct {
	Target           Target
	Interval         time.Duration
	FailureThreshold int32
	SuccessThreshold int32
}

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
	// Starved: a probe was discarded, within the last starvedHold, because
	// the controller could not run long enough to judge its timeout. While
	// starved, explicit failures (refused, reset, TLS, 5xx) and the API
	// server signal count as always; timeouts only once confirmed.
	Starved bool
	// HealthySince is when the verdict last became Healthy; zero while it
	// is not (a half-open trial waits for the probes to have been healthy
	// this long, and the counts saturate at the threshold).
	HealthySince time.Time
	// late and onTime count consecutive late and punctual probes.
	late, onTime int
	// starvedAt is when the last probe was discarded as starved.
	starvedAt time.Time
}

// starvedHold is how long Starved holds after the last starved probe: the
// report changes at most once a minute or so, not with every probe.
const starvedHold = time.Minute

// starvedShare: a timeout is discarded when the controller could not run
// for at least this share of the probe's timeout. A healthy controller
// loses well under a millisecond to a garbage collection; a CPU-throttled
// one loses most of each 100 ms period once its quota is spent.
const starvedShare = 4

// minStarved is the least stall that discards a timeout, whatever the
// timeout: below it, scheduling noise.
const minStarved = 20 * time.Millisecond

// StallMeter says how long the process could not run in a span of time;
// *stall.Watch implements it.
type StallMeter interface {
	Stalled(from, to time.Time) time.Duration
}

// lateRun is how many consecutive late (or punctual) probes change Late: a
// single hiccup, such as a garbage collection, says nothing.
const lateRun = 3

// Monitor probes each registered webhook from its own goroutine, at its own
// interval with jitter, and calls notify after every probe, saying what the
// probe changed (see Compare). It is a
// controller-runtime Runnable: loops run only while Start's context lives,
// which under leader election means only while this replica leads.
type Monitor struct {
	prober Prober
	notify func(key string, r Result, c Change)
	clock  clock.WithTicker

	// Stalls, if set before Start, judges the timeouts a prober left
	// unconfirmed (Result.TimedOut: a request never written in time, a
	// probe blocked behind held requests): one during which the controller
	// could not run for a quarter of the probe's timeout is Discarded (see
	// Observation.Starved). The HTTPProber confirms the rest itself.
	Stalls StallMeter

	mu    sync.Mutex
	ctx   context.Context // nil until Start
	loops map[string]*loop
}

type loop struct {
	settings Settings
	obs      Observation
	cancel   context.CancelFunc // nil until running
	done     chan struct{}      // closed when the running goroutine has exited
}

// NewMonitor returns a monitor using prober. notify is called after every
// probe, outside any lock, with what the probe changed (see Compare): a
// caller that reconciles only on a change does the same work for 200 steady
// webhooks as for none, and one that serves DecisionChange first opens and
// closes circuits first when every webhook fails at once.
func NewMonitor(prober Prober, clk clock.WithTicker, notify func(key string, r Result, c Change)) *Monitor {
	return &Monitor{prober: prober, notify: notify, clock: clk, loops: map[string]*loop{}}
}

// Start runs the monitor until ctx ends, then stops every loop.
func (m *Monitor) Start(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	for key, l := range m.loops {
		m.run(key, l)
	}
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	m.ctx = nil
	for _, l := range m.loops {
		l.cancel = nil
	}
	m.mu.Unlock()
	return nil
}

// NeedLeaderElection keeps probing on the leader only.
func (m *Monitor) NeedLeaderElection() bool { return true }

// Ensure starts probing key with s, or updates a running loop's settings. A
// changed interval restarts the loop; other changes apply at the next probe.
func (m *Monitor) Ensure(key string, s Settings) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.loops[key]
	if !ok {
		l = &loop{settings: s}
		m.loops[key] = l
		m.run(key, l)
		return
	}
	restart := l.settings.Interval != s.Interval && l.cancel != nil
	l.settings = s
	if l.obs.Last.Status != "" {
		// New thresholds judge the counts at once, not at the next probe.
		l.obs.Verdict = verdictOf(l.obs, s)
	}
	if restart {
		l.cancel()
		l.cancel = nil
		m.run(key, l)
	}
}

// Stop stops probing key and forgets its observation. When it returns, key's
// loop has exited: no probe of key runs or starts afterwards, and the result
// of one that was in flight (cancelled through its context) is never
// recorded or delivered.
func (m *Monitor) Stop(key string) {
	m.mu.Lock()
	var done chan struct{}
	if l, ok := m.loops[key]; ok {
		if l.cancel != nil {
			l.cancel()
			done = l.done
		}
		delete(m.loops, key)
	}
	m.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Observe returns key's current observation; false if key is not monitored.
func (m *Monitor) Observe(key string) (Observation, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.loops[key]
	if !ok {
		return Observation{}, false
	}
	return l.obs, true
}

// run starts l's goroutine if the monitor is running. Callers hold m.mu.
func (m *Monitor) run(key string, l *loop) {
	if m.ctx == nil || l.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	l.cancel = cancel
	l.done = make(chan struct{})
	go func(done chan struct{}, interval time.Duration) {
		defer close(done)
		m.probeLoop(ctx, key, l, interval)
	}(l.done, l.settings.Interval)
}

func (m *Monitor) probeLoop(ctx context.Context, key string, l *loop, interval time.Duration) {
	// Spread the first probes over an interval: breakers created together,
	// or all of them after a start or a failover, would otherwise probe in
	// lockstep, and all open their connections at once.
	if !m.sleep(ctx, time.Duration(rand.Int64N(int64(interval)+1))) {
		return
	}
	ticker := m.clock.NewTicker(interval)
	defer ticker.Stop()
	var prevStart time.Time
	for {
		m.mu.Lock()
		if ctx.Err() != nil { // stopped while waiting for the tick
			m.mu.Unlock()
			return
		}
		s := l.settings
		m.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, s.Target.Timeout)
		start := m.clock.Now()
		lag := time.Duration(0)
		if !prevStart.IsZero() {
			lag = max(start.Sub(prevStart)-interval, 0)
		}
		prevStart = start
		wallStart := time.Now() // the stall meter's clock, whatever m.clock is
		tgt := s.Target
		tgt.Key = key
		r := m.prober.Probe(pctx, tgt)
		cancel()
		r = m.judgeStall(r, wallStart, time.Now(), s.Target.Timeout)
		if r.Latency == 0 {
			r.Latency = m.clock.Since(start)
		}
		r.Lag = lag
		m.mu.Lock()
		// Stop and Ensure cancel under m.mu, so this check cannot race them: a
		// loop stopped mid-probe never records its result.
		if ctx.Err() != nil {
			m.mu.Unlock()
			return
		}
		prev := l.obs
		l.obs = observe(l.obs, r, s)
		l.obs = lateness(l.obs, r.Lag, interval)
		l.obs = starvation(l.obs, r, m.clock.Now())
		l.obs = healthySince(prev, l.obs, m.clock.Now())
		change := Compare(prev, l.obs)
		m.mu.Unlock()
		m.notify(key, r, change)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

func (m *Monitor) sleep(ctx context.Context, d time.Duration) bool {
	t := m.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// judgeStall discards an unconfirmed timeout the controller caused: it
// could not run for a large part of the probe (see starvedShare), or its
// own goroutine ran that late after the deadline.
func (m *Monitor) judgeStall(r Result, from, to time.Time, timeout time.Duration) Result {
	if r.Status != Unhealthy || !r.TimedOut {
		return r
	}
	lost := r.Overrun
	if m.Stalls != nil {
		lost = max(lost, m.Stalls.Stalled(from, to))
	}
	if lost < max(timeout/starvedShare, minStarved) {
		return r
	}
	r.Status, r.Discard = Discarded, DiscardStarved
	r.Reason = fmt.Sprintf("%s, but the controller could not run for %s of it (CPU-throttled, paused or starved): not counted",
		r.Reason, lost.Round(time.Millisecond))
	return r
}

// starvation folds one result into an observation's Starved.
func starvation(o Observation, r Result, now time.Time) Observation {
	if r.Discard == DiscardStarved {
		o.starvedAt = now
	}
	o.Starved = !o.starvedAt.IsZero() && now.Sub(o.starvedAt) < starvedHold
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

// verdictOf adds the counts up against the thresholds. A threshold under
// one is a settings bug, never a verdict.
func verdictOf(o Observation, s Settings) Verdict {
	switch {
	case s.FailureThreshold > 0 && o.ConsecutiveFailures >= s.FailureThreshold:
		return VerdictUnhealthy
	case s.SuccessThreshold > 0 && o.ConsecutiveSuccesses >= s.SuccessThreshold:
		return VerdictHealthy
	}
	return VerdictPending
}

// Change is how much one probe changed an observation, for a caller that
// decides on observations and reports them.
type Change int

// Changes, from least to most.
const (
	// Unchanged: at most a count moved below its threshold.
	Unchanged Change = iota
	// ReportChange: something a report shows changed, but nothing a decision
	// to write acts on: a verdict falling back to Pending (one failed probe
	// of a healthy webhook), the webhook becoming or ceasing to be
	// unprobeable (which blocks writes, never makes one), the endpoint
	// counts, or whether probes keep their interval. A first probe that
	// reaches no verdict is no change: the report waits for the verdict (a
	// thousand new breakers would otherwise cost a thousand status writes
	// more).
	ReportChange
	// DecisionChange: the verdict reached a threshold (Unhealthy or
	// Healthy), which is what opens and closes circuits.
	DecisionChange
)

// Compare says how much next differs from prev. Probes that only move a
// count below its threshold change nothing; a status shows the counts as of
// the last report.
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
	if pv != nv || unknown(p) != unknown(n) || (unknown(n) && p.Reason != n.Reason) ||
		(p.Status != "" && (p.Healthy != n.Healthy || p.Total != n.Total)) || prev.Late != next.Late || prev.Starved != next.Starved {
		return ReportChange
	}
	return Unchanged
}

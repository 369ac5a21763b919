package probe_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/stall"
)

// timeouts is a prober whose every probe times out, or is refused.
type timeouts struct{ refused atomic.Bool }

func (p *timeouts) Probe(context.Context, probe.Target) probe.Result {
	if p.refused.Load() {
		return probe.Result{Status: probe.Unhealthy, Reason: "connection refused"}
	}
	return probe.Result{Status: probe.Unhealthy, TimedOut: true, Reason: "timeout after 250ms"}
}

// stalls is a StallMeter that reports what the test sets.
type stalls struct{ d atomic.Int64 }

func (s *stalls) Stalled(time.Time, time.Time) time.Duration { return time.Duration(s.d.Load()) }

// TestStarvedTimeoutsAreDiscarded: a timeout during which the controller
// could not run for a quarter of the probe's timeout or more is no
// evidence: Discarded, the counts stand, the observation says Starved.
// Timeouts while it ran count; explicit failures count even while it is
// starved; Starved clears a minute after the last starved probe.
func TestStarvedTimeoutsAreDiscarded(t *testing.T) {
	p := &timeouts{}
	h := start(t, p)
	meter := &stalls{}
	h.mon.Stalls = meter
	meter.d.Store(int64(200 * time.Millisecond)) // of a 250 ms timeout
	h.mon.Ensure("b", settings)
	for range 5 {
		h.tick("b", time.Second)
	}
	o, _ := h.mon.Observe("b")
	if o.ConsecutiveFailures != 0 || o.Verdict != probe.VerdictPending || !o.Starved {
		t.Fatalf("5 starved timeouts: %d failures, verdict %s, starved %v; want 0, Pending, true", o.ConsecutiveFailures, o.Verdict, o.Starved)
	}
	if o.Last.Status != probe.Discarded || o.Last.Discard != probe.DiscardStarved {
		t.Fatalf("a starved timeout reported as %s/%s %q, want Discarded/Starved", o.Last.Status, o.Last.Discard, o.Last.Reason)
	}
	p.refused.Store(true)
	for o, _ = h.mon.Observe("b"); o.ConsecutiveFailures < 3; o, _ = h.mon.Observe("b") {
		h.tick("b", time.Second)
	}
	if o.Verdict != probe.VerdictUnhealthy || !o.Starved {
		t.Fatalf("refused while starved: verdict %s, starved %v; want Unhealthy, still starved", o.Verdict, o.Starved)
	}
	p.refused.Store(false)
	meter.d.Store(int64(30 * time.Millisecond)) // under a quarter of 250 ms
	h.tick("b", time.Second)
	if o, _ = h.mon.Observe("b"); o.Last.Status != probe.Unhealthy || o.ConsecutiveFailures != 3 {
		t.Fatalf("a timeout with 30 ms stalled: %s, %d failures; want it counted", o.Last.Status, o.ConsecutiveFailures)
	}
	h.tick("b", time.Minute)
	if o, _ = h.mon.Observe("b"); o.Starved {
		t.Fatalf("a minute after the last starved probe: still starved")
	}
}

// hangs is a webhook that answers nothing until the test ends.
func hangs(t *testing.T) http.Handler {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
}

// slowOnce answers every request at once except the n-th, which takes d.
func slowOnce(n int64, d time.Duration) (http.Handler, *atomic.Int64) {
	var count atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if count.Add(1) == n {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusOK)
	}), &count
}

// watchVerdicts runs a real-clock monitor of srv with the default probe
// settings (timeout 250 ms, 3 failures open) at interval, with a real stall
// meter, for d, and returns the worst count of consecutive failures and
// whether the verdict was ever Unhealthy.
func watchVerdicts(t *testing.T, tgt probe.Target, interval, d time.Duration) (worst int32, unhealthy bool) {
	t.Helper()
	var mu sync.Mutex
	var mon *probe.Monitor
	mon = probe.NewMonitor(&probe.HTTPProber{}, clock.RealClock{}, func(key string, _ probe.Result, _ probe.Change) {
		o, _ := mon.Observe(key)
		mu.Lock()
		worst = max(worst, o.ConsecutiveFailures)
		unhealthy = unhealthy || o.Verdict == probe.VerdictUnhealthy
		mu.Unlock()
	})
	w := stall.New(stall.Options{CPUStat: "-"})
	mon.Stalls = w
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	go func() { _ = w.Start(ctx) }()
	tgt.Timeout = 250 * time.Millisecond
	mon.Ensure("b", probe.Settings{Target: tgt, Interval: interval, FailureThreshold: 3, SuccessThreshold: 1})
	_ = mon.Start(ctx)
	mu.Lock()
	defer mu.Unlock()
	return worst, unhealthy
}

// TestOneSlowAnswerDoesNotOpen: with the default probe settings (every 1 s,
// 250 ms timeout, open after 3 failures), a webhook that answers every
// probe at once but one, which takes 2.5 s, is never judged Unhealthy: the
// probes after the slow one reach the webhook on a second connection
// instead of failing behind it (before, they did, and the circuit opened).
// A webhook that hangs every request is judged Unhealthy as before. Real
// clock, real server.
func TestOneSlowAnswerDoesNotOpen(t *testing.T) {
	const interval = time.Second
	h, count := slowOnce(2, 2500*time.Millisecond)
	srv, _ := countingServer(t, h)
	if worst, unhealthy := watchVerdicts(t, urlTarget(srv, "/healthz"), interval, 5*time.Second); unhealthy || worst > 1 {
		t.Errorf("one 2.5 s answer among fast ones (%d requests): %d consecutive failures, Unhealthy %v; want at most 1, never Unhealthy", count.Load(), worst, unhealthy)
	}
	hung, _ := countingServer(t, hangs(t))
	// First probe within an interval (jitter), then three failures.
	if _, unhealthy := watchVerdicts(t, urlTarget(hung, "/healthz"), interval, 7*time.Second); !unhealthy {
		t.Errorf("a webhook that hangs every request was not judged Unhealthy within 7 s")
	}
}

// throttled is a pause meter of a controller that runs for run out of every
// period, as a CFS quota allows: 20 ms of each 100 ms is a fifth of a CPU.
// period 0: it never pauses; run 0: it never runs again.
type throttled struct {
	run, period time.Duration
	queue       time.Duration // the run queue's latency
	// real, when set, adds what the process's own heartbeat saw: see
	// TestTimeoutsAreConfirmed.
	real *stall.Watch
}

func (c throttled) QueueWait() time.Duration { return max(c.queue, c.real.QueueWait()) }

// Ran: some running stretch of at least d within [from, to] (each stretch
// of the pattern is separate: a pause follows it), where the real
// heartbeat, if any, saw no pause either.
func (c throttled) Ran(from, to time.Time, d time.Duration) bool {
	switch {
	case c.period == 0:
		return c.real.Ran(from, to, d)
	case c.run == 0:
		return false
	}
	for t := from; !t.After(to); {
		phase := time.Duration(t.UnixNano()) % c.period
		if phase >= c.run { // paused until the next period
			t = t.Add(c.period - phase)
			continue
		}
		end := t.Add(c.run - phase)
		if end.After(to) {
			end = to
		}
		if end.Sub(t) >= d && c.real.Ran(t, end, d) {
			return true
		}
		t = end.Add(c.period - c.run)
	}
	return false
}

func (c throttled) Paused(from, to time.Time) time.Duration {
	if c.period == 0 {
		return c.real.Paused(from, to)
	}
	if c.run == 0 {
		return to.Sub(from)
	}
	var paused time.Duration
	for t := from; t.Before(to); {
		phase := time.Duration(t.UnixNano()) % c.period
		if phase < c.run { // running until the end of the run
			t = t.Add(c.run - phase)
			continue
		}
		end := t.Add(c.period - phase)
		if end.After(to) {
			end = to
		}
		paused += end.Sub(t)
		t = end
	}
	return min(paused+c.real.Paused(from, to), to.Sub(from))
}

// TestTimeoutsAreConfirmed: a timeout counts only when the webhook had its
// whole timeout and the controller then ran, without a pause, long enough
// to have read an answer that was there: 5 ms, and twice its run queue's
// latency. A throttled controller whose run queue is short still judges a
// hung webhook down (any running stretch since the deadline proves it),
// where a rule on the share of the window it lost would discard every such
// timeout. One that could not run since, or whose run queue outlasts its
// running stretches (what a throttled period leaves), says nothing; an
// answer read just after the deadline is a timeout when the controller had
// been running long enough, and no evidence when it had not; one read in
// time is an answer, however late the context's timer runs.
//
// Where the verdict hinges on when an answer was read (realMeter), the
// meter also holds what the process's own heartbeat saw: a busy machine
// delays the read, and a meter that claims the process ran all along turns
// the late read into a confirmed late answer. On a loaded machine that
// claim was the test's flake (the real heartbeat saw 47–233 ms of pauses
// in the probes that failed, the fake none); TestInTimeAnswersAreNeverTimeouts
// holds the rule itself on the real meter.
func TestTimeoutsAreConfirmed(t *testing.T) {
	const timeout = 200 * time.Millisecond
	hung := hangs(t)
	late := healthz(timeout+30*time.Millisecond, http.StatusOK)
	fast := healthz(0, http.StatusOK)
	ms := time.Millisecond
	for _, tc := range []struct {
		name      string
		meter     throttled
		handler   http.Handler
		realMeter bool
		want      probe.Status
		discard   probe.Discard
	}{
		{"hung, the controller running", throttled{}, hung, false, probe.Unhealthy, ""},
		{"hung, the controller throttled to a fifth", throttled{run: 20 * ms, period: 100 * ms}, hung, false, probe.Unhealthy, ""},
		{"hung, the controller throttled to a tenth", throttled{run: 10 * ms, period: 100 * ms}, hung, false, probe.Unhealthy, ""},
		{"hung, the controller not running since", throttled{period: 100 * ms}, hung, false, probe.Discarded, probe.DiscardStarved},
		{"answered just late, the controller running", throttled{}, late, false, probe.Unhealthy, ""},
		{"answered just late, the controller not running", throttled{period: 100 * ms}, late, false, probe.Discarded, probe.DiscardStarved},
		{"answered at once, the controller paused since", throttled{period: 100 * ms}, fast, false, probe.Healthy, ""},
		{"hung, the controller running with a long run queue", throttled{queue: 30 * ms}, hung, false, probe.Unhealthy, ""},
		{"hung, the controller throttled with the run queue its pauses leave", throttled{run: 20 * ms, period: 100 * ms, queue: 80 * ms}, hung, false, probe.Discarded, probe.DiscardStarved},
		{"answered just late, the controller running with a long run queue", throttled{queue: 30 * ms}, late, true, probe.Discarded, probe.DiscardStarved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := countingServer(t, tc.handler)
			tgt := urlTarget(srv, "/healthz")
			tgt.Timeout = timeout
			meter := tc.meter
			if tc.realMeter {
				meter.real = stall.New(stall.Options{CPUStat: "-"})
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				go func() { _ = meter.real.Start(ctx) }()
			}
			// The timing rule alone: TestTheKernelsSilenceIsATimeout has what
			// the kernel adds.
			r := probe.WithoutWire(&probe.HTTPProber{Pauses: meter}).Probe(t.Context(), tgt)
			if r.Status != tc.want || r.Discard != tc.discard {
				t.Fatalf("%s/%s %q, want %s/%s", r.Status, r.Discard, r.Reason, tc.want, tc.discard)
			}
			if r.Status == probe.Unhealthy && r.TimedOut {
				t.Errorf("a confirmed timeout is still marked for the monitor to judge: %q", r.Reason)
			}
			if r.Latency > 3*timeout+time.Second {
				t.Errorf("the probe took %s; a confirmation waits at most two timeouts past the deadline", r.Latency)
			}
		})
	}
}

// TestBreakersSharingAHungDestinationEachCountIt: the breakers of one
// configuration's webhooks probe one destination. When it hangs, a probe
// blocked behind the others' unanswered requests counts each once for its
// own breaker, so every breaker reaches its three failures in three
// probes, as if each had a connection of its own.
func TestBreakersSharingAHungDestinationEachCountIt(t *testing.T) {
	srv, handshakes := countingServer(t, hangs(t))
	p := &probe.HTTPProber{}
	failures := map[string]int{}
	for range 3 {
		for _, key := range []string{"w0", "w1", "w2", "w3"} {
			tgt := urlTarget(srv, "/healthz")
			tgt.Timeout, tgt.Key = 50*time.Millisecond, key
			if r := p.Probe(t.Context(), tgt); r.Status == probe.Unhealthy {
				failures[key]++
			}
		}
	}
	for _, key := range []string{"w0", "w1", "w2", "w3"} {
		if failures[key] != 3 {
			t.Errorf("breaker %s: %d failures in 3 probes of a hung destination, want 3 (all: %v)", key, failures[key], failures)
		}
	}
	// Two connections, each abandoned at most once in these 600 ms (a
	// request held ten timeouts, 500 ms, is given up).
	if n := handshakes.Load(); n > 4 {
		t.Errorf("%d handshakes, want the destination's two connections, renewed at most once each", n)
	}
}

// lateTimer is a context whose deadline passes well before its Done fires:
// a context's timer that runs late, as on a busy machine.
type lateTimer struct {
	context.Context
	deadline time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.deadline, true }

// TestAnAnswerAfterTheDeadlineIsLateHoweverLateTheTimer: an answer read
// after the probe's deadline is judged late by the clock, not by whether
// the context's timer has fired yet. Before, a 230 ms answer to a 200 ms
// probe read while the timer lagged was judged Healthy (seen in loaded runs
// of TestTimeoutsAreConfirmed).
func TestAnAnswerAfterTheDeadlineIsLateHoweverLateTheTimer(t *testing.T) {
	const timeout = 200 * time.Millisecond
	srv, _ := countingServer(t, healthz(timeout+30*time.Millisecond, http.StatusOK))
	tgt := urlTarget(srv, "/healthz")
	tgt.Timeout = timeout
	late, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	ctx := lateTimer{Context: late, deadline: time.Now().Add(timeout)}
	r := probe.WithoutWire(&probe.HTTPProber{}).Probe(ctx, tgt)
	if r.Status != probe.Unhealthy || !strings.Contains(r.Reason, "late") {
		t.Fatalf("an answer 30 ms after the deadline, the timer not fired: %s %q, want Unhealthy, answered late", r.Status, r.Reason)
	}
}

// slowReader is a connection whose reads of the answer to the second
// request wait until release: the answer is in the kernel, the prober's
// reader has not run (what a starved controller looks like from inside).
type slowReader struct {
	*net.TCPConn
	writes  atomic.Int32
	armed   *atomic.Bool
	release time.Duration
}

func (c *slowReader) Write(b []byte) (int, error) {
	if c.armed.Load() {
		c.writes.Add(1)
	}
	return c.TCPConn.Write(b)
}

func (c *slowReader) Read(b []byte) (int, error) {
	if c.writes.Load() > 0 {
		time.Sleep(c.release)
	}
	return c.TCPConn.Read(b)
}

// TestTheKernelsSilenceIsATimeout: where the kernel says what a connection
// received, a webhook that sent nothing within its timeout timed out,
// whether or not the controller ran since (a controller throttled to no
// CPU at all still confirms it at its first look); and an answer that
// reached the kernel in time is an answer however late the controller,
// not running, read it. Without the kernel's word both are no evidence
// (Discarded): the starved controller cannot tell.
func TestTheKernelsSilenceIsATimeout(t *testing.T) {
	if !probe.CanReadWire {
		t.Skip("the kernel's counts of received bytes are read on Linux only")
	}
	const timeout = 200 * time.Millisecond
	hung, _ := countingServer(t, hangs(t))
	never := throttled{period: 100 * time.Millisecond} // never runs again
	tgt := urlTarget(hung, "/healthz")
	tgt.Timeout = timeout
	if r := (&probe.HTTPProber{Pauses: never}).Probe(t.Context(), tgt); r.Status != probe.Unhealthy || !strings.Contains(r.Reason, "nothing received") {
		t.Errorf("a hung webhook, the controller not running: %s/%s %q, want Unhealthy, nothing received", r.Status, r.Discard, r.Reason)
	}
	if r := probe.WithoutWire(&probe.HTTPProber{Pauses: never}).Probe(t.Context(), tgt); r.Status != probe.Discarded {
		t.Errorf("the same without the kernel's word: %s %q, want Discarded", r.Status, r.Reason)
	}

	// Answered at 50 ms, read at 400 ms by a controller that did not run.
	srv, _ := countingServer(t, healthz(50*time.Millisecond, http.StatusOK))
	for _, wire := range []bool{true, false} {
		var armed atomic.Bool
		p := &probe.HTTPProber{Pauses: never, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &slowReader{TCPConn: c.(*net.TCPConn), armed: &armed, release: 400 * time.Millisecond}, nil
		}}
		if !wire {
			p = probe.WithoutWire(p)
		}
		tgt := urlTarget(srv, "/healthz")
		tgt.Timeout = timeout
		if r := p.Probe(t.Context(), tgt); r.Status != probe.Healthy {
			t.Fatalf("first probe (the connection made): %s %q", r.Status, r.Reason)
		}
		armed.Store(true)
		r := p.Probe(t.Context(), tgt)
		switch {
		case wire && r.Status != probe.Healthy:
			t.Errorf("answered at 50 ms, read at 400 ms: %s %q, want Healthy (it reached the kernel in time)", r.Status, r.Reason)
		case !wire && r.Status != probe.Discarded:
			t.Errorf("the same without the kernel's word: %s %q, want Discarded (read late, the controller not running)", r.Status, r.Reason)
		}
	}
}

// TestABlockedProbeCountsConfirmedSilence: a probe that finds its
// destination's connections held by unanswered requests counts their
// silence; where the kernel says nothing was received on them since they
// were written, that silence is confirmed (not left for the monitor to
// discard when the controller stalled, as a starved controller always has),
// so a hung webhook shared by breakers opens each of them however starved
// the controller.
func TestABlockedProbeCountsConfirmedSilence(t *testing.T) {
	if !probe.CanReadWire {
		t.Skip("the kernel's counts of received bytes are read on Linux only")
	}
	srv, _ := countingServer(t, hangs(t))
	for _, wire := range []bool{true, false} {
		p := &probe.HTTPProber{}
		if !wire {
			p = probe.WithoutWire(p)
		}
		blocked := 0
		for range 2 {
			for _, key := range []string{"w0", "w1", "w2", "w3"} {
				tgt := urlTarget(srv, "/healthz")
				tgt.Timeout, tgt.Key = 50*time.Millisecond, key
				r := p.Probe(t.Context(), tgt)
				if r.Status != probe.Unhealthy || !strings.Contains(r.Reason, "still unanswered") {
					continue
				}
				blocked++
				if confirmed := !r.TimedOut; confirmed != wire {
					t.Errorf("kernel's word %v: a blocked probe's count confirmed %v, want %v (%q)", wire, confirmed, wire, r.Reason)
				}
			}
		}
		if blocked == 0 {
			t.Errorf("kernel's word %v: no probe was blocked behind the held requests", wire)
		}
	}
}

// timeoutsOnCue is a prober that answers healthy except for the probes the
// test queues as timeouts, one each.
type timeoutsOnCue struct {
	mu      sync.Mutex
	pending int
}

func (p *timeoutsOnCue) queue() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending++
}

func (p *timeoutsOnCue) Probe(context.Context, probe.Target) probe.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending > 0 {
		p.pending--
		return probe.Result{Status: probe.Unhealthy, TimedOut: true, Reason: "timeout after 250ms"}
	}
	return probe.Result{Status: probe.Healthy, Reason: "200"}
}

// TestOneStallIsNotStarvation: a probe discarded for one stall, such as the
// 70 ms a new leader's start-up took (a ControllerStarved Warning followed
// every leader change), is not starvation; nor are two in a minute, nor
// one every 40 s. Three within a minute are, and Starved holds until a
// minute after the last.
func TestOneStallIsNotStarvation(t *testing.T) {
	p := &timeoutsOnCue{}
	h := start(t, p)
	meter := &stalls{}
	meter.d.Store(int64(70 * time.Millisecond)) // of a 250 ms timeout: every timeout is discarded
	h.mon.Stalls = meter
	h.mon.Ensure("b", settings)
	discard := func(n int) probe.Observation {
		t.Helper()
		p.queue()
		o := h.tickUntil("b", probe.Discarded)
		if o.Last.Discard != probe.DiscardStarved {
			t.Fatalf("discarded %s %q, want Starved", o.Last.Discard, o.Last.Reason)
		}
		h.tickUntil("b", probe.Healthy)
		o, _ = h.mon.Observe("b")
		return o
	}
	if o := discard(1); o.Starved {
		t.Fatalf("one probe discarded for a 70 ms stall at start-up: Starved; want not (one stall is no starvation)")
	}
	if o := discard(2); o.Starved {
		t.Fatalf("two discarded within a minute: Starved; want not yet")
	}
	if o := discard(3); !o.Starved {
		t.Fatalf("three discarded within a minute: not Starved")
	}
	h.tick("b", 50*time.Second)
	if o, _ := h.mon.Observe("b"); !o.Starved {
		t.Fatalf("about 51 s after the last starved probe: no longer Starved; want it to hold a minute")
	}
	h.tick("b", 10*time.Second)
	if o, _ := h.mon.Observe("b"); o.Starved {
		t.Fatalf("a minute after the last starved probe: still Starved")
	}
	for i := range 4 {
		p.queue()
		h.tick("b", 40*time.Second)
		if o, _ := h.mon.Observe("b"); o.Starved {
			t.Fatalf("one starved probe every 40 s (the %d-th): Starved; want not", i+1)
		}
	}
}

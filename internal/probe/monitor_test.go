package probe_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// script is a prober whose next result the test sets.
type script struct {
	mu     sync.Mutex
	status probe.Status
	calls  atomic.Int32
}

func (s *script) set(st probe.Status) { s.mu.Lock(); s.status = st; s.mu.Unlock() }

func (s *script) Probe(ctx context.Context, _ probe.Target) probe.Result {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return probe.Result{Status: s.status, Reason: "scripted"}
}

type harness struct {
	t      *testing.T
	clk    *clocktesting.FakeClock
	mon    *probe.Monitor
	probed chan string
}

func start(t *testing.T, p probe.Prober) *harness {
	h := &harness{t: t, clk: clocktesting.NewFakeClock(time.Unix(0, 0)), probed: make(chan string, 100)}
	h.mon = probe.NewMonitor(p, h.clk, func(key string, _ probe.Result, _ probe.Change) { h.probed <- key })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.mon.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// tick advances the fake clock by one interval and waits for a probe of key.
func (h *harness) tick(key string, interval time.Duration) {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		h.clk.Step(interval)
		select {
		case got := <-h.probed:
			if got != key {
				h.t.Fatalf("probed %q, want %q", got, key)
			}
			return
		case <-time.After(time.Millisecond):
		case <-deadline:
			h.t.Fatalf("no probe of %s", key)
		}
	}
}

var settings = probe.Settings{Interval: time.Second, FailureThreshold: 3, SuccessThreshold: 2, Target: probe.Target{Timeout: 250 * time.Millisecond}}

// The counts are consecutive results of one status, reset when the status
// changes and saturating at their thresholds. Each tick may deliver one
// probe more than asked on a busy machine (a tick that fired while the
// previous probe ran), so the test waits for the status it set and checks
// what the counts may be, not how many probes a schedule gave.
func TestMonitorCountsConsecutiveResultsAndSaturates(t *testing.T) {
	p := &script{status: probe.Unhealthy}
	h := start(t, p)
	h.mon.Ensure("b", settings)
	for want := int32(1); want <= 5; want++ {
		h.tick("b", time.Second)
		o, ok := h.mon.Observe("b")
		if !ok || o.ConsecutiveFailures < min(want, 3) || o.ConsecutiveFailures > 3 || o.ConsecutiveSuccesses != 0 || o.Last.Status != probe.Unhealthy {
			t.Fatalf("after at least %d failures: %+v", want, o)
		}
	}
	p.set(probe.Healthy)
	if o := h.tickUntil("b", probe.Healthy); o.ConsecutiveFailures != 0 || o.ConsecutiveSuccesses < 1 || o.ConsecutiveSuccesses > 2 {
		t.Fatalf("successes after failures: %+v, want failures reset and successes counted", o)
	}
	p.set(probe.Unknown)
	if o := h.tickUntil("b", probe.Unknown); o.ConsecutiveFailures != 0 || o.ConsecutiveSuccesses != 0 {
		t.Fatalf("Unknown must reset both counts: %+v", o)
	}
}

// tickUntil ticks until key's last result has status, and returns the
// observation then.
func (h *harness) tickUntil(key string, status probe.Status) probe.Observation {
	h.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		h.tick(key, time.Second)
		if o, _ := h.mon.Observe(key); o.Last.Status == status {
			return o
		}
	}
	h.t.Fatalf("no %s result for %s", status, key)
	return probe.Observation{}
}

// Stop's promise: when it returns, the key's loop has exited, so no probe
// starts afterwards however the clock moves.
func TestMonitorStopEndsProbing(t *testing.T) {
	p := &script{status: probe.Healthy}
	h := start(t, p)
	h.mon.Ensure("b", settings)
	h.tick("b", time.Second)
	h.mon.Stop("b")
	if _, ok := h.mon.Observe("b"); ok {
		t.Fatal("stopped breaker still observed")
	}
	before := p.calls.Load()
	for range 20 {
		h.clk.Step(time.Second)
	}
	if after := p.calls.Load(); after != before {
		t.Fatalf("prober called %d more times after Stop returned", after-before)
	}
}

// blocking is a prober that holds each probe until its context ends.
type blocking struct {
	started  chan struct{}
	returned atomic.Int32
}

func (b *blocking) Probe(ctx context.Context, _ probe.Target) probe.Result {
	b.started <- struct{}{}
	<-ctx.Done()
	b.returned.Add(1)
	return probe.Result{Status: probe.Healthy, Reason: "late"}
}

// Stop during a probe cancels it, returns only once it has returned, and
// its late result is never delivered.
func TestMonitorStopDuringAProbe(t *testing.T) {
	p := &blocking{started: make(chan struct{}, 1)}
	h := start(t, p)
	long := settings
	long.Target.Timeout = time.Hour // only Stop can end the probe
	h.mon.Ensure("b", long)
	deadline := time.After(20 * time.Second)
	for waiting := true; waiting; {
		h.clk.Step(time.Second)
		select {
		case <-p.started:
			waiting = false
		case <-time.After(time.Millisecond):
		case <-deadline:
			t.Fatal("no probe started")
		}
	}
	h.mon.Stop("b")
	if p.returned.Load() != 1 {
		t.Fatal("Stop returned while its probe was still running")
	}
	select {
	case key := <-h.probed:
		t.Fatalf("the stopped probe's result was delivered for %q", key)
	default:
	}
}

func TestMonitorWaitsForStart(t *testing.T) {
	p := &script{status: probe.Healthy}
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	probed := make(chan string, 10)
	mon := probe.NewMonitor(p, clk, func(key string, _ probe.Result, _ probe.Change) { probed <- key })
	mon.Ensure("b", settings) // before Start: as when the reconciler runs first
	clk.Step(time.Hour)
	if p.calls.Load() != 0 {
		t.Fatal("probed before Start")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = mon.Start(ctx) }()
	deadline := time.After(10 * time.Second)
	for {
		clk.Step(time.Second)
		select {
		case <-probed:
			return
		case <-time.After(time.Millisecond):
		case <-deadline:
			t.Fatal("no probe after Start")
		}
	}
}

// TestLateProbesAreReported: on a machine so busy that each probe outlasts
// the interval, the next probe starts late and the observation says so
// (how Late rises and clears is TestLatenessHysteresis).
func TestLateProbesAreReported(t *testing.T) {
	var slow atomic.Bool
	var clk atomic.Pointer[clocktesting.FakeClock]
	p := probe.ProberFunc(func(context.Context, probe.Target) probe.Result {
		if slow.Load() {
			clk.Load().Step(2 * time.Second) // this probe took two intervals
		}
		return probe.Result{Status: probe.Healthy, Reason: "scripted"}
	})
	h := start(t, p)
	clk.Store(h.clk)
	slow.Store(true)
	h.mon.Ensure("k", settings)
	h.tick("k", time.Second)
	for range 4 { // each slow probe's own clock step starts the next
		select {
		case <-h.probed:
		case <-time.After(10 * time.Second):
			t.Fatal("the slow probes stopped")
		}
	}
	slow.Store(false)
	obs, _ := h.mon.Observe("k")
	if !obs.Late || obs.Last.Lag < time.Second {
		t.Fatalf("after probes two intervals apart: Late %v, lag %v", obs.Late, obs.Last.Lag)
	}
}

// The observation carries the verdict: the counts against the thresholds,
// judged by the monitor alone. New thresholds judge the counts at once.
func TestMonitorJudgesTheVerdict(t *testing.T) {
	p := &script{status: probe.Unhealthy}
	h := start(t, p)
	h.mon.Ensure("b", settings) // failure threshold 3
	h.tick("b", time.Second)
	if o, _ := h.mon.Observe("b"); o.ConsecutiveFailures < 3 && o.Verdict != probe.VerdictPending {
		t.Fatalf("%d failures of 3: verdict %s, want Pending", o.ConsecutiveFailures, o.Verdict)
	}
	for o, _ := h.mon.Observe("b"); o.ConsecutiveFailures < 3; o, _ = h.mon.Observe("b") {
		h.tick("b", time.Second)
	}
	if o, _ := h.mon.Observe("b"); o.Verdict != probe.VerdictUnhealthy {
		t.Fatalf("3 failures of 3: verdict %s, want Unhealthy", o.Verdict)
	}
	stricter := settings
	stricter.FailureThreshold = 10
	h.mon.Ensure("b", stricter)
	if o, _ := h.mon.Observe("b"); o.Verdict != probe.VerdictPending {
		t.Fatalf("3 failures, threshold raised to 10: verdict %s, want Pending at once", o.Verdict)
	}
	p.set(probe.Healthy)
	o := h.tickUntil("b", probe.Healthy)
	for ; o.ConsecutiveSuccesses < 2; o, _ = h.mon.Observe("b") {
		h.tick("b", time.Second)
	}
	if o.Verdict != probe.VerdictHealthy {
		t.Fatalf("2 successes of 2: verdict %s, want Healthy", o.Verdict)
	}
	p.set(probe.Unknown)
	if o := h.tickUntil("b", probe.Unknown); o.Verdict != probe.VerdictPending {
		t.Fatalf("an Unknown result: verdict %s, want Pending", o.Verdict)
	}
}

package breaker

import (
	"runtime"
	"sync"
	"testing"
)

// Far from its threshold, a TIME_BASED failure is counted on its core's
// budget: at 50 % failures against a 60 % threshold, from every P at once,
// all but a few failures (the first after the minimum, one per exhausted
// budget) leave the mutex alone. A load-independent measure of what the
// benchmarks time on a shared machine.
func TestFarFailuresStayOnTheirCore(t *testing.T) {
	b, err := New("far", Config{WindowType: TimeBased, WindowSize: 3600, MinimumNumberOfCalls: 100, FailureRateThreshold: 60})
	if err != nil {
		t.Fatal(err)
	}
	const per = 100_000
	procs := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			for i := range per {
				p, _ := b.Allow()
				if i%2 == 0 {
					p.Done(Failure)
				} else {
					p.Done(Success)
				}
			}
		})
	}
	wg.Wait()
	w := b.cur.Load().window.t
	w.mu.Lock()
	locked := w.bad.calls
	w.mu.Unlock()
	failures := int64(procs * per / 2)
	if m := b.Metrics(); m.State != Closed || m.FailedCalls != failures || m.Calls != 2*failures {
		t.Fatalf("metrics %+v, want CLOSED with %d of %d failed", m, failures, 2*failures)
	}
	if locked > failures/100 {
		t.Fatalf("%d of %d failures took the window's mutex, want under 1 %%", locked, failures)
	}
	t.Logf("%d of %d failures took the mutex", locked, failures)
}

// Far from its threshold, a COUNT_BASED failure is counted on its core's
// budget too: at 50 % failures against a 60 % threshold on the last 100
// calls, from every P at once, the failures that take the window's mutex
// are the few that find their lane's budget spent (at most one in ten; on
// one P every failure does, by design: the mutex is then uncontended).
func TestFarCountFailuresStayOnTheirCore(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	if procs == 1 {
		t.Skip("one P: failures take the uncontended mutex")
	}
	b, err := New("far", Config{WindowType: CountBased, WindowSize: 100, MinimumNumberOfCalls: 100, FailureRateThreshold: 60})
	if err != nil {
		t.Fatal(err)
	}
	const per = 100_000
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			for i := range per {
				p, _ := b.Allow()
				if i%2 == 0 {
					p.Done(Failure)
				} else {
					p.Done(Success)
				}
			}
		})
	}
	wg.Wait()
	w := b.cur.Load().window.c
	w.mu.Lock()
	locked := w.locked
	w.mu.Unlock()
	failures := int64(procs * per / 2)
	if m := b.Metrics(); m.State != Closed || m.Calls != 100 {
		t.Fatalf("metrics %+v, want CLOSED with 100 calls", m)
	}
	if locked > failures/10 {
		t.Fatalf("%d of %d failures took the window's mutex, want under 10 %%", locked, failures)
	}
	t.Logf("%d of %d failures took the mutex", locked, failures)
}

package breaker_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// TestTotalsCountEveryKind: successful, failed and ignored completions and
// rejections in each rejecting state are counted, DISABLED calls are not,
// and the counts survive transitions and Reset.
func TestTotalsCountEveryKind(t *testing.T) {
	clk := newClock()
	cb := mustNew(t, breaker.Config{Clock: clk, MinimumNumberOfCalls: 4, WindowSize: 4, WaitDurationInOpenState: time.Second, PermittedNumberOfCallsInHalfOpenState: 1})
	if cb.Totals().Counting {
		t.Fatal("counting before EnableTotals")
	}
	p, _ := cb.Allow()
	p.Done(breaker.Ignore) // before counting starts: not counted
	cb.EnableTotals()
	call := func(o breaker.Outcome) {
		t.Helper()
		p, err := cb.Allow()
		if err != nil {
			t.Fatalf("Allow in %s: %v", cb.State(), err)
		}
		p.Done(o)
	}
	call(breaker.Success)
	call(breaker.Ignore)
	call(breaker.Failure)
	call(breaker.Failure)
	call(breaker.Failure) // 3 of 4 failed: opens
	if cb.State() != breaker.Open {
		t.Fatalf("state %s, want OPEN", cb.State())
	}
	for range 3 {
		if _, err := cb.Allow(); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("OPEN admitted a call: %v", err)
		}
	}
	clk.Advance(time.Second)
	held, err := cb.Allow() // the only trial permit
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Allow(); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("full HALF_OPEN admitted a call: %v", err)
	}
	held.Done(breaker.Success) // closes
	cb.ForceOpen()
	if _, err := cb.Allow(); !errors.Is(err, breaker.ErrOpen) {
		t.Fatal("FORCED_OPEN admitted a call")
	}
	cb.Disable()
	call(breaker.Failure) // not counted
	cb.Reset()
	call(breaker.Success)

	got := cb.Totals()
	want := breaker.Totals{Counting: true, Successful: 3, Failed: 3, Ignored: 1, NotPermitted: 5}
	if got != want {
		t.Fatalf("totals %+v, want %+v", got, want)
	}
}

// TestTotalsCountStaleGenerations: a call admitted before a transition and
// completed after it happened, so it is counted, though the window ignores it.
func TestTotalsCountStaleGenerations(t *testing.T) {
	cb := mustNew(t, breaker.Config{Clock: newClock()})
	cb.EnableTotals()
	p, err := cb.Allow()
	if err != nil {
		t.Fatal(err)
	}
	cb.Close() // new generation
	p.Done(breaker.Failure)
	if got := cb.Totals().Failed; got != 1 {
		t.Fatalf("failed %d, want 1", got)
	}
	if m := cb.Metrics(); m.Calls != 0 {
		t.Fatalf("the stale call entered the window: %+v", m)
	}
}

// TestTotalsDurations: with RecordCallDurations the sums and the decaying
// maximum follow the clock; without it nothing is measured.
func TestTotalsDurations(t *testing.T) {
	clk := newClock()
	cb := mustNew(t, breaker.Config{Clock: clk, RecordCallDurations: true})
	took := func(d time.Duration, o breaker.Outcome) {
		t.Helper()
		p, err := cb.Allow()
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(d)
		p.Done(o)
	}
	took(100*time.Millisecond, breaker.Success)
	took(300*time.Millisecond, breaker.Success)
	took(2*time.Second, breaker.Failure)
	took(5*time.Millisecond, breaker.Ignore)
	got := cb.Totals()
	if !got.Timed || got.SuccessfulTime != 400*time.Millisecond || got.FailedTime != 2*time.Second || got.IgnoredTime != 5*time.Millisecond {
		t.Fatalf("sums %+v", got)
	}
	if got.SuccessfulMax != 300*time.Millisecond || got.FailedMax != 2*time.Second || got.IgnoredMax != 5*time.Millisecond {
		t.Fatalf("maxima %+v", got)
	}

	// A shorter call in a later minute starts that minute's maximum.
	clk.Advance(time.Minute)
	took(50*time.Millisecond, breaker.Success)
	if m := cb.Totals().SuccessfulMax; m != 50*time.Millisecond {
		t.Fatalf("max after a minute %v, want the new minute's 50ms", m)
	}
	clk.Advance(3 * time.Minute)
	if got := cb.Totals(); got.SuccessfulMax != 0 || got.FailedMax != 0 || got.SuccessfulTime != 450*time.Millisecond {
		t.Fatalf("after 3 idle minutes the maxima should have decayed and the sums stayed: %+v", got)
	}

	plain := mustNew(t, breaker.Config{Clock: clk})
	plain.EnableTotals()
	p, _ := plain.Allow()
	clk.Advance(time.Second)
	p.Done(breaker.Success)
	if got := plain.Totals(); got.Timed || got.SuccessfulTime != 0 || got.Successful != 1 {
		t.Fatalf("untimed totals %+v", got)
	}
}

func TestRecordCallDurationsFromFileAndEnv(t *testing.T) {
	f, err := breaker.ParseFile([]byte(`{"defaults":{"recordCallDurations":true},"circuits":{"b":{"recordCallDurations":false}}}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Registry()
	if err != nil {
		t.Fatal(err)
	}
	if !r.Get("a").Config().RecordCallDurations || r.Get("b").Config().RecordCallDurations {
		t.Fatal("recordCallDurations not applied per circuit")
	}
	env := map[string]string{"CIRCUITBREAKER_RECORD_CALL_DURATIONS": "maybe"}
	err = f.ApplyEnv("CIRCUITBREAKER", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err == nil || !strings.Contains(err.Error(), "CIRCUITBREAKER_RECORD_CALL_DURATIONS") {
		t.Fatalf("bad boolean not reported by name: %v", err)
	}
}

// TestRegistryEnableTotals: breakers that exist and breakers created later
// both count.
func TestRegistryEnableTotals(t *testing.T) {
	r, err := breaker.NewRegistry(breaker.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := r.Get("before")
	r.EnableTotals()
	after := r.Get("after")
	for _, b := range []*breaker.Breaker{before, after} {
		p, _ := b.Allow()
		p.Done(breaker.Failure)
		if got := b.Totals(); !got.Counting || got.Failed != 1 {
			t.Errorf("%s: %+v", b.Name(), got)
		}
	}
}

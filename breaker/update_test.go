package breaker_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

func newUpdateRegistry(t *testing.T, wt breaker.WindowType) (*breaker.Registry, *breaker.Breaker) {
	t.Helper()
	r, err := breaker.NewRegistry(breaker.Config{WindowType: wt, WindowSize: 10, MinimumNumberOfCalls: 10, FailureRateThreshold: 50,
		WaitDurationInOpenState: 10 * time.Second, PermittedNumberOfCallsInHalfOpenState: 2, Clock: newClock()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r, r.Get("account-read")
}

// TestUpdateKeepsTheWindowWhenItsShapeAllows: new thresholds judge the
// outcomes the window already holds, from the next outcome on.
func TestUpdateKeepsTheWindowWhenItsShapeAllows(t *testing.T) {
	for _, wt := range []breaker.WindowType{breaker.CountBased, breaker.TimeBased} {
		t.Run(wt.String(), func(t *testing.T) {
			r, b := newUpdateRegistry(t, wt)
			for _, o := range []breaker.Outcome{breaker.Success, breaker.Success, breaker.Success, breaker.Failure} {
				call(b, o)
			}
			cfg := b.Config()
			cfg.MinimumNumberOfCalls, cfg.FailureRateThreshold = 5, 40
			kept, err := r.Update("account-read", cfg)
			if err != nil || !kept {
				t.Fatalf("Update: kept %v, %v; want the window kept", kept, err)
			}
			if m := b.Metrics(); m.Calls != 4 || m.FailedCalls != 1 || m.State != breaker.Closed {
				t.Fatalf("after the update: %+v, want the 4 calls kept", m)
			}
			call(b, breaker.Failure) // 2 of 5 = 40%: the new threshold, the new minimum
			if s := b.State(); s != breaker.Open {
				t.Fatalf("state %s, want OPEN under the new settings", s)
			}
			if got := b.Config(); got.FailureRateThreshold != 40 || got.MinimumNumberOfCalls != 5 {
				t.Fatalf("Config() = %+v", got)
			}
		})
	}
}

// TestUpdateSaysWhenTheWindowCannotBeKept: a window of another size or type
// starts empty, and Update says so.
func TestUpdateSaysWhenTheWindowCannotBeKept(t *testing.T) {
	for _, change := range []func(*breaker.Config){
		func(c *breaker.Config) { c.WindowSize = 20 },
		func(c *breaker.Config) { c.WindowType = breaker.TimeBased },
	} {
		r, b := newUpdateRegistry(t, breaker.CountBased)
		call(b, breaker.Failure)
		cfg := b.Config()
		change(&cfg)
		kept, err := r.Update("account-read", cfg)
		if err != nil || kept {
			t.Fatalf("Update: kept %v, %v; want false", kept, err)
		}
		if m := b.Metrics(); m.Calls != 0 || m.State != breaker.Closed {
			t.Fatalf("after the update: %+v, want an empty window", m)
		}
	}
	// A TIME_BASED window that starts tracking slow calls has no record of them.
	r, b := newUpdateRegistry(t, breaker.TimeBased)
	cfg := b.Config()
	cfg.SlowCallDurationThreshold = time.Second
	if kept, err := r.Update("account-read", cfg); err != nil || kept {
		t.Fatalf("slow-call tracking on: kept %v, %v; want false", kept, err)
	}
}

// TestUpdateLeavesAnOpenCircuitOpen: the wait is not cut short; the new
// settings apply from the next transition.
func TestUpdateLeavesAnOpenCircuitOpen(t *testing.T) {
	clk := newClock()
	r, err := breaker.NewRegistry(breaker.Config{WindowSize: 4, MinimumNumberOfCalls: 4, WaitDurationInOpenState: 10 * time.Second,
		PermittedNumberOfCallsInHalfOpenState: 2, Clock: clk}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := r.Get("account-read")
	for range 4 {
		call(b, breaker.Failure)
	}
	cfg := b.Config()
	cfg.WaitDurationInOpenState, cfg.PermittedNumberOfCallsInHalfOpenState = time.Second, 3
	if kept, err := r.Update("account-read", cfg); err != nil || !kept {
		t.Fatalf("Update: %v %v", kept, err)
	}
	clk.Advance(5 * time.Second)
	if _, err := b.Allow(); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("5s into the 10s wait: %v, want still open", err)
	}
	clk.Advance(5 * time.Second)
	admitted := 0
	for range 5 {
		if _, err := b.Allow(); err == nil {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("HALF_OPEN admitted %d, want the new 3", admitted)
	}
}

func TestUpdateValidatesAndAppliesToLaterCircuits(t *testing.T) {
	r, b := newUpdateRegistry(t, breaker.CountBased)
	cfg := b.Config()
	cfg.FailureRateThreshold = 101
	if _, err := r.Update("account-read", cfg); err == nil || !strings.Contains(err.Error(), "account-read.FailureRateThreshold") {
		t.Fatalf("err = %v, want one naming account-read.FailureRateThreshold", err)
	}
	if b.Config().FailureRateThreshold != 50 {
		t.Fatal("an invalid update changed the circuit")
	}
	cfg.FailureRateThreshold = 70
	if kept, err := r.Update("mail-send", cfg); err != nil || !kept {
		t.Fatal(err)
	}
	if got := r.Get("mail-send").Config().FailureRateThreshold; got != 70 {
		t.Fatalf("a circuit created after its update: threshold %v, want 70", got)
	}
}

// TestReloadAppliesAFileKeepingState: a reloaded file updates every
// circuit, says which windows started empty, and follows its kill switch.
func TestReloadAppliesAFileKeepingState(t *testing.T) {
	f, err := breaker.ParseFile([]byte(`{"defaults":{"slidingWindowSize":10,"minimumNumberOfCalls":10}}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Registry()
	if err != nil {
		t.Fatal(err)
	}
	read, mail := r.Get("account-read"), r.Get("mail-send")
	call(read, breaker.Failure)
	call(mail, breaker.Failure)
	f, err = breaker.ParseFile([]byte(`{"enabled":false,"defaults":{"slidingWindowSize":10,"minimumNumberOfCalls":5,"failureRateThreshold":20},
	  "circuits":{"mail-send":{"slidingWindowSize":50}}}`))
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := r.Reload(f)
	if err != nil || !slices.Equal(dropped, []string{"mail-send"}) {
		t.Fatalf("Reload: dropped %v, %v; want [mail-send]", dropped, err)
	}
	if r.Enabled() || read.State() != breaker.Disabled {
		t.Fatal("the reloaded kill switch was not applied")
	}
	if got := read.Config(); got.MinimumNumberOfCalls != 5 || got.FailureRateThreshold != 20 {
		t.Fatalf("account-read after the reload: %+v", got)
	}
	bad, _ := breaker.ParseFile([]byte(`{"defaults":{"slidingWindowSize":0}}`))
	if _, err := r.Reload(bad); err == nil || read.Config().MinimumNumberOfCalls != 5 {
		t.Fatalf("an invalid file: %v, and it must change nothing", err)
	}
}

// TestUpdateUnderLoad: updates race with calls on every path (for the race
// detector); the circuit stays consistent.
func TestUpdateUnderLoad(t *testing.T) {
	r, b := newUpdateRegistry(t, breaker.TimeBased)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 4 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				o := breaker.Success
				if (n+i)%3 == 0 {
					o = breaker.Failure
				}
				call(b, o)
				_ = b.Metrics()
			}
		})
	}
	cfg := b.Config()
	for i := range 200 {
		cfg.MinimumNumberOfCalls = 5 + i%10
		cfg.FailureRateThreshold = float64(30 + i%50)
		if _, err := r.Update("account-read", cfg); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			b.Close()
		}
	}
	close(stop)
	wg.Wait()
	if m := b.Metrics(); m.Calls < 0 || m.FailedCalls > m.Calls {
		t.Fatalf("inconsistent metrics %+v", m)
	}
}

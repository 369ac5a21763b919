package limit_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breaker/manualclock"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// until yields until ok holds, or fails the test after a minute.
func until(t testing.TB, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !ok(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: not %s", what)
		}
	}
}

// TestBulkheadResizeKeepsItsWaiters: SetMaxConcurrentCalls while callers
// wait. A higher limit admits the first waiters at once, in their order; a
// lower one takes no permit back and the waiter left keeps its place until
// the calls in flight are below it. Config, the rejection's Limit and
// OnLimitChanged follow each change; a bad size changes nothing.
func TestBulkheadResizeKeepsItsWaiters(t *testing.T) {
	var mu sync.Mutex
	var changes []limit.LimitChange
	b := bulkhead(t, limit.BulkheadConfig{MaxConcurrentCalls: 1, MaxWaitDuration: time.Minute, OnLimitChanged: func(c limit.LimitChange) {
		mu.Lock()
		changes = append(changes, c)
		mu.Unlock()
	}})
	held := acquire(t, b)
	admitted := make(chan int, 3)
	permits := make([]*limit.Permit, 3)
	for i := range 3 {
		go func() {
			pm, err := b.Acquire(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			permits[i] = &pm
			admitted <- i
		}()
		until(t, "queued", func() bool { return b.Metrics().QueuedCalls == i+1 })
	}
	if err := b.SetMaxConcurrentCalls(3); err != nil {
		t.Fatal(err)
	}
	if got := []int{<-admitted, <-admitted}; got[0]+got[1] != 1 { // the permits are handed over in order; the goroutines wake in any
		t.Fatalf("admitted %v after growing to 3, want the first two waiters", got)
	}
	if m := b.Metrics(); m.MaxAllowedConcurrentCalls != 3 || m.InFlight != 3 || m.QueuedCalls != 1 {
		t.Fatalf("after growing to 3: %+v, want 3 in flight and the third waiter still queued", m)
	}
	if err := b.SetMaxConcurrentCalls(1); err != nil {
		t.Fatal(err)
	}
	var le *limit.LimitedError
	if _, err := b.AcquireWithMaxWait(context.Background(), 0); !errors.As(err, &le) || le.Limit != 1 || b.Config().MaxConcurrentCalls != 1 {
		t.Fatalf("after shrinking to 1: %v, Config %+v, want a rejection naming limit 1", err, b.Config())
	}
	held.Release()
	permits[0].Release()
	if m := b.Metrics(); m.InFlight != 1 || m.QueuedCalls != 1 {
		t.Fatalf("with 1 in flight at limit 1: %+v, want the waiter still queued", m)
	}
	permits[1].Release()
	if got := <-admitted; got != 2 {
		t.Fatalf("admitted waiter %d, want 2", got)
	}
	permits[2].Release()
	wantMetrics(t, b, 0, 1)
	for _, n := range []int{0, -1, 1 << 31} {
		var ce *breaker.ConfigError
		if err := b.SetMaxConcurrentCalls(n); !errors.As(err, &ce) || ce.Field != "MaxConcurrentCalls" {
			t.Errorf("SetMaxConcurrentCalls(%d): %v, want a ConfigError naming MaxConcurrentCalls", n, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []limit.LimitChange{{Limiter: "account-access", From: 1, To: 3}, {Limiter: "account-access", From: 3, To: 1}}
	if len(changes) != 2 || changes[0] != want[0] || changes[1] != want[1] || b.Config().MaxConcurrentCalls != 1 {
		t.Fatalf("changes %v, Config %+v; want %v and 1", changes, b.Config(), want)
	}
}

// TestPerCallWait: two call sites share a bulkhead; one waits for a permit
// (AcquireWithMaxWait, or a WithMaxWait view through Execute), the other is
// rejected at once. Each wait ends at its own bound, and a view with no
// wait rejects at once even when the bulkhead's MaxWaitDuration waits.
func TestPerCallWait(t *testing.T) {
	b := bulkhead(t, limit.BulkheadConfig{MaxConcurrentCalls: 1})
	held := acquire(t, b)
	waited := make(chan error, 2)
	go func() {
		pm, err := b.AcquireWithMaxWait(context.Background(), time.Minute)
		pm.Release()
		waited <- err
	}()
	until(t, "one caller queued", func() bool { return b.Metrics().QueuedCalls == 1 })
	go func() {
		_, err := limit.Execute(context.Background(), b.WithMaxWait(time.Minute), func(context.Context) (int, error) { return 1, nil })
		waited <- err
	}()
	until(t, "two callers queued", func() bool { return b.Metrics().QueuedCalls == 2 })
	if _, err := b.Acquire(context.Background()); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("the call site that does not wait: %v, want a rejection at once", err)
	}
	held.Release()
	for range 2 {
		if err := <-waited; err != nil {
			t.Fatalf("a waiting call site: %v, want a permit", err)
		}
	}
	wantMetrics(t, b, 0, 1)

	held = acquire(t, b)
	if _, err := b.AcquireWithMaxWait(context.Background(), time.Millisecond); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("a wait of 1 ms: %v, want a rejection once it ended", err)
	}
	patient := bulkhead(t, limit.BulkheadConfig{MaxConcurrentCalls: 1, MaxWaitDuration: time.Hour})
	patient.EnableRejectionCount()
	pheld := acquire(t, patient)
	if _, err := patient.WithMaxWait(0).Acquire(context.Background()); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("a view with no wait on a bulkhead that waits an hour: %v, want a rejection at once", err)
	}
	if v := patient.WithMaxWait(0); v.Name() != "account-access" || v.Metrics().Rejected != 1 {
		t.Fatalf("the view: %s %+v, want the bulkhead's name and metrics", v.Name(), v.Metrics())
	}
	held.Release()
	pheld.Release()
}

// TestOnRejectedIsCalledForEachRejection: both limiters call OnRejected
// once per rejection, before Acquire returns, with the limit that
// rejected; a hook that panics is logged and the rejection is returned as
// usual.
func TestOnRejectedIsCalledForEachRejection(t *testing.T) {
	var logged bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logged, nil))
	var got []limit.Rejection
	hook := func(r limit.Rejection) {
		got = append(got, r)
		if len(got) == 3 {
			panic("a hook that fails")
		}
	}
	b := bulkhead(t, limit.BulkheadConfig{MaxConcurrentCalls: 1, OnRejected: hook, Logger: logger})
	a, err := limit.NewAdaptive("account-read", limit.AdaptiveConfig{MinLimit: 2, InitialLimit: 2, MaxLimit: 2, OnRejected: hook, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	held := []*limit.Permit{acquire(t, b), acquire(t, a), acquire(t, a)}
	for i, l := range []limit.Limiter{b, a, a} {
		if _, err := l.Acquire(context.Background()); !errors.Is(err, limit.ErrLimited) || len(got) != i+1 {
			t.Fatalf("rejection %d: %v with %d hook calls, want a rejection and the hook called before it returned", i, err, len(got))
		}
	}
	want := []limit.Rejection{{Limiter: "account-access", Limit: 1}, {Limiter: "account-read", Limit: 2}, {Limiter: "account-read", Limit: 2}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("hook calls %v, want %v", got, want)
		}
	}
	if !strings.Contains(logged.String(), "a hook that fails") || !strings.Contains(logged.String(), "OnRejected") {
		t.Fatalf("log %q, want the hook's panic", logged.String())
	}
	for _, pm := range held {
		pm.Release()
	}
}

// TestOnLimitChangedFollowsTheLimit: an adaptive limit's changes reach
// OnLimitChanged in order (each From is the To before it), the last one
// is the limit Metrics reports, and the rejection's Limit is the limit
// when it rejected.
func TestOnLimitChangedFollowsTheLimit(t *testing.T) {
	clk := manualclock.New(time.Time{})
	var changes []limit.LimitChange
	a, err := limit.NewAdaptive("account-access", limit.AdaptiveConfig{Clock: clk, MinLimit: 2, InitialLimit: 100, MaxLimit: 200,
		OnLimitChanged: func(c limit.LimitChange) { changes = append(changes, c) }})
	if err != nil {
		t.Fatal(err)
	}
	s := newClosedLoop(3, a, clk, 64, 8, 4*time.Millisecond, 0)
	s.run(5 * time.Second)
	if len(changes) < 2 {
		t.Fatalf("%d changes in 5 s from 100 toward 8 workers, want several", len(changes))
	}
	from := 100
	for _, c := range changes {
		if c.From != from || c.To == c.From || c.Limiter != "account-access" {
			t.Fatalf("changes %v: not one after the other from 100", changes)
		}
		from = c.To
	}
	m := a.Metrics()
	if from != m.MaxAllowedConcurrentCalls {
		t.Fatalf("last change to %d, limit %d", from, m.MaxAllowedConcurrentCalls)
	}
	for range m.AvailableConcurrentCalls {
		acquire(t, a) // held until the test ends
	}
	var le *limit.LimitedError
	if _, err := a.Acquire(context.Background()); !errors.As(err, &le) || le.Limit != from {
		t.Fatalf("rejection %v, want one naming the current limit %d", err, from)
	}
}

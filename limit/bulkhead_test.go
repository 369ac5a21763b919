package limit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/limit"
)

func bulkhead(t testing.TB, cfg limit.BulkheadConfig) *limit.Bulkhead {
	t.Helper()
	b, err := limit.NewBulkhead("account-access", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func acquire(t testing.TB, l limit.Limiter) *limit.Permit {
	t.Helper()
	pm, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return &pm
}

func wantMetrics(t testing.TB, l limit.Limiter, inFlight, available int) {
	t.Helper()
	if m := l.Metrics(); m.InFlight != inFlight || m.AvailableConcurrentCalls != available {
		t.Fatalf("metrics %+v, want %d in flight and %d available", m, inFlight, available)
	}
}

// TestBulkheadRejectsTheCallBeyondTheLimitAtOnce: Resilience4j's
// maxConcurrentCalls with maxWaitDuration 0: the call beyond the limit
// fails at once with an error that errors.Is ErrLimited, counted once
// counting is on.
func TestBulkheadRejectsTheCallBeyondTheLimitAtOnce(t *testing.T) {
	b := bulkhead(t, limit.BulkheadConfig{MaxConcurrentCalls: 2})
	p1, p2 := acquire(t, b), acquire(t, b)
	if _, err := b.Acquire(context.Background()); !errors.Is(err, limit.ErrLimited) || b.Metrics().Rejected != 0 {
		t.Fatalf("third call before counting: %v, %+v; want a rejection, not counted", err, b.Metrics())
	}
	b.EnableRejectionCount() // as breakerprom's collector does
	_, err := b.Acquire(context.Background())
	var le *limit.LimitedError
	if !errors.Is(err, limit.ErrLimited) || !errors.As(err, &le) || le.Limiter != "account-access" || le.Limit != 2 {
		t.Fatalf("third call: %v, want a *LimitedError for account-access, limit 2", err)
	}
	if m := b.Metrics(); m.Rejected != 1 || m.MaxAllowedConcurrentCalls != 2 || m.AvailableConcurrentCalls != 0 {
		t.Fatalf("metrics %+v, want 1 rejected, 0 of 2 available", m)
	}
	p1.Release()
	p1.Release() // idempotent: frees one permit, not two
	p3 := acquire(t, b)
	if _, err := b.Acquire(context.Background()); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("after one release and one more call: %v, want limited (a second Release freed a permit)", err)
	}
	p2.Drop()
	p3.Release()
	wantMetrics(t, b, 0, 2)
}

// TestExecuteReleasesThePermitOnEveryWayOut: success, failure, a caller
// canceled with a cause, a deadline, and a panic each give the permit
// back; the limit is not lowered by calls that ended.
func TestExecuteReleasesThePermitOnEveryWayOut(t *testing.T) {
	b := bulkhead(t, limit.BulkheadConfig{MaxConcurrentCalls: 1})
	ok := func(context.Context) (int, error) { return 1, nil }
	failed := func(context.Context) (int, error) { return 0, errors.New("500") }
	canceled := func(ctx context.Context) (int, error) {
		ctx, cancel := context.WithCancelCause(ctx)
		cancel(errors.New("client went away"))
		return limit.Execute(ctx, b, func(ctx context.Context) (int, error) { return 0, context.Cause(ctx) })
	}
	for name, run := range map[string]func() error{
		"success": func() error { _, err := limit.Execute(context.Background(), b, ok); return err },
		"failure": func() error { _, err := limit.Execute(context.Background(), b, failed); return err },
		"canceled during the call with a cause": func() error {
			ctx, cancel := context.WithCancelCause(context.Background())
			_, err := limit.Execute(ctx, b, func(ctx context.Context) (int, error) {
				cancel(errors.New("client went away"))
				return 0, context.Cause(ctx)
			})
			return err
		},
		"already canceled": func() error { _, err := canceled(context.Background()); return err },
		"deadline": func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
			defer cancel()
			_, err := limit.Execute(context.Background(), b, func(context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
			return err
		},
		"panic": func() (err error) {
			defer func() {
				if recover() == nil {
					err = errors.New("the panic was not re-raised")
				}
			}()
			_, _ = limit.Execute(context.Background(), b, func(context.Context) (int, error) { panic("boom") })
			return nil
		},
	} {
		_ = run()
		wantMetrics(t, b, 0, 1)
		if _, err := limit.Execute(context.Background(), b, ok); err != nil {
			t.Fatalf("after %s: %v, want the permit back", name, err)
		}
	}
}

// TestBulkheadWaitsForAPermitInArrivalOrder: with maxWaitDuration, callers
// beyond the limit queue and get the permits as they are released, first
// come first served; a newcomer does not overtake the queue.
func TestBulkheadWaitsForAPermitInArrivalOrder(t *testing.T) {
	b := bulkhead(t, limit.BulkheadConfig{MaxConcurrentCalls: 1, MaxWaitDuration: time.Minute})
	held := acquire(t, b)
	order := make(chan int, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			pm, err := b.Acquire(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			pm.Release()
		})
		for b.Metrics().QueuedCalls != i+1 {
			time.Sleep(time.Millisecond) // wait until caller i is in the queue
		}
	}
	held.Release()
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("caller %d got a permit in turn %d", got, want)
		}
		want++
	}
	wantMetrics(t, b, 0, 1)
}

// TestBulkheadWaitEnds: a wait ends with a *LimitedError after
// maxWaitDuration, and with the context's cause when the caller cancels
// first; neither leaves a permit taken or a caller queued.
func TestBulkheadWaitEnds(t *testing.T) {
	b := bulkhead(t, limit.BulkheadConfig{MaxConcurrentCalls: 1, MaxWaitDuration: 20 * time.Millisecond})
	held := acquire(t, b)
	if _, err := b.Acquire(context.Background()); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("after the wait: %v, want limited", err)
	}
	slow := bulkhead(t, limit.BulkheadConfig{MaxConcurrentCalls: 1, MaxWaitDuration: time.Hour})
	slowHeld := acquire(t, slow)
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("client went away")
	time.AfterFunc(10*time.Millisecond, func() { cancel(cause) })
	if _, err := slow.Acquire(ctx); !errors.Is(err, cause) {
		t.Fatalf("canceled wait: %v, want the cause", err)
	}
	for _, l := range []limit.Limiter{b, slow} {
		if m := l.Metrics(); m.QueuedCalls != 0 || m.InFlight != 1 {
			t.Fatalf("%+v, want nobody queued and only the held permit taken", m)
		}
	}
	held.Release()
	slowHeld.Release()
	wantMetrics(t, b, 0, 1)
	wantMetrics(t, slow, 0, 1)
}

// TestBulkheadNeverAdmitsMoreThanItsLimit: goroutines that wait, give up
// and cancel at random never have more than maxConcurrentCalls inside at
// once, and every permit comes back.
func TestBulkheadNeverAdmitsMoreThanItsLimit(t *testing.T) {
	const limitN = 4
	for _, wait := range []time.Duration{0, 50 * time.Microsecond, time.Second} {
		b := bulkhead(t, limit.BulkheadConfig{MaxConcurrentCalls: limitN, MaxWaitDuration: wait})
		var inside, most atomic.Int64
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				for i := range 300 {
					ctx, cancel := context.WithCancel(context.Background())
					if (g+i)%7 == 0 {
						time.AfterFunc(10*time.Microsecond, cancel)
					}
					_, _ = limit.Execute(ctx, b, func(context.Context) (int, error) {
						n := inside.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						if i%3 == 0 {
							time.Sleep(time.Microsecond)
						}
						inside.Add(-1)
						return 0, nil
					})
					cancel()
				}
			})
		}
		wg.Wait()
		if most.Load() > limitN {
			t.Fatalf("wait %v: %d calls inside at once, limit %d", wait, most.Load(), limitN)
		}
		wantMetrics(t, b, 0, limitN)
		if m := b.Metrics(); m.QueuedCalls != 0 {
			t.Fatalf("wait %v: %d still queued", wait, m.QueuedCalls)
		}
	}
}

// TestBulkheadConfigErrorsNameTheField: a bad setting is a
// *breaker.ConfigError that names it.
func TestBulkheadConfigErrorsNameTheField(t *testing.T) {
	for field, cfg := range map[string]limit.BulkheadConfig{
		"MaxConcurrentCalls": {MaxConcurrentCalls: -1},
		"MaxWaitDuration":    {MaxWaitDuration: -time.Second},
	} {
		_, err := limit.NewBulkhead("x", cfg)
		var ce *breaker.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%+v: %v, want a ConfigError naming %s", cfg, err, field)
		}
	}
	if got := bulkhead(t, limit.BulkheadConfig{}).Config(); got.MaxConcurrentCalls != 25 || got.MaxWaitDuration != 0 {
		t.Errorf("defaults %+v, want Resilience4j's 25 and 0", got)
	}
}

package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// TestExecuteIgnoresACallerCancelledWithACause: a caller that cancels its
// context with a cause (context.WithCancelCause, errgroup.WithContext) gets
// that cause back from net/http and friends, not context.Canceled. The
// callee did not fail: the call is ignored, whatever the error says.
func TestExecuteIgnoresACallerCancelledWithACause(t *testing.T) {
	b := mustNew(t, breaker.Config{MinimumNumberOfCalls: 1, WindowSize: 1, Clock: newClock()})
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("client went away")
	_, err := breaker.Execute(ctx, b, func(ctx context.Context) (int, error) {
		cancel(cause)
		return 0, fmt.Errorf("Get \"http://x\": %w", context.Cause(ctx))
	})
	if !errors.Is(err, cause) {
		t.Fatalf("err = %v, want the cause", err)
	}
	if m := b.Metrics(); m.Calls != 0 || m.FailedCalls != 0 || m.State != breaker.Closed {
		t.Fatalf("metrics = %+v, want the cancelled call ignored", m)
	}
}

// TestExecuteIgnoresASuccessOfACancelledCaller: the godoc's promise is
// "whatever fn returned": a function that returns nil after its caller
// canceled (it ignored the context, or finished just then) is not a success
// either. The caller gave up, so the call says nothing about the callee.
func TestExecuteIgnoresASuccessOfACancelledCaller(t *testing.T) {
	for _, cancelWith := range []error{nil, errors.New("client went away")} {
		b := mustNew(t, breaker.Config{MinimumNumberOfCalls: 1, WindowSize: 1, Clock: newClock()})
		ctx, cancel := context.WithCancelCause(context.Background())
		v, err := breaker.Execute(ctx, b, func(context.Context) (int, error) {
			cancel(cancelWith)
			return 7, nil
		})
		if v != 7 || err != nil {
			t.Fatalf("Execute = %d, %v; want fn's own 7, nil", v, err)
		}
		if m := b.Metrics(); m.Calls != 0 {
			t.Fatalf("cause %v: metrics = %+v, want the cancelled caller's call ignored", cancelWith, m)
		}
	}
}

// TestExecuteCountsADeadlineAsAFailure: running out of time is the
// callee's failure, even when the deadline carries a cause.
func TestExecuteCountsADeadlineAsAFailure(t *testing.T) {
	b := mustNew(t, breaker.Config{MinimumNumberOfCalls: 1, WindowSize: 1, Clock: newClock()})
	ctx, cancel := context.WithDeadlineCause(context.Background(), time.Unix(0, 0), errors.New("budget spent"))
	defer cancel()
	_, _ = breaker.Execute(context.Background(), b, func(context.Context) (int, error) {
		<-ctx.Done()
		return 0, context.Cause(ctx)
	})
	if m := b.Metrics(); m.FailedCalls != 1 {
		t.Fatalf("metrics = %+v, want one failure", m)
	}
}

// TestExecuteFanOutCountsOneFailure: errgroup.WithContext cancels the
// siblings with the first error as the cause; only that first call failed.
func TestExecuteFanOutCountsOneFailure(t *testing.T) {
	b := mustNew(t, breaker.Config{MinimumNumberOfCalls: 100, WindowSize: 100, Clock: newClock()})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	first := errors.New("upstream 500")
	var wg sync.WaitGroup
	started := make(chan struct{})
	var once sync.Once
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := breaker.Execute(ctx, b, func(ctx context.Context) (int, error) {
				if i == 0 {
					<-started
					return 0, first
				}
				once.Do(func() { close(started) })
				<-ctx.Done()
				return 0, context.Cause(ctx)
			})
			if i == 0 {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if m := b.Metrics(); m.FailedCalls != 1 || m.Calls != 1 {
		t.Fatalf("metrics = %+v, want one call, one failure", m)
	}
}

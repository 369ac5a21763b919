package limit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// TestAComposedLimitsRejectionsLeaveTheCircuitClosed: a limit composed by
// hand inside a circuit, breaker.Execute around limit.Execute (failsafe-go's
// failsafe.With(cb, bulkhead)), with the breaker's default classifier: the
// limit's rejections are not the callee's failures, so a circuit that
// opens on one failure stays CLOSED, with nothing in its window, for both
// limiters; a real failure still opens it.
func TestAComposedLimitsRejectionsLeaveTheCircuitClosed(t *testing.T) {
	b := bulkhead(t, limit.BulkheadConfig{MaxConcurrentCalls: 1})
	a, err := limit.NewAdaptive("account-read", limit.AdaptiveConfig{MinLimit: 1, InitialLimit: 1, MaxLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, l := range []limit.Limiter{b, a} {
		cb, err := breaker.New("account-read", breaker.Config{MinimumNumberOfCalls: 1, FailureRateThreshold: 1})
		if err != nil {
			t.Fatal(err)
		}
		held := acquire(t, l) // the limit is full
		for range 5 {
			_, err := breaker.Execute(ctx, cb, func(ctx context.Context) (string, error) {
				return limit.Execute(ctx, l, func(context.Context) (string, error) { return "alice", nil })
			})
			if !errors.Is(err, limit.ErrLimited) || !errors.Is(err, breaker.ErrNotCalled) {
				t.Fatalf("%s: %v, want a rejection matching ErrLimited and breaker.ErrNotCalled", l.Name(), err)
			}
		}
		if m := cb.Metrics(); m.State != breaker.Closed || m.Calls != 0 {
			t.Fatalf("%s: the circuit after 5 rejections: %+v, want CLOSED with no call in its window", l.Name(), m)
		}
		held.Release()
		_, _ = breaker.Execute(ctx, cb, func(ctx context.Context) (string, error) {
			return limit.Execute(ctx, l, func(context.Context) (string, error) { return "", errors.New("503") })
		})
		if s := cb.State(); s != breaker.Open {
			t.Fatalf("%s: after a failure of the callee: %s, want OPEN", l.Name(), s)
		}
	}
}

package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// shedError is a load shedder's rejection: the callee was not called.
type shedError struct{}

func (shedError) Error() string        { return "shed" }
func (shedError) Is(target error) bool { return target == breaker.ErrNotCalled }

// TestCallsNeverMadeAreIgnored: with the default classifier, an error that
// matches ErrNotCalled (a limiter's rejection, wrapped or not) counts as
// neither a success nor a failure, so a circuit that opens on one failure
// stays CLOSED with an empty window; any other error still opens it.
func TestCallsNeverMadeAreIgnored(t *testing.T) {
	for _, err := range []error{shedError{}, fmt.Errorf("account-read: %w", shedError{}), breaker.ErrNotCalled} {
		b := mustNew(t, breaker.Config{MinimumNumberOfCalls: 1, FailureRateThreshold: 1, Clock: newClock()})
		if got := breaker.DefaultClassifier(err); got != breaker.Ignore {
			t.Errorf("DefaultClassifier(%v) = %s, want ignore", err, got)
		}
		_, _ = breaker.Execute(context.Background(), b, func(context.Context) (int, error) { return 0, err })
		if m := b.Metrics(); m.State != breaker.Closed || m.Calls != 0 {
			t.Errorf("after %v: %+v, want CLOSED with no call in the window", err, m)
		}
		_, _ = breaker.Execute(context.Background(), b, func(context.Context) (int, error) { return 0, errBoom })
		if s := b.State(); s != breaker.Open {
			t.Errorf("after %v, then a failure: %s, want OPEN", err, s)
		}
	}
	if errors.Is(errBoom, breaker.ErrNotCalled) {
		t.Fatal("a plain error matches ErrNotCalled")
	}
}

// ShedError is a load shedder's rejection of a call it never made.
type ShedError struct{ Shedder string }

func (e *ShedError) Error() string { return e.Shedder + ": shed" }

// Is makes the rejection match breaker.ErrNotCalled.
func (e *ShedError) Is(target error) bool { return target == breaker.ErrNotCalled }

// An error that matches ErrNotCalled says the callee was never called (a
// concurrency limit's rejection matches it): the default classifier
// ignores it, so a circuit that opens on one failure stays CLOSED.
func ExampleErrNotCalled() {
	b, _ := breaker.New("account-read", breaker.Config{MinimumNumberOfCalls: 1, FailureRateThreshold: 1})
	_, err := breaker.Execute(context.Background(), b, func(ctx context.Context) (string, error) {
		return "", &ShedError{Shedder: "account-read"} // refused before the call
	})
	fmt.Println(err, errors.Is(err, breaker.ErrNotCalled), b.State(), b.Metrics().Calls)
	// Output:
	// account-read: shed true CLOSED 0
}

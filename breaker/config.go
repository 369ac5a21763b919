package breaker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// WindowType is how the sliding window counts calls.
type WindowType int

const (
	// TimeBased keeps the outcomes of the last WindowSize seconds.
	TimeBased WindowType = iota
	// CountBased keeps the last WindowSize outcomes.
	CountBased
)

// String returns TIME_BASED or COUNT_BASED.
func (w WindowType) String() string {
	switch w {
	case TimeBased:
		return "TIME_BASED"
	case CountBased:
		return "COUNT_BASED"
	}
	return fmt.Sprintf("WindowType(%d)", int(w))
}

// Outcome classifies a completed call.
type Outcome int

const (
	// Success counts toward the window as a success.
	Success Outcome = iota
	// Failure counts as a failure.
	Failure
	// Ignore counts as neither: the call is not in the window, and a
	// half-open permit it held is released for another trial call.
	Ignore
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Ignore:
		return "ignore"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Config configures a Breaker. The zero value of each field means its
// default, given in the field's comment (Resilience4j's, except where noted).
type Config struct {
	// FailureRateThreshold is the failure percentage, in (0, 100], at which
	// the circuit opens. Default 50.
	FailureRateThreshold float64
	// SlowCallRateThreshold is the percentage of slow calls, in (0, 100], at
	// which the circuit opens. Default 100.
	SlowCallRateThreshold float64
	// SlowCallDurationThreshold is the duration above which a call is slow.
	// Default 0: slow calls are not tracked, which saves two clock reads per
	// call. (Resilience4j's default is 60s.)
	SlowCallDurationThreshold time.Duration
	// MinimumNumberOfCalls is how many calls the window needs before a rate
	// is computed. Default 100.
	MinimumNumberOfCalls int
	// WindowType is TimeBased (default, the zero value) or CountBased.
	WindowType WindowType
	// WindowSize is seconds for TimeBased, calls for CountBased. Default 100.
	WindowSize int
	// WaitDurationInOpenState is how long the circuit stays open before
	// allowing trial calls. Default 60s.
	WaitDurationInOpenState time.Duration
	// WaitIntervalFunction, if set, gives the open wait for the attempt-th
	// consecutive opening (1-based), for backoff; it overrides
	// WaitDurationInOpenState. A result <= 0 is an error at open time and
	// falls back to WaitDurationInOpenState.
	WaitIntervalFunction func(attempt int) time.Duration
	// PermittedNumberOfCallsInHalfOpenState is how many trial calls
	// HALF_OPEN admits. Default 10.
	PermittedNumberOfCallsInHalfOpenState int
	// MaxWaitDurationInHalfOpenState, if positive, opens the circuit again
	// when HALF_OPEN has not decided within it (for example because a permit
	// was never completed). Default 0: wait for the trial calls.
	MaxWaitDurationInHalfOpenState time.Duration
	// AutomaticTransitionFromOpenToHalfOpen makes State report HALF_OPEN once
	// the open wait has passed, without waiting for a call. No timer or
	// goroutine is involved: the state is derived from the clock.
	AutomaticTransitionFromOpenToHalfOpen bool
	// Classifier classifies a call's error. Default: nil is Success,
	// context.Canceled is Ignore (the caller gave up; the callee did not
	// fail), anything else is Failure.
	Classifier func(err error) Outcome
	// Clock supplies time. Default: the system clock.
	Clock Clock
	// OnEvent, if set, receives every state transition exactly once, in
	// order, and in METRICS_ONLY every threshold crossing; always outside
	// the breaker's locks, so it may call back into the breaker.
	OnEvent func(Event)
}

// Clock supplies the current time; inject one in tests.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// DefaultClassifier is the classifier used when Config.Classifier is nil.
func DefaultClassifier(err error) Outcome {
	switch {
	case err == nil:
		return Success
	case errors.Is(err, context.Canceled):
		return Ignore
	}
	return Failure
}

// Defaults.
const (
	DefaultFailureRateThreshold     = 50
	DefaultSlowCallRateThreshold    = 100
	DefaultMinimumNumberOfCalls     = 100
	DefaultWindowSize               = 100
	DefaultWaitDurationInOpenState  = 60 * time.Second
	DefaultPermittedCallsInHalfOpen = 10
	maxWindowSize                   = 1 << 20
)

// ConfigError names the field that made a Config invalid.
type ConfigError struct {
	Field  string
	Value  any
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("breaker config: %s=%v: %s", e.Field, e.Value, e.Reason)
}

// withDefaults validates c and returns it with defaults applied.
func (c Config) withDefaults() (Config, error) {
	bad := func(field string, v any, reason string) (Config, error) {
		return c, &ConfigError{Field: field, Value: v, Reason: reason}
	}
	rate := func(field string, v float64) error {
		if v != v || v < 0 || v > 100 { // v != v: NaN
			return &ConfigError{Field: field, Value: v, Reason: "must be in (0, 100]"}
		}
		return nil
	}
	if err := rate("failureRateThreshold", c.FailureRateThreshold); err != nil {
		return c, err
	}
	if err := rate("slowCallRateThreshold", c.SlowCallRateThreshold); err != nil {
		return c, err
	}
	switch {
	case c.SlowCallDurationThreshold < 0:
		return bad("slowCallDurationThreshold", c.SlowCallDurationThreshold, "must not be negative")
	case c.MinimumNumberOfCalls < 0:
		return bad("minimumNumberOfCalls", c.MinimumNumberOfCalls, "must not be negative")
	case c.WindowType != TimeBased && c.WindowType != CountBased:
		return bad("slidingWindowType", c.WindowType, "must be TIME_BASED or COUNT_BASED")
	case c.WindowSize < 0 || c.WindowSize > maxWindowSize:
		return bad("slidingWindowSize", c.WindowSize, fmt.Sprintf("must be in [1, %d]", maxWindowSize))
	case c.WaitDurationInOpenState < 0:
		return bad("waitDurationInOpenState", c.WaitDurationInOpenState, "must not be negative")
	case c.PermittedNumberOfCallsInHalfOpenState < 0:
		return bad("permittedNumberOfCallsInHalfOpenState", c.PermittedNumberOfCallsInHalfOpenState, "must be at least 1")
	case c.MaxWaitDurationInHalfOpenState < 0:
		return bad("maxWaitDurationInHalfOpenState", c.MaxWaitDurationInHalfOpenState, "must not be negative")
	}
	c = merge(Config{
		FailureRateThreshold:                  DefaultFailureRateThreshold,
		SlowCallRateThreshold:                 DefaultSlowCallRateThreshold,
		MinimumNumberOfCalls:                  DefaultMinimumNumberOfCalls,
		WindowSize:                            DefaultWindowSize,
		WaitDurationInOpenState:               DefaultWaitDurationInOpenState,
		PermittedNumberOfCallsInHalfOpenState: DefaultPermittedCallsInHalfOpen,
		Classifier:                            DefaultClassifier,
		Clock:                                 systemClock{},
	}, c)
	if c.WindowType == CountBased && c.MinimumNumberOfCalls > c.WindowSize {
		// A count window never holds more than its size.
		c.MinimumNumberOfCalls = c.WindowSize
	}
	return c, nil
}

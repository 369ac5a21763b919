package breaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// WindowType is how the sliding window counts calls.
type WindowType int

const (
	// CountBased keeps the last WindowSize outcomes. It is the default (the
	// zero value), as in Resilience4j.
	CountBased WindowType = iota
	// TimeBased keeps the outcomes of the last WindowSize seconds.
	TimeBased
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
	// RecordCallDurations measures every call's duration for Totals (and so
	// for the calls_seconds sum and max that breakerprom exports). It costs
	// two clock reads per call, which is why it is off by default; slow-call
	// tracking turns it on.
	RecordCallDurations bool
	// MinimumNumberOfCalls is how many calls the window needs before a rate
	// is computed, in [1, 2^31-1]. Default 100. A COUNT_BASED window never
	// holds more than WindowSize calls, so a larger minimum is lowered to it.
	MinimumNumberOfCalls int
	// WindowType is CountBased (default, the zero value) or TimeBased.
	WindowType WindowType
	// WindowSize is seconds for TimeBased, calls for CountBased, in
	// [1, 2^20]. Default 100.
	WindowSize int
	// WaitDurationInOpenState is how long the circuit stays open before
	// allowing trial calls. Default 60s.
	WaitDurationInOpenState time.Duration
	// OpenUntilCap is the longest OpenUntil or OpenFor (a server's
	// Retry-After, gRPC's RetryInfo or pushback) keeps the circuit open,
	// from the moment it is called; a longer request is cut to it. Default:
	// WaitDurationInOpenState, so that a server cannot hold the circuit
	// open longer than its own failures would unless you allow it.
	OpenUntilCap time.Duration
	// WaitIntervalFunction, if set, gives the open wait for the attempt-th
	// consecutive opening (1-based), for backoff; it overrides
	// WaitDurationInOpenState. A result <= 0 is an error at open time and
	// falls back to WaitDurationInOpenState.
	WaitIntervalFunction func(attempt int) time.Duration
	// PermittedNumberOfCallsInHalfOpenState is how many trial calls
	// HALF_OPEN admits, in [1, 2^31-1]. Default 10.
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
	// fail), so is an error matching ErrNotCalled (the call was never made,
	// as when a concurrency limit rejects it), anything else is Failure.
	Classifier func(err error) Outcome
	// Clock supplies time. Default: the system clock.
	Clock Clock
	// OnEvent, if set, is subscribed at construction (see
	// Breaker.Subscribe): it receives every event exactly once, in order,
	// outside the breaker's locks, so it may call back into the breaker.
	OnEvent func(Event)
	// Logger receives what the breaker cannot return to a caller: a panic
	// in an event consumer. Default: slog.Default().
	Logger *slog.Logger

	// backoff is what a File's backoff settings said, when it set any.
	backoff *fileBackoff
}

// Clock supplies the current time; inject one in tests.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// ErrNotCalled is matched (errors.Is) by errors that say the callee was
// never called: something between the caller and the callee refused the
// call first. A concurrency limit's rejection matches it (the limit
// module's LimitedError does), so a limit composed by hand inside a circuit,
//
//	breaker.Execute(ctx, cb, func(ctx context.Context) (T, error) {
//		return limit.Execute(ctx, l, fn)
//	})
//
// cannot open the circuit with its rejections. Such an outcome says nothing
// about the callee's health, so DefaultClassifier ignores it. An error of
// your own (a rate limiter's, a load shedder's) matches it with an Is
// method:
//
//	func (e *ShedError) Is(target error) bool { return target == breaker.ErrNotCalled }
var ErrNotCalled = errors.New("the callee was not called")

// DefaultClassifier is the classifier used when Config.Classifier is nil:
// nil is Success; context.Canceled (the caller gave up) and an error
// matching ErrNotCalled (the call was never made) are Ignore; any other
// error is Failure.
func DefaultClassifier(err error) Outcome {
	switch {
	case err == nil:
		return Success
	case errors.Is(err, context.Canceled), errors.Is(err, ErrNotCalled):
		return Ignore
	}
	return Failure
}

// Defaults: Resilience4j's, except SlowCallDurationThreshold (see Config).
const (
	defaultFailureRateThreshold     = 50
	defaultSlowCallRateThreshold    = 100
	defaultMinimumNumberOfCalls     = 100
	defaultWindowSize               = 100
	defaultWaitDurationInOpenState  = 60 * time.Second
	defaultPermittedCallsInHalfOpen = 10
)

// Bounds of the integer fields: what the implementation can hold (trial
// permits are counted in 32 bits; a window's memory grows with its size).
const (
	maxWindowSize = 1 << 20
	maxCount      = math.MaxInt32
)

// ConfigError names the field that made a configuration invalid, as the
// user wrote it: the Go field name for a Config (WindowSize), the property
// key with its place in the file for a File (circuits.mail.slidingWindowSize).
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
	if err := c.validate(goNames, nil); err != nil {
		return c, err
	}
	return c.defaulted(), nil
}

// defaulted returns c with every zero field set to its default.
func (c Config) defaulted() Config {
	def := func(dst *int, v int) {
		if *dst == 0 {
			*dst = v
		}
	}
	if c.FailureRateThreshold == 0 {
		c.FailureRateThreshold = defaultFailureRateThreshold
	}
	if c.SlowCallRateThreshold == 0 {
		c.SlowCallRateThreshold = defaultSlowCallRateThreshold
	}
	def(&c.MinimumNumberOfCalls, defaultMinimumNumberOfCalls)
	def(&c.WindowSize, defaultWindowSize)
	def(&c.PermittedNumberOfCallsInHalfOpenState, defaultPermittedCallsInHalfOpen)
	if c.WaitDurationInOpenState == 0 {
		c.WaitDurationInOpenState = defaultWaitDurationInOpenState
	}
	if c.OpenUntilCap == 0 {
		c.OpenUntilCap = c.WaitDurationInOpenState
	}
	if c.Classifier == nil {
		c.Classifier = DefaultClassifier
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.WindowType == CountBased && c.MinimumNumberOfCalls > c.WindowSize {
		// A count window never holds more than its size.
		c.MinimumNumberOfCalls = c.WindowSize
	}
	return c
}

// field is a validated Config field, named as Go code and as a File spells it.
type field struct{ goName, key string }

var (
	fieldFailureRate    = field{"FailureRateThreshold", "failureRateThreshold"}
	fieldSlowRate       = field{"SlowCallRateThreshold", "slowCallRateThreshold"}
	fieldSlowDuration   = field{"SlowCallDurationThreshold", "slowCallDurationThreshold"}
	fieldMinimumCalls   = field{"MinimumNumberOfCalls", "minimumNumberOfCalls"}
	fieldWindowType     = field{"WindowType", "slidingWindowType"}
	fieldWindowSize     = field{"WindowSize", "slidingWindowSize"}
	fieldOpenWait       = field{"WaitDurationInOpenState", "waitDurationInOpenState"}
	fieldHalfOpenCalls  = field{"PermittedNumberOfCallsInHalfOpenState", "permittedNumberOfCallsInHalfOpenState"}
	fieldHalfOpenMax    = field{"MaxWaitDurationInHalfOpenState", "maxWaitDurationInHalfOpenState"}
	fieldRecordDuration = field{"RecordCallDurations", "recordCallDurations"}
	fieldAutoHalfOpen   = field{"AutomaticTransitionFromOpenToHalfOpen", "automaticTransitionFromOpenToHalfOpenEnabled"}
	fieldOpenUntilCap   = field{"OpenUntilCap", "openUntilCap"}
)

func goNames(f field) string { return f.goName }

// validate is the one check of a configuration's values. name says how an
// error names a field. given, when not nil, says which fields a file set:
// there an explicit 0 is a value, not "default", and an error wherever the
// value must be positive. Zero fields of a Config mean their default.
func (c Config) validate(name func(field) string, given func(field) bool) error {
	explicit := func(f field) bool { return given != nil && given(f) }
	bad := func(f field, v any, reason string) error {
		return &ConfigError{Field: name(f), Value: v, Reason: reason}
	}
	rate := func(f field, v float64) error {
		if v != v || v < 0 || v > 100 || (v == 0 && explicit(f)) { // v != v: NaN
			return bad(f, v, "must be in (0, 100]")
		}
		return nil
	}
	count := func(f field, v, hi int) error {
		if v < 0 || v > hi || (v == 0 && explicit(f)) {
			return bad(f, v, fmt.Sprintf("must be in [1, %d]", hi))
		}
		return nil
	}
	duration := func(f field, d time.Duration, zeroAllowed bool) error {
		if d < 0 || (d == 0 && !zeroAllowed && explicit(f)) {
			return bad(f, d, "must be positive")
		}
		return nil
	}
	for _, err := range []error{
		rate(fieldFailureRate, c.FailureRateThreshold),
		rate(fieldSlowRate, c.SlowCallRateThreshold),
		duration(fieldSlowDuration, c.SlowCallDurationThreshold, false),
		count(fieldMinimumCalls, c.MinimumNumberOfCalls, maxCount),
		count(fieldWindowSize, c.WindowSize, maxWindowSize),
		duration(fieldOpenWait, c.WaitDurationInOpenState, false),
		count(fieldHalfOpenCalls, c.PermittedNumberOfCallsInHalfOpenState, maxCount),
		duration(fieldHalfOpenMax, c.MaxWaitDurationInHalfOpenState, true),
		duration(fieldOpenUntilCap, c.OpenUntilCap, false),
	} {
		if err != nil {
			return err
		}
	}
	if c.WindowType != TimeBased && c.WindowType != CountBased {
		return bad(fieldWindowType, c.WindowType, "must be TIME_BASED or COUNT_BASED")
	}
	return nil
}

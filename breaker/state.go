package breaker

import (
	"fmt"
	"time"
)

// State is a circuit's state.
type State int32

// States, with Resilience4j's names.
const (
	// Closed admits every call and records outcomes.
	Closed State = iota
	// Open rejects calls until the open wait has passed.
	Open
	// HalfOpen admits a limited number of trial calls.
	HalfOpen
	// Disabled admits every call and records nothing.
	Disabled
	// ForcedOpen rejects every call and never changes by itself.
	ForcedOpen
	// MetricsOnly admits every call, records outcomes and reports threshold
	// crossings as events, but never changes by itself.
	MetricsOnly
)

// String returns the Resilience4j name: CLOSED, OPEN, HALF_OPEN, DISABLED,
// FORCED_OPEN or METRICS_ONLY.
func (s State) String() string {
	switch s {
	case Closed:
		return "CLOSED"
	case Open:
		return "OPEN"
	case HalfOpen:
		return "HALF_OPEN"
	case Disabled:
		return "DISABLED"
	case ForcedOpen:
		return "FORCED_OPEN"
	case MetricsOnly:
		return "METRICS_ONLY"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// EventType says what an Event reports.
type EventType int

const (
	// EventStateTransition: From → To.
	EventStateTransition EventType = iota
	// EventFailureRateExceeded: the failure rate reached the threshold. In
	// CLOSED it precedes the transition to OPEN that it causes; in
	// METRICS_ONLY it is published once each time the rate crosses the
	// threshold from below. From and To are the state it happened in.
	EventFailureRateExceeded
	// EventSlowCallRateExceeded: the slow-call rate reached the threshold.
	EventSlowCallRateExceeded
	// EventReset: Reset was called.
	EventReset
)

// String returns Resilience4j's name for the event type.
func (t EventType) String() string {
	switch t {
	case EventStateTransition:
		return "STATE_TRANSITION"
	case EventFailureRateExceeded:
		return "FAILURE_RATE_EXCEEDED"
	case EventSlowCallRateExceeded:
		return "SLOW_CALL_RATE_EXCEEDED"
	case EventReset:
		return "RESET"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is delivered to Config.OnEvent and to every Subscribe consumer.
type Event struct {
	Breaker  string
	Type     EventType
	From, To State
	At       time.Time
	// FailureRate and SlowCallRate are the rates, in percent, that caused
	// the event: the window's for a rate-exceeded event and for CLOSED→OPEN,
	// the trial calls' for a transition out of HALF_OPEN. -1 when not
	// measured (below the minimum number of calls, manual transitions).
	FailureRate, SlowCallRate float64
}

// String describes the event for logs.
func (e Event) String() string {
	switch e.Type {
	case EventFailureRateExceeded:
		return fmt.Sprintf("%s: failure rate %.1f%% exceeded the threshold", e.Breaker, e.FailureRate)
	case EventSlowCallRateExceeded:
		return fmt.Sprintf("%s: slow-call rate %.1f%% exceeded the threshold", e.Breaker, e.SlowCallRate)
	case EventReset:
		return fmt.Sprintf("%s: reset", e.Breaker)
	}
	return fmt.Sprintf("%s: %s -> %s", e.Breaker, e.From, e.To)
}

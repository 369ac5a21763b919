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
	// EventFailureRateExceeded: in METRICS_ONLY, the failure rate reached the threshold.
	EventFailureRateExceeded
	// EventSlowCallRateExceeded: in METRICS_ONLY, the slow-call rate reached the threshold.
	EventSlowCallRateExceeded
)

// Event is delivered to Config.OnEvent.
type Event struct {
	Breaker  string
	Type     EventType
	From, To State
	At       time.Time
	// FailureRate and SlowCallRate are the window's rates, in percent, when
	// they caused the event; -1 otherwise.
	FailureRate, SlowCallRate float64
}

// String describes the event for logs.
func (e Event) String() string {
	switch e.Type {
	case EventFailureRateExceeded:
		return fmt.Sprintf("%s: failure rate %.1f%% exceeded the threshold", e.Breaker, e.FailureRate)
	case EventSlowCallRateExceeded:
		return fmt.Sprintf("%s: slow-call rate %.1f%% exceeded the threshold", e.Breaker, e.SlowCallRate)
	}
	return fmt.Sprintf("%s: %s -> %s", e.Breaker, e.From, e.To)
}

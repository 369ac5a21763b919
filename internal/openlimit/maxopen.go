package openlimit

import (
	"time"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// MaxOpen is what spec.maxOpenDuration says about an open circuit now.
type MaxOpen struct {
	// TooLong: the circuit has been open for maxOpenDuration or longer
	// (the OpenTooLong condition, event and metric).
	TooLong bool
	// Close: TooLong and onMaxOpen is Close, so the webhook's original policy
	// is to be restored although it may still be failing.
	Close bool
	// Remaining is how long until TooLong (0 once it is): when to look again.
	Remaining time.Duration
	// Deadline is openedAt + maxOpenDuration.
	Deadline time.Time
}

// CheckMaxOpen judges a circuit opened at openedAt (the record's OpenedAt,
// which survives failover) at now, under spec's resolved limit. No limit
// (max 0) or no record (zero openedAt) is never too long. An openedAt in
// the future (clock skew between replicas) counts from now, so the wait is
// never longer than the limit.
func CheckMaxOpen(openedAt, now time.Time, max time.Duration, on v1alpha1.OnMaxOpen) MaxOpen {
	if max <= 0 || openedAt.IsZero() {
		return MaxOpen{}
	}
	if openedAt.After(now) {
		openedAt = now
	}
	m := MaxOpen{Deadline: openedAt.Add(max)}
	if m.Remaining = m.Deadline.Sub(now); m.Remaining <= 0 {
		m.Remaining, m.TooLong = 0, true
		m.Close = on == v1alpha1.OnMaxOpenClose
	}
	return m
}

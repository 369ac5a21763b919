package breaker

import (
	"math"
	"math/rand/v2"
	"time"
)

// ExponentialBackoff returns a Config.WaitIntervalFunction whose open wait
// is initial for the first opening and multiplier times the previous one
// for each consecutive opening after it, never more than limit (limit <= 0:
// no bound). It is Resilience4j's IntervalFunction.ofExponentialBackoff;
// the JSON and environment configuration build it from
// enableExponentialBackoff, exponentialBackoffMultiplier and
// exponentialMaxWaitDurationInOpenState.
func ExponentialBackoff(initial time.Duration, multiplier float64, limit time.Duration) func(attempt int) time.Duration {
	return func(attempt int) time.Duration {
		return exponential(initial, multiplier, limit, attempt)
	}
}

// ExponentialRandomBackoff is ExponentialBackoff with each wait drawn
// uniformly from [d·(1-factor), d·(1+factor)] around the exponential wait d
// (factor in [0, 1)), and still never more than limit, so that circuits that
// opened together do not try again together. factor 0 with multiplier 1 is
// a fixed wait; multiplier 1 alone is Resilience4j's randomized wait.
func ExponentialRandomBackoff(initial time.Duration, multiplier, factor float64, limit time.Duration) func(attempt int) time.Duration {
	return func(attempt int) time.Duration {
		d := float64(exponential(initial, multiplier, limit, attempt))
		d += d * factor * (2*rand.Float64() - 1)
		return capWait(d, limit)
	}
}

func exponential(initial time.Duration, multiplier float64, limit time.Duration, attempt int) time.Duration {
	return capWait(float64(initial)*math.Pow(multiplier, float64(max(attempt-1, 0))), limit)
}

// capWait converts d to a Duration no longer than limit (when positive) and
// no longer than a Duration holds.
func capWait(d float64, limit time.Duration) time.Duration {
	if limit > 0 && d > float64(limit) {
		return limit
	}
	if d >= math.MaxInt64 || d != d {
		return math.MaxInt64
	}
	return time.Duration(d)
}

// fileBackoff is the backoff a File configures, kept with the Config it
// built so that a circuit's settings apply over the defaults' and the
// function is built once, from the circuit's own open wait.
type fileBackoff struct {
	exponential, randomized bool
	multiplier, factor      float64
	max                     time.Duration
}

// Resilience4j's defaults for the backoff properties.
const (
	defaultBackoffMultiplier = 1.5
	defaultRandomizedFactor  = 0.5
)

// interval builds the wait function, or nil when neither is enabled.
func (fb fileBackoff) interval(initial time.Duration) func(int) time.Duration {
	mult, factor := 1.0, 0.0
	if fb.exponential {
		mult = fb.multiplier
	}
	if fb.randomized {
		factor = fb.factor
	}
	switch {
	case fb.randomized:
		return ExponentialRandomBackoff(initial, mult, factor, fb.max)
	case fb.exponential:
		return ExponentialBackoff(initial, mult, fb.max)
	}
	return nil
}

package limit

import (
	"context"
	"math"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// BulkheadConfig configures a Bulkhead. The zero value of each field means
// its default, which is Resilience4j's.
type BulkheadConfig struct {
	// MaxConcurrentCalls is how many calls may be in flight at once.
	// Default 25.
	MaxConcurrentCalls int
	// MaxWaitDuration is how long a call may wait for a permit when all
	// are taken; it waits in arrival order and gives up earlier when its
	// context ends. Default 0: a call beyond the limit is rejected at once.
	MaxWaitDuration time.Duration
}

// Bulkhead is a fixed limit on the calls in flight at one call site,
// Resilience4j's semaphore bulkhead: at most MaxConcurrentCalls at once,
// and a caller beyond them waits up to MaxWaitDuration or is rejected with
// a *LimitedError. It is safe for concurrent use.
type Bulkhead struct {
	name string
	cfg  BulkheadConfig
	s    sem
	full *LimitedError
}

// NewBulkhead returns a bulkhead, or a *breaker.ConfigError naming the
// invalid field.
func NewBulkhead(name string, cfg BulkheadConfig) (*Bulkhead, error) {
	switch {
	case cfg.MaxConcurrentCalls < 0 || cfg.MaxConcurrentCalls > math.MaxInt32:
		return nil, &breaker.ConfigError{Field: "MaxConcurrentCalls", Value: cfg.MaxConcurrentCalls, Reason: "must be in [1, 2^31-1] (0 means the default, 25)"}
	case cfg.MaxWaitDuration < 0:
		return nil, &breaker.ConfigError{Field: "MaxWaitDuration", Value: cfg.MaxWaitDuration, Reason: "must not be negative (0 means no wait)"}
	}
	if cfg.MaxConcurrentCalls == 0 {
		cfg.MaxConcurrentCalls = 25
	}
	b := &Bulkhead{name: name, cfg: cfg, full: &LimitedError{Limiter: name, Limit: cfg.MaxConcurrentCalls}}
	b.s.rejected = newCounter()
	b.s.limit.Store(int64(cfg.MaxConcurrentCalls))
	return b, nil
}

// Name returns the bulkhead's name.
func (b *Bulkhead) Name() string { return b.name }

// Config returns the configuration with defaults applied.
func (b *Bulkhead) Config() BulkheadConfig { return b.cfg }

// Acquire admits a call or rejects it. A free permit is taken at once
// (no lock, no allocation); with every permit taken, the call waits up to
// MaxWaitDuration for one, and ctx ending first returns ctx's error (its
// cause, if canceled with one). Not admitted within the wait is a
// *LimitedError.
func (b *Bulkhead) Acquire(ctx context.Context) (Permit, error) {
	if b.s.tryAcquire() {
		return Permit{s: &b.s}, nil
	}
	if b.cfg.MaxWaitDuration > 0 {
		err := b.s.wait(ctx, b.cfg.MaxWaitDuration)
		if err == nil {
			return Permit{s: &b.s}, nil
		}
		if err != errFull {
			return Permit{}, err
		}
	}
	b.s.rejected.add()
	return Permit{}, b.full
}

// Metrics reads the bulkhead's numbers.
func (b *Bulkhead) Metrics() Metrics { return b.s.metrics() }

package limit

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// BulkheadConfig configures a Bulkhead. The zero value of each field means
// its default, which is Resilience4j's.
type BulkheadConfig struct {
	// MaxConcurrentCalls is how many calls may be in flight at once, in
	// [1, 2^31-1]. Default 25. SetMaxConcurrentCalls changes it at run time.
	MaxConcurrentCalls int
	// MaxWaitDuration is how long a call may wait for a permit when all
	// are taken; it waits in arrival order and gives up earlier when its
	// context ends. Default 0: a call beyond the limit is rejected at once.
	// AcquireWithMaxWait and WithMaxWait choose another wait per call or
	// per call site. The wait is on the system clock.
	MaxWaitDuration time.Duration
	// OnLimitChanged, if set, is called with each change of
	// MaxConcurrentCalls by SetMaxConcurrentCalls, in order, outside the
	// bulkhead's locks.
	OnLimitChanged func(LimitChange)
	// OnRejected, if set, is called with each call the bulkhead rejects,
	// on the rejected caller's goroutine before Acquire returns. Keep it
	// cheap: it runs on the path that sheds load.
	OnRejected func(Rejection)
	// Logger receives what the bulkhead cannot return to a caller: a panic
	// in a hook. Default: slog.Default().
	Logger *slog.Logger
}

// Bulkhead is a fixed limit on the calls in flight at one call site,
// Resilience4j's semaphore bulkhead: at most MaxConcurrentCalls at once,
// and a caller beyond them waits up to MaxWaitDuration or is rejected with
// a *LimitedError. It is safe for concurrent use.
type Bulkhead struct {
	name  string
	cfg   BulkheadConfig
	s     sem
	full  atomic.Pointer[LimitedError]
	hooks hooks

	resize sync.Mutex // orders SetMaxConcurrentCalls
}

// NewBulkhead returns a bulkhead, or a *breaker.ConfigError naming the
// invalid field.
func NewBulkhead(name string, cfg BulkheadConfig) (*Bulkhead, error) {
	switch {
	case cfg.MaxConcurrentCalls < 0 || cfg.MaxConcurrentCalls > math.MaxInt32:
		return nil, badMaxConcurrentCalls(cfg.MaxConcurrentCalls, "must be in [1, 2^31-1] (0 means the default, 25)")
	case cfg.MaxWaitDuration < 0:
		return nil, &breaker.ConfigError{Field: "MaxWaitDuration", Value: cfg.MaxWaitDuration, Reason: "must not be negative (0 means no wait)"}
	}
	if cfg.MaxConcurrentCalls == 0 {
		cfg.MaxConcurrentCalls = 25
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Bulkhead{name: name, cfg: cfg}
	b.hooks = hooks{name: name, logger: cfg.Logger, onChange: cfg.OnLimitChanged, onReject: cfg.OnRejected}
	b.full.Store(&LimitedError{Limiter: name, Limit: cfg.MaxConcurrentCalls})
	b.s.rejected = newCounter()
	b.s.limit.Store(int64(cfg.MaxConcurrentCalls))
	return b, nil
}

func badMaxConcurrentCalls(n int, reason string) error {
	return &breaker.ConfigError{Field: "MaxConcurrentCalls", Value: n, Reason: reason}
}

// Name returns the bulkhead's name.
func (b *Bulkhead) Name() string { return b.name }

// Config returns the configuration with defaults applied and the current
// MaxConcurrentCalls.
func (b *Bulkhead) Config() BulkheadConfig {
	c := b.cfg
	c.MaxConcurrentCalls = int(b.s.limit.Load())
	return c
}

// Acquire admits a call or rejects it. A free permit is taken at once
// (no lock, no allocation); with every permit taken, the call waits up to
// MaxWaitDuration for one, and ctx ending first returns ctx's error (its
// cause, if canceled with one). Not admitted within the wait is a
// *LimitedError.
func (b *Bulkhead) Acquire(ctx context.Context) (Permit, error) {
	if b.s.tryAcquire() != 0 {
		return Permit{s: &b.s}, nil
	}
	if b.cfg.MaxWaitDuration > 0 {
		return b.acquireSlow(ctx, b.cfg.MaxWaitDuration)
	}
	return Permit{}, b.reject()
}

// AcquireWithMaxWait is Acquire with a wait of its own instead of
// MaxWaitDuration, as failsafe-go's AcquirePermitWithMaxWait: one call site
// may wait for a permit while another, sharing the bulkhead, is rejected at
// once. A maxWait of zero or less does not wait.
func (b *Bulkhead) AcquireWithMaxWait(ctx context.Context, maxWait time.Duration) (Permit, error) {
	if b.s.tryAcquire() != 0 {
		return Permit{s: &b.s}, nil
	}
	return b.acquireSlow(ctx, maxWait)
}

// acquireSlow is a call that found no free permit, or waiters ahead of it:
// it waits up to d, or is rejected.
func (b *Bulkhead) acquireSlow(ctx context.Context, d time.Duration) (Permit, error) {
	if d > 0 {
		err := b.s.wait(ctx, d)
		if err == nil {
			return Permit{s: &b.s}, nil
		}
		if err != errFull {
			return Permit{}, err
		}
	}
	return Permit{}, b.reject()
}

// reject counts a rejection, tells the hook and returns the rejection.
func (b *Bulkhead) reject() *LimitedError {
	b.s.countRejection()
	full := b.full.Load()
	if b.hooks.onReject != nil {
		b.hooks.rejected(full.Limit)
	}
	return full
}

// WithMaxWait returns a Limiter that shares b's permits, its queue and its
// metrics, and whose Acquire waits up to maxWait (zero or less: not at
// all) instead of MaxWaitDuration: give it to the call site that may wait,
// and b itself to the one that may not. It is safe for concurrent use.
func (b *Bulkhead) WithMaxWait(maxWait time.Duration) Limiter {
	return waiting{b: b, d: maxWait}
}

// waiting is a bulkhead seen with a wait of its own.
type waiting struct {
	b *Bulkhead
	d time.Duration
}

func (w waiting) Name() string          { return w.b.name }
func (w waiting) Metrics() Metrics      { return w.b.Metrics() }
func (w waiting) EnableRejectionCount() { w.b.EnableRejectionCount() }
func (w waiting) Acquire(ctx context.Context) (Permit, error) {
	return w.b.AcquireWithMaxWait(ctx, w.d)
}

// SetMaxConcurrentCalls changes how many calls may be in flight at once,
// while the bulkhead is in use. A higher limit admits the callers waiting
// for a permit at once, in their order; a lower one takes no permit back:
// calls in flight finish, waiters keep their place, and new calls are
// admitted once fewer than n are in flight. It returns a
// *breaker.ConfigError naming MaxConcurrentCalls if n is not in
// [1, 2^31-1], and changes nothing then.
func (b *Bulkhead) SetMaxConcurrentCalls(n int) error {
	if n < 1 || n > math.MaxInt32 {
		return badMaxConcurrentCalls(n, "must be in [1, 2^31-1]")
	}
	b.resize.Lock()
	from := b.s.limit.Load()
	if from != int64(n) {
		b.full.Store(&LimitedError{Limiter: b.name, Limit: n})
		b.s.setLimit(int64(n))
		b.hooks.changed(from, int64(n))
	}
	b.resize.Unlock()
	b.hooks.deliver()
	return nil
}

// Metrics reads the bulkhead's numbers. Rejected counts from
// EnableRejectionCount on.
func (b *Bulkhead) Metrics() Metrics { return b.s.metrics() }

// EnableRejectionCount makes Metrics count the calls the bulkhead rejects,
// from now on, as breaker.Breaker.EnableTotals does a circuit's totals;
// breakerprom's LimitCollector calls it. Counting costs each rejection an
// atomic add on its core's cache line, which on virtual machines is more
// than the rest of a rejection (tens of nanoseconds): a bulkhead whose
// count nobody reads does not pay it.
func (b *Bulkhead) EnableRejectionCount() { b.s.counting.Store(true) }

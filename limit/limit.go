package limit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// ErrLimited is matched (errors.Is) by every rejection of a limiter.
var ErrLimited = errors.New("concurrency limit reached")

// errFull ends a bounded wait that found no permit.
var errFull = errors.New("limit: no permit within the wait")

// LimitedError is a limiter's rejection: the call was not made. It matches
// ErrLimited, and breaker.ErrNotCalled, so a circuit breaker's default
// classifier ignores it wherever the two meet: a full limit says how busy
// the caller is, not how healthy the callee is. One value is shared by
// every rejection under the same limit, so rejecting allocates nothing;
// treat it as read-only.
type LimitedError struct {
	// Limiter is the limiter's name.
	Limiter string
	// Limit is the number of calls it admitted at once when it rejected
	// the call.
	Limit int
}

// Error says which limit rejected the call, and at what limit.
func (e *LimitedError) Error() string {
	return fmt.Sprintf("limit %q: %d calls in flight, no more admitted", e.Limiter, e.Limit)
}

// Is makes errors.Is(err, ErrLimited) and errors.Is(err,
// breaker.ErrNotCalled) true.
func (e *LimitedError) Is(target error) bool {
	return target == ErrLimited || target == breaker.ErrNotCalled
}

// Limiter bounds the calls in flight at one call site. Bulkhead and
// Adaptive are the two; breakerhttp, breakergrpc and accessgate take either.
type Limiter interface {
	// Name is the call site's name, as in metrics.
	Name() string
	// Acquire admits a call or returns an error: a *LimitedError
	// (errors.Is ErrLimited) when it is full, or ctx's error when ctx
	// ended first. Complete an admitted call's Permit with Release or Drop.
	Acquire(ctx context.Context) (Permit, error)
	// Metrics reads the limiter's current numbers.
	Metrics() Metrics
}

// Metrics is a snapshot of a limiter, in Resilience4j's bulkhead terms.
type Metrics struct {
	// MaxAllowedConcurrentCalls is the limit now: a Bulkhead's
	// MaxConcurrentCalls, or an adaptive limit's current estimate.
	MaxAllowedConcurrentCalls int
	// AvailableConcurrentCalls is how many more calls would be admitted now
	// (0 when the calls in flight are at or above the limit).
	AvailableConcurrentCalls int
	// InFlight is the number of admitted calls not completed yet. It may
	// exceed the limit for a while after the limit was lowered.
	InFlight int
	// QueuedCalls is the number of callers waiting for a permit.
	QueuedCalls int
	// Rejected counts the calls refused since EnableRejectionCount
	// (breakerprom's collector calls it); 0 before. Rejecting without a
	// count keeps a rejection free of atomic writes.
	Rejected uint64
}

// Permit is one admitted call. Complete it with Release when the call
// completed (succeeded or failed), or Drop when it was abandoned (its caller
// gave up): either gives the permit back, and only Release teaches an
// adaptive limit the call's latency. Completing is idempotent and safe for
// concurrent use: the first Release or Drop on a Permit counts, later ones
// do nothing. A copy is a second handle without that guard: keep one and
// pass a pointer to it. The zero Permit is inert.
type Permit struct {
	s     *sem
	start int64  // ns since the adaptive limit's base when the call is timed, else 0
	tag   uint64 // timed: the limit's epoch when the call was admitted (high 32 bits) and the calls then in flight, itself included
	done  uint32
}

// Release completes the call: it gives the permit back and, for an
// adaptive limit, records how long the call took.
func (p *Permit) Release() {
	if p.s == nil || !atomic.CompareAndSwapUint32(&p.done, 0, 1) {
		return
	}
	p.s.release()
	if p.start != 0 {
		p.s.adaptive.sample(p.start, p.tag)
	}
}

// Drop gives the permit back without recording anything: for a call its
// caller abandoned, whose duration says nothing about the callee.
func (p *Permit) Drop() {
	if p.s == nil || !atomic.CompareAndSwapUint32(&p.done, 0, 1) {
		return
	}
	if p.start != 0 {
		p.s.adaptive.timeMore() // its window still needs the sample it would have given
	}
	p.s.release()
}

// End completes the call as its caller's context says: Drop if the
// caller canceled ctx (it gave up; a deadline is not a cancellation, the
// call took too long), Release otherwise. Adapters call it when a call
// ends, with the caller's context.
func (p *Permit) End(ctx context.Context) {
	if ctx.Err() == context.Canceled {
		p.Drop()
		return
	}
	p.Release()
}

// Execute runs fn if l admits it and completes its permit on every way out:
// Release when fn returns (with or without an error), Drop when the caller
// canceled ctx during the call (it gave up, whatever fn returned; a
// deadline is not a cancellation: the call took too long), and Release
// before a panic in fn is re-raised. A call that l rejects, or whose ctx
// is already done, does not run fn. A rejection matches ErrLimited and
// breaker.ErrNotCalled, so a breaker.Execute around Execute ignores it.
func Execute[T any](ctx context.Context, l Limiter, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	pm, err := l.Acquire(ctx)
	if err != nil {
		return zero, err
	}
	defer pm.Release() // a no-op after End; a panic otherwise
	v, err := fn(ctx)
	pm.End(ctx)
	return v, err
}

package limit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// sem is the counting semaphore under both limiters. The limit and the
// count in flight are atomics, so taking a free permit is one
// compare-and-swap and giving it back one add: no lock and no allocation on
// the path every call takes. Callers that may wait (MaxWaitDuration) queue
// in arrival order under a mutex, and while any waits, newcomers queue
// behind them (Resilience4j's bulkhead uses a fair semaphore, too).
type sem struct {
	limit    atomic.Int64
	inFlight atomic.Int64
	waiting  atomic.Int64 // callers in queue
	rejected counter

	mu    sync.Mutex
	queue []*waiter // in arrival order
}

// waiter is one caller in the queue; granted is set, under sem.mu, when a
// release hands it a permit, before ready is closed.
type waiter struct {
	ready   chan struct{}
	granted bool
}

// tryAcquire takes a permit if one is free and nobody waits for one.
func (s *sem) tryAcquire() bool {
	for {
		n := s.inFlight.Load()
		if n >= s.limit.Load() || s.waiting.Load() != 0 {
			return false
		}
		if s.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// take takes a permit if one is free, whoever waits.
func (s *sem) take() bool {
	for {
		n := s.inFlight.Load()
		if n >= s.limit.Load() {
			return false
		}
		if s.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release gives a permit back and hands it to the first waiter, if any.
// The waiter registers (waiting) before its last look at the count, and
// release lowers the count before it looks at waiting, so one of the two
// always sees the other: no waiter sleeps through a free permit.
func (s *sem) release() {
	s.inFlight.Add(-1)
	if s.waiting.Load() != 0 {
		s.handOff()
	}
}

// handOff gives free permits to the waiters at the head of the queue.
func (s *sem) handOff() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 && s.take() {
		w := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.waiting.Add(-1)
		w.granted = true
		close(w.ready)
	}
}

// wait queues for a permit for at most d, or until ctx is done. It reports
// ctx's error (its cause, when canceled with one) if ctx ended first, and
// errFull if d passed.
func (s *sem) wait(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waiting.Add(1)
	if len(s.queue) == 0 && s.take() {
		s.waiting.Add(-1)
		s.mu.Unlock()
		return nil
	}
	w := &waiter{ready: make(chan struct{})}
	s.queue = append(s.queue, w)
	s.mu.Unlock()

	t := time.NewTimer(d)
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
		return nil
	case <-t.C:
		err = errFull
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	s.mu.Lock()
	if w.granted {
		// A release handed it over as the wait ended: the permit is this
		// caller's. A caller whose context ended does not want it.
		s.mu.Unlock()
		if ctx.Err() == nil {
			return nil
		}
		s.release()
		return err
	}
	for i, q := range s.queue {
		if q == w {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			break
		}
	}
	s.waiting.Add(-1)
	s.mu.Unlock()
	return err
}

// setLimit changes the limit; a higher one serves the waiters at once. A
// lower one takes no permit back: calls in flight finish, and new ones are
// admitted once the count is below it.
func (s *sem) setLimit(n int64) {
	s.limit.Store(n)
	if s.waiting.Load() != 0 {
		s.handOff()
	}
}

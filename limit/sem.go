package limit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// cacheLine is the size that keeps two cores' writes from sharing a line.
const cacheLine = 64

// sem is the counting semaphore under both limiters. The calls in flight
// are one atomic word, alone on its cache line: taking a free permit is one
// compare-and-swap on it and giving it back one add, with no lock and no
// allocation, and the limit and the count of waiters, which every
// admission reads, sit on another line that only a change of the limit or
// a caller that queues writes. Callers that may wait queue in arrival order
// under a mutex, and while any waits, newcomers queue behind them
// (Resilience4j's bulkhead uses a fair semaphore, too).
type sem struct {
	// word holds the calls in flight in its low 32 bits and, in its high
	// 32, a count of admissions (wrapping): an adaptive limit picks the
	// calls it times by their admission number, without a write of its own
	// (see Adaptive.Acquire).
	word atomic.Uint64
	_    [cacheLine - 8]byte

	limit    atomic.Int64
	waiting  atomic.Int64 // callers in queue
	counting atomic.Bool  // rejected counts (EnableRejectionCount)
	rejected counter

	mu    sync.Mutex
	queue []*waiter // in arrival order

	adaptive *Adaptive // the limit this is the semaphore of; nil for a Bulkhead
}

// admission is what an admission adds to word: one call in flight and one
// admission.
const admission = 1<<32 + 1

// inFlight is the calls in flight that word holds.
func inFlight(word uint64) int64 { return int64(uint32(word)) }

// admissionNumber is the admission that made word (wrapping at 2^32).
func admissionNumber(word uint64) uint32 { return uint32(word >> 32) }

// waiter is one caller in the queue; granted is set, under sem.mu, when a
// release hands it a permit, before ready is closed.
type waiter struct {
	ready   chan struct{}
	granted bool
}

// tryAcquire takes a permit if one is free and nobody waits for one, and
// returns the word its admission made; 0 if it took none.
func (s *sem) tryAcquire() uint64 {
	for {
		w := s.word.Load()
		if inFlight(w) >= s.limit.Load() || s.waiting.Load() != 0 {
			return 0
		}
		if s.word.CompareAndSwap(w, w+admission) {
			return w + admission
		}
	}
}

// take takes a permit if one is free, whoever waits, and returns the word
// its admission made; 0 if it took none.
func (s *sem) take() uint64 {
	for {
		w := s.word.Load()
		if inFlight(w) >= s.limit.Load() {
			return 0
		}
		if s.word.CompareAndSwap(w, w+admission) {
			return w + admission
		}
	}
}

// release gives a permit back and hands it to the first waiter, if any.
// The waiter registers (waiting) before its last look at the count, and
// release lowers the count before it looks at waiting, so one of the two
// always sees the other: no waiter sleeps through a free permit.
func (s *sem) release() {
	s.word.Add(^uint64(0)) // one call fewer in flight; the count is at least 1, so no borrow
	if s.waiting.Load() != 0 {
		s.handOff()
	}
}

// handOff gives free permits to the waiters at the head of the queue.
func (s *sem) handOff() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 && s.take() != 0 {
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
	if len(s.queue) == 0 && s.take() != 0 {
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
// admitted once the count is below it. The waiters keep their place.
func (s *sem) setLimit(n int64) {
	s.limit.Store(n)
	if s.waiting.Load() != 0 {
		s.handOff()
	}
}

// countRejection counts a rejection, if counting is on.
func (s *sem) countRejection() {
	if s.counting.Load() {
		s.rejected.add()
	}
}

func (s *sem) metrics() Metrics {
	limit, n := s.limit.Load(), inFlight(s.word.Load())
	return Metrics{
		MaxAllowedConcurrentCalls: int(limit),
		AvailableConcurrentCalls:  int(max(limit-n, 0)),
		InFlight:                  int(n),
		QueuedCalls:               int(s.waiting.Load()),
		Rejected:                  s.rejected.load(),
	}
}

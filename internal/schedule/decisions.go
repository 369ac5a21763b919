package schedule

import (
	"sync"
	"time"
)

// MaxReportDelay bounds how long a breaker's status write is deferred.
const MaxReportDelay = 30 * time.Second

// Decisions counts the breakers queued because a probe verdict may make
// them write: an Unhealthy verdict (it may open the circuit), or a Healthy
// one while the breaker holds its circuit open (it may close it). A Healthy
// verdict on a closed circuit writes nothing but a status: a thousand new
// breakers turning healthy are no storm. While any waits, status writes
// that can wait do (Defer): not only while decisions outnumber the
// workers, since on the API server a status write competes with the
// patches that open and close circuits (in a slow storm at 1,000 breakers,
// 176 status writes during the opens with that bound, 15 without it). The
// zero value is ready; a nil *Decisions counts none and defers nothing.
type Decisions struct {
	mu       sync.Mutex
	breakers map[string]*entry
	waiting  int // breakers with entry.waiting set
}

// entry is what Decisions keeps of one breaker.
type entry struct {
	waiting bool      // queued for a decision whose reconcile has not started
	open    bool      // its last reconcile left its circuit open
	since   time.Time // when its status write was first deferred; zero: it is not
}

// at returns breaker's entry, created if missing; q.mu is held.
func (q *Decisions) at(breaker string) *entry {
	if q.breakers == nil {
		q.breakers = map[string]*entry{}
	}
	e, ok := q.breakers[breaker]
	if !ok {
		e = &entry{}
		q.breakers[breaker] = e
	}
	return e
}

// tidy drops breaker's entry once it holds nothing; q.mu is held.
func (q *Decisions) tidy(breaker string, e *entry) {
	if *e == (entry{}) {
		delete(q.breakers, breaker)
	}
}

// Record notes a probe verdict of breaker reaching its threshold, and
// reports whether it queued breaker as a decision (see Decisions).
func (q *Decisions) Record(breaker string, unhealthy bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.breakers[breaker]; !unhealthy && (e == nil || !e.open) {
		return false
	}
	if e := q.at(breaker); !e.waiting {
		e.waiting = true
		q.waiting++
	}
	return true
}

// SetOpen records whether breaker's circuit is open.
func (q *Decisions) SetOpen(breaker string, open bool) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.at(breaker)
	e.open = open
	q.tidy(breaker, e)
}

// Take records that breaker's reconcile has started, and reports whether
// it was queued as a decision.
func (q *Decisions) Take(breaker string) bool {
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.breakers[breaker]
	if e == nil || !e.waiting {
		return false
	}
	e.waiting = false
	q.waiting--
	q.tidy(breaker, e)
	return true
}

// Waiting is how many breakers are queued for a decision whose reconcile
// has not started.
func (q *Decisions) Waiting() int {
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting
}

// Defer reports whether breaker's status write, one that loses nothing by
// waiting, waits now: while any decision waits, for at most MaxReportDelay
// since it was first deferred.
func (q *Decisions) Defer(breaker string, now time.Time) bool {
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting == 0 {
		return false
	}
	e := q.at(breaker)
	if e.since.IsZero() {
		e.since = now
	}
	return now.Sub(e.since) < MaxReportDelay
}

// Reported records that breaker's status was written (or needed no write):
// its next deferral starts a new bound.
func (q *Decisions) Reported(breaker string) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.breakers[breaker]; e != nil {
		e.since = time.Time{}
		q.tidy(breaker, e)
	}
}

// Forget drops a deleted breaker.
func (q *Decisions) Forget(breaker string) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if e := q.breakers[breaker]; e != nil && e.waiting {
		q.waiting--
	}
	delete(q.breakers, breaker)
}

// Knows reports whether q keeps anything of breaker.
func (q *Decisions) Knows(breaker string) bool {
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.breakers[breaker]
	return ok
}

// ReportDelay is how soon a deferred status write is looked at again; it
// runs then only if no decision is queued (it is queued at PriorityReport).
const ReportDelay = 100 * time.Millisecond

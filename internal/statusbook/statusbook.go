// Package statusbook remembers, per breaker, when this process first
// reconciled it and when it last wrote its status: what says whether a
// status may wait. A new breaker's first status waits for its probes'
// first verdict, counted from when it was first seen
// (policy.FirstReportWait); a status that changed only in detail
// (policy.DetailOnly) waits for another change to carry it, up to
// DetailRefresh after the last write.
package statusbook

import (
	"sync"
	"time"
)

// DetailRefresh is how long a status whose only change is detail waits
// for another change to carry it before it is written on its own, at a
// reconcile (at least every resync).
const DetailRefresh = 10 * time.Minute

// Book holds each breaker's times. The zero value is ready.
type Book struct {
	mu sync.Mutex
	m  map[string]entry
}

type entry struct{ seen, wrote time.Time }

// FirstSeen is when this process first saw breaker: now, the first time.
func (b *Book) FirstSeen(breaker string, now time.Time) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.m[breaker]
	if e.seen.IsZero() {
		e.seen = now
		if b.m == nil {
			b.m = map[string]entry{}
		}
		b.m[breaker] = e
	}
	return e.seen
}

// Wrote remembers that this process wrote breaker's status at at.
func (b *Book) Wrote(breaker string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]entry{}
	}
	e := b.m[breaker]
	e.wrote = at
	b.m[breaker] = e
}

// DetailWaits reports whether a change of breaker's status only in detail
// waits at now: this process wrote its status less than DetailRefresh ago.
func (b *Book) DetailWaits(breaker string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[breaker].wrote.After(now.Add(-DetailRefresh))
}

// Forget drops what is kept of breaker.
func (b *Book) Forget(breaker string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, breaker)
}

// Knows reports whether anything is kept of breaker.
func (b *Book) Knows(breaker string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.m[breaker]
	return ok
}

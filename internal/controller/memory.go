package controller

import (
	"sync"
	"time"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
)

// memory is what this process remembers of one breaker between its
// reconciles. It is created on first use and dropped, with what every
// collaborator keeps of the breaker, by Reconciler.forget.
type memory struct {
	// written is the breaker's resourceVersion after this controller's last
	// write to it (or fresh read), and the one that write replaced.
	written version
	// closed is a circuit this process closed whose window the status does
	// not show closed yet (a companion closed in another breaker's patch,
	// or a status write deferred): it closes with the recovery's reason,
	// not as closed externally.
	closed *policy.ClosedNote
	// awaited: the breaker waited once for its configuration's watch to
	// list (see awaitWatch).
	awaited bool
	// awaitsEvent: a reconcile waits for the watch's event of this
	// controller's last write to the breaker (see readBreaker), which
	// breakerEvents lets through even if that write was of its status.
	awaitsEvent bool
	// seen is when this process first reconciled the breaker: a new
	// breaker's first status waits for its probes' first verdict from here
	// at most (policy.FirstReportWait).
	seen time.Time
	// reported is when this process last wrote the breaker's status: a
	// status that changed only in detail (policy.DetailOnly) waits for
	// another change to carry it, up to detailRefresh after it.
	reported time.Time
}

// detailRefresh is how long a status whose only change is detail waits
// for another change to carry it before it is written on its own, at a
// reconcile (at least every resync).
const detailRefresh = 10 * time.Minute

// version is a breaker's resourceVersion after this controller's last
// write to it (or fresh read), and the one that write replaced.
type version struct{ now, before string }

// memories holds each breaker's memory. Reconciles of one breaker never
// overlap, but a reconcile writes its companions' memories too.
type memories struct {
	mu sync.Mutex
	m  map[string]memory
}

func (s *memories) get(breaker string) memory {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[breaker]
}

// update changes breaker's memory; one left empty is dropped.
func (s *memories) update(breaker string, change func(*memory)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m[breaker]
	change(&m)
	if m == (memory{}) {
		delete(s.m, breaker)
		return
	}
	if s.m == nil {
		s.m = map[string]memory{}
	}
	s.m[breaker] = m
}

// firstSeen is when this process first saw breaker: now, the first time.
func (s *memories) firstSeen(breaker string, now time.Time) time.Time {
	var seen time.Time
	s.update(breaker, func(m *memory) {
		if m.seen.IsZero() {
			m.seen = now
		}
		seen = m.seen
	})
	return seen
}

// detailWaits reports whether a change of breaker's status only in detail
// waits at now: this process wrote its status less than detailRefresh ago.
func (s *memories) detailWaits(breaker string, now time.Time) bool {
	return s.get(breaker).reported.After(now.Add(-detailRefresh))
}

func (s *memories) has(breaker string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[breaker]
	return ok
}

// forget drops everything kept of a breaker that is gone, or whose
// finalizer was released: its memory here and what each collaborator keeps
// of it (probes, API server signal, metrics, queued decisions, watch).
func (r *Reconciler) forget(breaker string) {
	r.Health.Stop(breaker)
	r.Signals.Stop(breaker)
	r.Metrics.Forget(breaker)
	r.Decisions.Forget(breaker)
	r.Targets.Forget(breaker)
	r.chains.Forget(breaker)
	r.memory.update(breaker, func(m *memory) { *m = memory{} })
}

// wrote remembers the breaker's resourceVersion after this controller wrote
// it (before: its version until then) or read it fresh (before: empty).
func (r *Reconciler) wrote(b *v1alpha1.WebhookCircuitBreaker, before string) {
	r.memory.update(b.Name, func(m *memory) { m.written = version{now: b.ResourceVersion, before: before} })
}

// lagging reports whether b, as read from the cache, is not the version this
// controller last wrote: the cache has not caught up (or someone else wrote
// since; either way, a fresh read is due before a decision that writes).
// behind is set when the cache still shows the version that write
// replaced: its watch event is on its way, and will queue b again.
func (r *Reconciler) lagging(b *v1alpha1.WebhookCircuitBreaker) (lag, behind bool) {
	w := r.memory.get(b.Name).written
	if w.now == "" || w.now == b.ResourceVersion {
		return false, false
	}
	return true, w.before == b.ResourceVersion
}

// await marks whether a reconcile of breaker waits for the watch's event
// of this controller's last write to it.
func (r *Reconciler) await(breaker string, on bool) {
	r.memory.update(breaker, func(m *memory) { m.awaitsEvent = on })
}

// closedBy remembers that this process closed breaker's circuit: should its
// status write come later, the window still closes with this reason and time.
func (r *Reconciler) closedBy(breaker string, n policy.ClosedNote) {
	r.memory.update(breaker, func(m *memory) { m.closed = &n })
}

// forgetClosed drops breaker's closed note once status shows the window
// closed.
func (r *Reconciler) forgetClosed(breaker string, status v1alpha1.WebhookCircuitBreakerStatus) {
	r.memory.update(breaker, func(m *memory) {
		if n := m.closed; n != nil && (status.Record == nil || !status.Record.OpenedAt.Equal(&n.OpenedAt)) {
			m.closed = nil
		}
	})
}

// lockTarget takes t's configuration's write lock for breaker, if it is
// free, and returns its release; nil when another reconcile holds it. Then
// breaker is queued again when the holder releases it (configlock).
func (r *Reconciler) lockTarget(t v1alpha1.Target, breaker string) func() {
	release := r.configs.TryLock(t.ConfigurationKey(), breaker)
	if release == nil {
		return nil
	}
	return func() {
		for _, name := range release() {
			r.Requeue(name)
		}
	}
}

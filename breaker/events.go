package breaker

import (
	"runtime/debug"
	"slices"
	"sync"
)

// listener is one subscription; its address identifies it for Unsubscribe.
type listener struct {
	fn func(Event)
}

// Subscribe adds a consumer of the breaker's events, like Resilience4j's
// EventPublisher: every consumer receives every event published after it
// subscribed, in order, outside the breaker's locks (so it may call back
// into the breaker). A consumer that panics is logged through
// Config.Logger and does not affect the call that caused the event, the
// breaker's state or the other consumers. The returned function
// unsubscribes; an event already being delivered may still reach it once.
func (b *Breaker) Subscribe(fn func(Event)) (unsubscribe func()) {
	l := &listener{fn: fn}
	b.mu.Lock()
	b.listeners.Store(ptrTo(append(b.currentListeners(), l)))
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.listeners.Store(ptrTo(slices.DeleteFunc(slices.Clone(b.currentListeners()), func(x *listener) bool { return x == l })))
	}
}

func (b *Breaker) currentListeners() []*listener {
	if ls := b.listeners.Load(); ls != nil {
		return *ls
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }

// drain delivers the queued events to every consumer.
func (b *Breaker) drain() {
	b.events.drain(func(e Event) {
		for _, l := range b.currentListeners() {
			b.deliver(l, e)
		}
	})
}

// deliver calls one consumer, containing its panic: Resilience4j isolates
// consumer errors the same way, and a metrics hook must never fail a call.
func (b *Breaker) deliver(l *listener, e Event) {
	defer func() {
		if r := recover(); r != nil {
			b.cfg.Logger.Error("circuit breaker event consumer panicked; the event was dropped for it",
				"breaker", b.name, "event", e.String(), "panic", r, "stack", string(debug.Stack()))
		}
	}()
	l.fn(e)
}

// eventQueue delivers events in order, exactly once, outside the breaker's
// state lock: whoever finds the queue idle delivers everything queued,
// including events pushed by others meanwhile.
type eventQueue struct {
	mu         sync.Mutex
	pending    []Event
	delivering bool
}

func (q *eventQueue) push(e Event) {
	q.mu.Lock()
	q.pending = append(q.pending, e)
	q.mu.Unlock()
}

func (q *eventQueue) drain(deliver func(Event)) {
	q.mu.Lock()
	if q.delivering {
		q.mu.Unlock()
		return
	}
	q.delivering = true
	for len(q.pending) > 0 {
		e := q.pending[0]
		q.pending = q.pending[1:]
		q.mu.Unlock()
		deliver(e) // never panics: consumers are contained one by one
		q.mu.Lock()
	}
	q.delivering = false
	q.mu.Unlock()
}

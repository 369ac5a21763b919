// Package configlock keeps, per webhook configuration, this process's write
// lock and its own last write. One writer per configuration: the breakers
// of its webhooks, opened by one outage, would otherwise race each other's
// patches and all but one be refused and retried. A breaker that finds the
// lock taken does not wait for it: it is named to the holder, whose release
// returns it to be queued again, so its worker serves other breakers
// meanwhile and nothing spins.
package configlock

import "sync"

// Locks holds one lock per configuration key. The zero value is ready.
type Locks struct {
	m sync.Map // key -> *entry
}

type entry struct {
	mu sync.Mutex
	// held: a writer holds the lock; waiting are the breakers that found
	// it taken since it was taken.
	held    bool
	waiting map[string]struct{}
	// last is the resourceVersion of this process's last write.
	last string
}

func (l *Locks) entry(key string) *entry {
	if e, ok := l.m.Load(key); ok {
		return e.(*entry)
	}
	e, _ := l.m.LoadOrStore(key, &entry{})
	return e.(*entry)
}

// TryLock takes key's lock for breaker if it is free, and returns its
// release. It returns nil when another holds it, and remembers breaker:
// the holder's release returns every breaker that found the lock taken,
// once each, for the caller to queue again.
func (l *Locks) TryLock(key, breaker string) (release func() (waiting []string)) {
	e := l.entry(key)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.held {
		if e.waiting == nil {
			e.waiting = map[string]struct{}{}
		}
		e.waiting[breaker] = struct{}{}
		return nil
	}
	e.held = true
	var once sync.Once
	return func() (waiting []string) {
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.held = false
			for name := range e.waiting {
				waiting = append(waiting, name)
			}
			e.waiting = nil
		})
		return waiting
	}
}

// Wrote remembers rv as the resourceVersion of this process's last write
// to key's configuration.
func (l *Locks) Wrote(key, rv string) {
	e := l.entry(key)
	e.mu.Lock()
	e.last = rv
	e.mu.Unlock()
}

// Written is the resourceVersion of this process's last write to key's
// configuration; empty when it has written none.
func (l *Locks) Written(key string) string {
	e, ok := l.m.Load(key)
	if !ok {
		return ""
	}
	en := e.(*entry)
	en.mu.Lock()
	defer en.mu.Unlock()
	return en.last
}

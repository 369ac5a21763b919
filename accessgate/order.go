package accessgate

import "sync"

// lookupOrder orders the lookups of one key by when they began, so that an
// answer is cached only if no lookup of the same key that began later has
// answered already: a normal lookup that began before a revocation must not
// replace the deny that a Fresh check, begun after it, cached first.
// Invalidate's epoch handles its own race; this handles lookups racing each
// other. Only keys with a lookup running are held, so its size is bounded by
// the lookups in flight.
type lookupOrder struct {
	mu   sync.Mutex
	seq  uint64
	keys map[key]*keyLookups
}

type keyLookups struct {
	running int    // lookups of the key that began and have not ended
	newest  uint64 // the latest-begun lookup of the key that answered
}

// begin registers a lookup of k and returns its place in the order.
func (o *lookupOrder) begin(k key) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.keys == nil {
		o.keys = map[key]*keyLookups{}
	}
	kl := o.keys[k]
	if kl == nil {
		kl = &keyLookups{}
		o.keys[k] = kl
	}
	kl.running++
	o.seq++
	return o.seq
}

// end unregisters the lookup of k that began at seq. An answered lookup
// runs store (which caches its answer) if no later-begun lookup of k has
// answered; store runs under the order's lock, so two answers of one key
// are never stored out of order.
func (o *lookupOrder) end(k key, seq uint64, answered bool, store func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	kl := o.keys[k]
	if answered && seq > kl.newest {
		kl.newest = seq
		store()
	}
	if kl.running--; kl.running == 0 {
		delete(o.keys, k)
	}
}

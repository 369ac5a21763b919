package controller

import "sigs.k8s.io/controller-runtime/pkg/predicate"

// Remembers names the stores in which r still keeps something of breaker:
// its own memory (status times included), the decision queue's count, and
// the metrics' series.
// The collaborators outside the process's memory (probe monitor, API
// server signal, target watches) are checked by their fakes.
func Remembers(r *Reconciler, breaker string) []string {
	var kept []string
	if r.memory.has(breaker) {
		kept = append(kept, "memory")
	}
	if r.Decisions.Knows(breaker) {
		kept = append(kept, "decisions")
	}
	if r.Metrics.Knows(breaker) {
		kept = append(kept, "probe series")
	}
	return kept
}

// ServiceEndpoints resolves a service webhook to its ready endpoints.
var ServiceEndpoints = serviceEndpoints

// BreakerEvents is the filter on the breakers' own watch.
func (r *Reconciler) BreakerEvents() predicate.Predicate { return r.breakerEvents() }

// AwaitEvent marks breaker as waiting for its watch's event of this
// controller's last write, as readBreaker does.
func (r *Reconciler) AwaitEvent(breaker string) { r.await(breaker, true) }

// Wrote remembers that this controller's last write left breaker at
// resourceVersion rv.
func (r *Reconciler) Wrote(breaker, rv string) {
	r.memory.update(breaker, func(m *memory) { m.written = version{now: rv} })
}

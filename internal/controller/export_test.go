package controller

// Remembers names the stores in which r still keeps something of breaker:
// its own memory, the decision queue's count, and the metrics' series.
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

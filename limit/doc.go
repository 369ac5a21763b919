// Package limit bounds the calls in flight at one call site, so that a
// slow dependency cannot tie up a service's goroutines, connections and
// memory, nor pile more load on itself, before a circuit breaker has seen
// enough failures to open. It has two limiters with one interface
// (Limiter), and depends on nothing beyond the standard library and the
// breaker core (for its Clock and ConfigError).
//
// A Bulkhead is a fixed limit with Resilience4j's semantics and names:
// maxConcurrentCalls (default 25) and maxWaitDuration (default 0, reject at
// once). A caller beyond the limit waits, in arrival order, up to
// MaxWaitDuration or until its context ends; then it is rejected with a
// *LimitedError, which satisfies errors.Is(err, ErrLimited).
//
// An Adaptive limit estimates how many calls the callee serves without
// queueing, from latency, and moves the limit there between MinLimit and
// MaxLimit. It is Vegas, as Netflix's concurrency-limits applies TCP
// Vegas to calls: the callee's latency without load (the fastest recent
// call) against the latency of recent calls gives the calls of ours that
// queue there, limit × (1 − noLoad/rtt); the limit grows while that queue
// is small and is cut when it is long. Vegas rather than Gradient2, the
// other latency-based limit there: Gradient2 compares recent latency with
// a long-term average of it, and when a callee's latency rises and stays
// high (10 ms to 2 s) that average follows it up within minutes, so the
// limit grows back while the callee is still slow; Vegas's queue estimate
// measures the queue itself and holds the limit at the callee's capacity
// for as long as the slowness lasts. How it differs from Netflix's Vegas
// (a cut steps to the estimate; a slower callee is told from a queue by
// whether latency follows a cut down) is on vegas, in the source.
//
// Every permit is given back however the call ends: Permit.Release when it
// completed (success or failure; an adaptive limit learns its latency),
// Permit.Drop when its caller gave up. Execute does both, and gives the
// permit back before re-raising a panic. Taking a free permit and giving it
// back is a compare-and-swap and an add, with no lock and no allocation;
// a rejection reuses one error value.
//
// The adapters take a Limiter per call site: breakerhttp.Policy and
// breakergrpc put it inside the circuit (retry, circuit, limit, timeout,
// from outside in; a rejection is not a failure of the callee, so the
// circuit ignores it and nothing retries it), breakerhttp.LimitHandler
// answers a server's rejections with 503 and Retry-After, accessgate bounds
// its lookups with one, and breakerprom exports Resilience4j's bulkhead
// metrics.
package limit

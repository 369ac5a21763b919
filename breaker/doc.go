// Package breaker is a circuit breaker with Resilience4j's semantics and the
// correctness gaps of Go's circuit breakers closed. It has no dependencies
// beyond the standard library.
//
// A Breaker guards one call site. It is CLOSED while calls succeed, OPEN
// (rejecting calls with an error that satisfies errors.Is(err, ErrOpen))
// after the failure rate or slow-call rate in its sliding window reaches a
// threshold, and HALF_OPEN after the open wait, admitting a few trial calls
// that decide between CLOSED and OPEN again. DISABLED, FORCED_OPEN and
// METRICS_ONLY are manual states that never change by themselves.
//
// Results of calls admitted in an earlier state never decide the current one:
// every transition starts a new generation, and a permit from an older
// generation is ignored when it completes. Half-open permits are released on
// success, failure, ignored outcomes, cancellation and panics.
//
// The closed-state path takes no lock and allocates nothing: the state is
// one atomic load, and a TIME_BASED window records into striped per-second
// buckets that are merged only when a decision needs them.
//
// Use Execute for a function call, or Allow and Permit.Done to wrap an
// integration such as an http.RoundTripper. A Registry holds one named
// breaker per call site with shared defaults.
package breaker

// Package breaker is a circuit breaker with Resilience4j's semantics and the
// correctness gaps of Go's circuit breakers closed. It has no dependencies
// beyond the standard library and is a module of its own.
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
// # Consistency under concurrency
//
// Every outcome is checked against the thresholds when it is recorded, with
// counts that include it and every outcome recorded before it, as
// Resilience4j checks after each call. So once a call whose outcome made a
// rate reach its threshold has returned from Done (or Execute), the circuit
// is OPEN; and a decision never sees a failure counted without its call. A
// COUNT_BASED window records under a mutex. A TIME_BASED window records with
// a single atomic add to a word that counts calls and failures together;
// slow calls, when tracked, are counted with their calls in a second word,
// so the failure rate and the slow-call rate are each exact, though the two
// may be taken a few in-flight calls apart. A TIME_BASED window starts a
// second when its first call of that second arrives, on a process-wide
// clock refreshed every 50 ms: an outcome may be counted in the previous
// second for that long. Counts are exact while a window holds fewer than
// 2^31 calls. The closed path allocates nothing; a TIME_BASED window takes no
// lock except once a second, and its memory is 24 bytes per second that had
// calls, so neither a failure's cost nor its size depend on the number of
// CPUs or, for the cost, on the window's length.
//
// # Defaults
//
// The zero value of each Config field means its default. They are
// Resilience4j's, with one deliberate difference:
//
//	setting                                 tripswitch        Resilience4j
//	failureRateThreshold                    50                50
//	slowCallRateThreshold                   100               100
//	slowCallDurationThreshold               0 (not tracked)   60s
//	slidingWindowType                       COUNT_BASED       COUNT_BASED
//	slidingWindowSize                       100               100
//	minimumNumberOfCalls                    100               100
//	waitDurationInOpenState                 60s               60s
//	permittedNumberOfCallsInHalfOpenState   10                10
//	maxWaitDurationInHalfOpenState          0 (wait)          0 (wait)
//	automaticTransitionFromOpenToHalfOpen   false             false
//	classifier (recordExceptions)           every error but   every exception
//	                                        context.Canceled
//
// Slow calls are not tracked unless SlowCallDurationThreshold is set: tracking
// reads the clock twice per call, which on virtual machines costs more than
// the rest of the breaker. With Resilience4j's 60s and its 100% slow-call rate
// threshold the difference only shows when every call takes over a minute.
// context.Canceled is ignored because the caller gave up, not the callee.
//
// # Use
//
// Use Execute for a function call, or Allow and Permit.Done to wrap an
// integration such as an http.RoundTripper. Subscribe consumes events
// (transitions, rate crossings, resets). A Registry holds one named breaker
// per call site with shared defaults, per-name overrides and a kill switch;
// ParseFile and File.ApplyEnv load its configuration from JSON and
// CIRCUITBREAKER_* environment variables. Metrics reads the window; Totals
// reads cumulative call counts (and durations, with RecordCallDurations) once
// EnableTotals has turned counting on, which the breakerprom module does.
//
// The adapters are modules of their own, so that a user of the core builds
// none of their dependencies: breakerhttp (net/http), breakergrpc (grpc-go)
// and breakerprom (Prometheus).
package breaker

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
// # Use
//
// One breaker per call site; Execute runs a function through it, and an
// open circuit fails fast without calling it:
//
//	b, err := breaker.New("account-read", breaker.Config{
//		WindowType: breaker.CountBased, WindowSize: 10, MinimumNumberOfCalls: 4,
//		FailureRateThreshold: 50, WaitDurationInOpenState: 15 * time.Second,
//	})
//	if err != nil {
//		return err // a Config that makes no sense (FailureRateThreshold 101) is refused here
//	}
//	user, err := breaker.Execute(ctx, b, func(ctx context.Context) (User, error) {
//		return fetch(ctx, id)
//	})
//	if errors.Is(err, breaker.ErrOpen) {
//		// fail fast: the account service is known to be down
//	}
//
// Allow and Permit.Done wrap an integration such as an http.RoundTripper
// (the breakerhttp module does), with the call's outcome classified by the
// caller. Subscribe consumes events
// (transitions, rate crossings, resets). A Registry holds one named breaker
// per call site with shared defaults, per-name overrides and a kill switch;
// ParseFile and File.ApplyEnviron (or ApplyEnv) load its configuration
// from JSON and CIRCUITBREAKER_* environment variables, refusing unknown
// keys and variables with the nearest known name; Registry.Update and
// Registry.Reload change a running circuit's settings, keeping its window
// where its shape allows. Breaker.OpenFor and OpenUntil open a circuit for
// as long as a server asks (Retry-After), capped by Config.OpenUntilCap.
// Metrics reads the window; Totals reads cumulative call counts (and
// durations, with RecordCallDurations) once EnableTotals has turned counting
// on, which the breakerprom module does.
//
// The adapters are modules of their own, so that a user of the core builds
// none of their dependencies: breakerhttp (net/http), breakergrpc (grpc-go)
// and breakerprom (Prometheus). So is limit, the bulkhead and adaptive
// concurrency limit that the adapters put inside a circuit.
//
// # Defaults
//
// The zero value of each Config field means its default. They are
// Resilience4j's, with deliberate differences in slow-call tracking and in
// what the classifier ignores:
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
//	                                        and ErrNotCalled
//
// Slow calls are not tracked unless SlowCallDurationThreshold is set: tracking
// reads the clock twice per call, which on virtual machines costs more than
// the rest of the breaker. With Resilience4j's 60s and its 100% slow-call rate
// threshold the difference only shows when every call takes over a minute.
// context.Canceled is ignored because the caller gave up, not the callee;
// an error matching ErrNotCalled (a concurrency limit's rejection) because
// the callee was never called. Resilience4j counts a full bulkhead's
// BulkheadFullException as a failure unless it is listed in
// ignoreExceptions; tripswitch ignores it by default, deliberately: a full
// limit says how busy the caller is, not how healthy the callee is.
//
// # Guarantees
//
// Results of calls admitted in an earlier state never decide the current one:
// every transition starts a new generation, and a permit from an older
// generation is ignored when it completes. Half-open permits are released on
// success, failure, ignored outcomes, cancellation and panics. How the rates
// stay exact on many cores at once, on a closed path that allocates nothing,
// is the last section.
//
// # Design: consistency under concurrency
//
// Every outcome that can raise a rate is checked against the thresholds when
// it is recorded, with counts that include it and every outcome whose Done
// returned before it began, as Resilience4j checks after each call. So once
// a call whose outcome made a rate reach its threshold has returned from
// Done (or Execute), the circuit is OPEN; and a decision never sees a
// failure counted without its call.
//
// Most calls are successes, and a success can only lower a rate once the
// window holds the minimum number of calls and no old outcomes have left it
// since the last check. From then on a success is one atomic add to a
// counter on its own core's cache line: no shared write, no global read, so
// successes on different cores never contend. A TIME_BASED window does the
// same for a failure far from its threshold: each core holds a budget of
// failures it may count on its own line without a check, granted (under the
// window's mutex) only while the rate would stay below the threshold even
// if every failure of every budget were counted with no more successes. A
// failure beyond its core's budget, a slow call, and a second leaving the
// window take the budgets back before they count, and the failure is then
// checked on exact counts: near its threshold the window is checked after
// every failure. A COUNT_BASED window does the same with more than one P,
// and keeps each failure's place among the calls (which decides when it
// leaves the window): a failure counted on its core's budget records the
// successes all cores had counted when it was, and enters the ring after
// exactly that many, so a goroutine that failed on one core and then
// succeeded on another finds its failure older. Its budgets are shares of
// the failures that keep every window on the way clearly below the
// threshold in any order (the worst case: the oldest calls leave and the
// new failures stay), a number that grows with the successes counted since
// they were granted; and once the calls since then fill the window, a core
// keeps counting for as long as its failures stay spread among successes
// (its part of the failures a window may hold, and one more, always span
// enough successes that no window reaches the threshold). Such a failure
// reads every core's success counter but writes only its own lines. With
// one P every COUNT_BASED failure takes the window's mutex, uncontended. A
// success that may complete the minimum, or the first after a TIME_BASED
// window moved to a new second, is checked like a failure.
//
// A TIME_BASED window starts a second when its first call of that second
// arrives, on a process-wide clock refreshed every 50 ms: an outcome may be
// counted in the previous second for that long. The closed path allocates
// nothing; a TIME_BASED window takes its mutex once a second and when a
// core's failure budget runs out, and its memory is 32 bytes per second
// that had calls plus one cache line per core, so a failure's cost does not
// depend on the window's length. A COUNT_BASED window holds a byte per call
// of its size plus five cache lines per core (successes, and a ring of the
// last 122 failures a core counted since the window last took its mutex).
//
// Every deadline (the open wait, the half-open maximum wait, the window's
// seconds) is compared with a clock that the caller itself keeps current:
// the process-wide second is refreshed by a goroutine that each reader keeps
// alive and restarts when it has stopped, so no transition waits for any
// other call, breaker or goroutine. The goroutine exits 200 ms after its last
// reader, so an idle process holds none.
package breaker

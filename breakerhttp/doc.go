// Package breakerhttp puts a circuit breaker, and optionally a concurrency
// limit, on one HTTP call site.
//
// A [Transport] is an http.RoundTripper bound to one circuit: one per call
// site ("account-access", "account-read", ...), never one filter for a whole
// client, because two call sites to the same service can fail for different
// reasons and must not open each other's circuit.
//
// What counts (the [DefaultClassifier]):
//
//   - connection errors, timeouts (the Transport's own per-attempt Timeout,
//     the caller's deadline or http.Client.Timeout) and 5xx responses are
//     failures;
//   - 4xx responses are ignored, neither failures nor successes: a 401 for an
//     expired key or a 429 for one tenant's quota is that caller's problem,
//     not an outage, and counting it as a success would dilute the real
//     failure rate. The response still reaches the caller unchanged;
//   - a caller that cancels its request is ignored (it gave up; the callee
//     did not fail), and so is an error matching breaker.ErrNotCalled, a
//     concurrency limit's rejection, whether [Policy].Limit's or one in a
//     base transport of your own (nothing was sent).
//
// Override it per call site with [Transport.Classify], for example
// [FailOnStatus](DefaultClassifier, 429).
//
// An open circuit answers without any network I/O, with an error that
// matches breaker.ErrOpen (http.Client wraps it in a *url.Error;
// errors.Is sees through that).
//
// # Composition
//
// The order matters and [Policy] builds one: the per-attempt timeout inside
// the circuit, so that a timeout is counted as a failure, and the retry
// outside it, so that every attempt is counted and an open circuit is never
// retried (Resilience4j's order for these three); an optional concurrency
// limit (a limit.Bulkhead or limit.Adaptive, [Policy].Limit) between the
// circuit and the timeout, so that a wait for a permit is not part of the
// attempt's time, and its rejection, which sends nothing, is neither counted
// by the circuit nor retried. Resilience4j puts its TimeLimiter outside its
// Bulkhead, and its circuit counts a full bulkhead as a failure unless it is
// in ignoreExceptions; tripswitch does neither, deliberately (see
// docs/limits.md): a full limit says how busy the caller is, not how healthy
// the callee is.
//
//	retry( circuit( limit( timeout( base transport ) ) ) )
//
// On the server side, [LimitHandler] sheds the requests beyond a limit with
// 503 and Retry-After instead of queueing them.
//
// A successful response's outcome is recorded when its body has been read to
// the end or closed, so a server that sends headers and then stalls or
// resets is a failure: close every response body (net/http requires it
// anyway).
//
// [Retry] resends a request whose connection was refused (it was never
// sent, so any method may go again), outside the circuit, so that the
// circuit counts every attempt.
//
// The package is the circuit and its composition, nothing else: the base
// transport (its dialer, DNS, TLS and pool) is any http.RoundTripper the
// caller builds, shared between the call sites to one service through
// [Policy].Base, and health endpoints are the application's.
package breakerhttp

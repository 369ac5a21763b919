// Package limit bounds the calls in flight at one call site, so that a slow
// dependency cannot tie up a service's goroutines, connections and memory,
// nor pile more load on itself, before a circuit breaker has seen enough
// failures to open.
//
// # Use
//
// A Bulkhead is a fixed limit. Execute runs a function under it and gives
// the permit back however the function ends:
//
//	b, err := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 50})
//	if err != nil {
//		return err // a *breaker.ConfigError naming the field
//	}
//	user, err := limit.Execute(ctx, b, func(ctx context.Context) (User, error) {
//		return fetch(ctx, id)
//	})
//	if errors.Is(err, limit.ErrLimited) {
//		// rejected at once: answer 503, or serve a fallback
//	}
//
// An Adaptive limit finds the limit itself, from the callee's latency, and
// takes the same Execute:
//
//	a, err := limit.NewAdaptive("account-read", limit.AdaptiveConfig{MinLimit: 5, MaxLimit: 200})
//
// Inside a circuit, a rejection is not the callee's failure: it matches
// breaker.ErrNotCalled, which the breaker's default classifier ignores, so
// a composition by hand leaves the circuit alone:
//
//	user, err := breaker.Execute(ctx, cb, func(ctx context.Context) (User, error) {
//		return limit.Execute(ctx, b, fetch)
//	})
//
// The adapters take any Limiter: breakerhttp.Policy and breakergrpc put it
// inside the circuit, breakerhttp.LimitHandler answers a server's
// rejections with 503 and Retry-After, accessgate bounds its lookups with
// one, and breakerprom exports Resilience4j's bulkhead metrics.
//
// # Bulkhead
//
// Resilience4j's semaphore bulkhead, with its names and defaults:
// MaxConcurrentCalls (25) and MaxWaitDuration (0, reject at once). A
// caller beyond the limit waits, in arrival order, up to MaxWaitDuration
// (or a wait of its own: AcquireWithMaxWait, WithMaxWait) or until its
// context ends, and is then rejected with a *LimitedError, which matches
// ErrLimited. SetMaxConcurrentCalls resizes it in use; its waiters keep
// their place. OnRejected and OnLimitChanged hear its rejections and
// resizes.
//
// # Adaptive
//
// Vegas, as Netflix's concurrency-limits applies TCP Vegas to calls: the
// callee's latency without load against the latency of recent calls gives
// the calls of ours queued there, and the limit grows while that queue is
// short and is cut when it is long. It holds within twice what the callee
// serves, and rejects at once, without a wait, which would add to the
// latency it reads. Why Vegas and not Gradient2, and how it differs from
// Netflix's, is in docs/limits.md. It times a few calls per window on its
// Clock: with an injected clock, nothing it does follows the wall clock.
// OnLimitChanged and OnRejected hear its moves and rejections.
//
// # Permits
//
// Every permit is given back however the call ends: Permit.Release when it
// completed (success or failure; an adaptive limit learns its latency),
// Permit.Drop when its caller gave up. Execute does both, and gives the
// permit back before re-raising a panic. Taking a free permit and giving it
// back is a compare-and-swap and an add, with no lock and no allocation; a
// rejection reuses one error value.
package limit

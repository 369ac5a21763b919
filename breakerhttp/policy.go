package breakerhttp

import (
	"net/http"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// Policy is one call site's failure handling, composed in one order:
// retry( circuit( limit( timeout( Base ) ) ) ). Retry outside the circuit
// and the timeout inside it are Resilience4j's order; the limit outside the
// timeout is not (Resilience4j's TimeLimiter wraps its Bulkhead): a wait
// for a permit is then no part of an attempt's time, so a full limit never
// becomes a timeout the circuit counts against the callee.
// Three common compositions:
//
//	account-access: Policy{Breaker: access, Timeout: 10 * time.Second}        // no retry
//	account-read:   Policy{Breaker: read, Timeout: 10 * time.Second, Retry: &Retry{Attempts: 3}}
//	notification:   Policy{Breaker: notify, Timeout: 5 * time.Second}        // the caller swallows errors
type Policy struct {
	// Breaker is the call site's circuit. Required.
	Breaker *breaker.Breaker
	// Timeout bounds each attempt inside the circuit (see Transport.Timeout).
	Timeout time.Duration
	// Limit, if set, bounds the attempts in flight, inside the circuit and
	// outside Timeout (see Transport.Limit); its rejections are neither
	// counted by the circuit nor retried.
	Limit limit.Limiter
	// Classify decides what an attempt means to the circuit; nil means
	// DefaultClassifier.
	Classify Classifier
	// Retry, if set, retries outside the circuit; its Next is ignored (the
	// circuit is put there).
	Retry *Retry
	// RetryAfter opens the circuit for as long as a 429 or 503 says in its
	// Retry-After header, capped (see Transport.RetryAfter). Retry then
	// returns that response instead of retrying into the open circuit.
	RetryAfter bool
	// Base sends requests; nil means http.DefaultTransport. Share one base
	// (and its connection pool) between the call sites to one service.
	Base http.RoundTripper
}

// RoundTripper returns the composed transport.
func (p Policy) RoundTripper() http.RoundTripper {
	var rt http.RoundTripper = &Transport{Breaker: p.Breaker, Base: p.Base, Timeout: p.Timeout, Classify: p.Classify, Limit: p.Limit, RetryAfter: p.RetryAfter}
	if p.Retry != nil {
		r := *p.Retry
		r.Next = rt
		if p.RetryAfter {
			// The answer that opened the circuit is the caller's to see:
			// another attempt would only meet the open circuit.
			retryable := r.Retryable
			if retryable == nil {
				retryable = Transient
			}
			r.Retryable = func(req *http.Request, resp *http.Response, err error) bool {
				return (resp == nil || retryAfter(resp) == "") && retryable(req, resp, err)
			}
		}
		rt = &r
	}
	return rt
}

// Client returns an http.Client with the composed transport. Its Timeout is
// zero: the per-attempt Timeout is inside the circuit, and an overall
// deadline belongs on the request's context.
func (p Policy) Client() *http.Client {
	return &http.Client{Transport: p.RoundTripper()}
}

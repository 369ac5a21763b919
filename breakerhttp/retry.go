package breakerhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// Retry is an http.RoundTripper that retries transient failures of Next
// with exponential backoff. Put it outside the circuit (Next is a
// *Transport, or use Policy), so that the circuit counts every attempt and
// an open circuit, which is not transient, ends the retries at once.
//
// Only requests that can be sent again are retried: a body must be
// replayable (GetBody, as http.NewRequest sets for in-memory bodies), and
// the method idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or the
// request marked with an Idempotency-Key header, as net/http itself decides
// — except after a refused connection, which never sent the request, so a
// POST may go again too (the gap while an instance restarts).
type Retry struct {
	// Next sends one attempt. Required.
	Next http.RoundTripper
	// Attempts is the most attempts, the first included. Default 3.
	Attempts int
	// Backoff is the wait before the first retry; it doubles for each one
	// after, up to MaxBackoff. Each wait is drawn from [Backoff/2, Backoff]
	// so that callers that failed together do not retry together.
	// Defaults 200ms and 2s.
	Backoff, MaxBackoff time.Duration
	// Retryable decides whether a failed attempt is worth another; nil
	// means Transient.
	Retryable func(req *http.Request, resp *http.Response, err error) bool
	// Wait waits d or until ctx is done; nil waits on a timer. Tests inject
	// one to run without sleeping.
	Wait func(ctx context.Context, d time.Duration) error
}

// Validate returns a *breaker.ConfigError naming the first invalid field: a
// negative Attempts, Backoff or MaxBackoff (zero means the default; a
// negative value used to be taken for it silently). RoundTrip returns the
// same error, sending nothing.
func (r *Retry) Validate() error {
	switch {
	case r.Attempts < 0:
		return &breaker.ConfigError{Field: "Retry.Attempts", Value: r.Attempts, Reason: "must be positive (0 means the default, 3)"}
	case r.Backoff < 0:
		return &breaker.ConfigError{Field: "Retry.Backoff", Value: r.Backoff, Reason: "must not be negative (0 means the default, 200ms)"}
	case r.MaxBackoff < 0:
		return &breaker.ConfigError{Field: "Retry.MaxBackoff", Value: r.MaxBackoff, Reason: "must not be negative (0 means the default, 2s)"}
	}
	return nil
}

// drainLimit bounds how much of a discarded response is read so that its
// connection can be reused; a longer body costs the connection instead.
const drainLimit = 64 << 10

// RoundTrip implements http.RoundTripper.
func (r *Retry) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.Next == nil {
		closeRequestBody(req)
		return nil, fmt.Errorf("breakerhttp: Retry.Next is nil")
	}
	if err := r.Validate(); err != nil {
		closeRequestBody(req)
		return nil, fmt.Errorf("breakerhttp: %w", err)
	}
	attempts := r.Attempts
	if attempts <= 0 {
		attempts = 3
	}
	retryable := r.Retryable
	if retryable == nil {
		retryable = Transient
	}
	bodyOK, idempotent := replayableBody(req), idempotent(req)
	backoff := r.Backoff
	if backoff <= 0 {
		backoff = 200 * time.Millisecond
	}
	maxBackoff := r.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 2 * time.Second
	}
	for attempt := 1; ; attempt++ {
		resp, err := r.Next.RoundTrip(req)
		// A refused connection never sent the request: any method may go
		// again. Otherwise only a request the server may see twice.
		sendable := bodyOK && (idempotent || (err != nil && Refused(err)))
		// A limit's rejection is never retried, whatever Retryable says:
		// more attempts would only add to the load the limit sheds.
		if attempt >= attempts || !sendable || errors.Is(err, limit.ErrLimited) || !retryable(req, resp, err) {
			return resp, err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if dl, ok := req.Context().Deadline(); ok && time.Until(dl) < wait {
			return resp, err // the caller cannot wait for another attempt
		}
		if resp != nil {
			DrainClose(resp)
		}
		if werr := r.wait(req.Context(), wait); werr != nil {
			return nil, werr
		}
		backoff = min(2*backoff, maxBackoff)
		if req, err = rewind(req); err != nil {
			return nil, err
		}
	}
}

// CloseIdleConnections closes Next's idle connections.
func (r *Retry) CloseIdleConnections() {
	if r.Next != nil {
		closeIdle(r.Next)
	}
}

func (r *Retry) wait(ctx context.Context, d time.Duration) error {
	if r.Wait != nil {
		return r.Wait(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// replayableBody reports whether req's body can be sent again.
func replayableBody(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// idempotent reports whether the server may see req twice.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// rewind returns req with a fresh body for another attempt.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	b, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("breakerhttp: replaying the request body: %w", err)
	}
	r := req.Clone(req.Context())
	r.Body = b
	return r, nil
}

// DrainClose reads what is left of resp's body, up to 64 KiB, and closes
// it, so that its connection goes back to the pool; a fire-and-forget call
// site uses it after looking at the status.
func DrainClose(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	_ = resp.Body.Close()
}

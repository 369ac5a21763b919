package breakerhttp

import (
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// Classifier decides what a completed attempt means to the circuit. Exactly
// one of resp and err is non-nil. When a response body fails while being
// read, the classifier is called again with a nil resp and the read error.
type Classifier func(resp *http.Response, err error) breaker.Outcome

// DefaultClassifier: 5xx and every error but cancellation and a call never
// made are failures; 4xx, cancellation and an error matching
// breaker.ErrNotCalled (a concurrency limit's rejection, from a Base of
// your own too) are ignored; everything else is a success. It sees only
// the error; Transport also ignores any error of an attempt whose caller
// canceled its request's context (breaker.CallerCanceled), before asking a
// classifier, so a cancellation with a cause is not counted either.
func DefaultClassifier(resp *http.Response, err error) breaker.Outcome {
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, breaker.ErrNotCalled) {
			return breaker.Ignore
		}
		return breaker.Failure
	}
	switch {
	case resp.StatusCode >= 500:
		return breaker.Failure
	case resp.StatusCode >= 400:
		return breaker.Ignore
	}
	return breaker.Success
}

// FailOnStatus returns a classifier that counts the given status codes as
// failures and defers to next for everything else: FailOnStatus(
// DefaultClassifier, http.StatusTooManyRequests) opens one call site's
// circuit on throttling.
func FailOnStatus(next Classifier, codes ...int) Classifier {
	fail := make(map[int]bool, len(codes))
	for _, c := range codes {
		fail[c] = true
	}
	return func(resp *http.Response, err error) breaker.Outcome {
		if err == nil && fail[resp.StatusCode] {
			return breaker.Failure
		}
		return next(resp, err)
	}
}

// Transient reports whether a failed attempt is worth retrying: a
// connection error, a timeout or a 5xx. An open circuit, a limit's
// rejection, a 4xx, a success and the caller's own cancellation or deadline
// are not.
func Transient(req *http.Request, resp *http.Response, err error) bool {
	if err != nil {
		if errors.Is(err, breaker.ErrOpen) || errors.Is(err, limit.ErrLimited) || req.Context().Err() != nil || errors.Is(err, context.Canceled) {
			return false
		}
		return true
	}
	return resp.StatusCode >= 500
}

// Refused reports whether err is a refused connection: the dial failed,
// so the request was never sent.
func Refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && errors.Is(err, syscall.ECONNREFUSED)
}

package main

import (
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
)

// failsafeTransport puts failsafe-go's adaptive limiter on a transport the
// way breakerhttp puts a limit.Limiter: a call beyond it is rejected at
// once, and the permit is recorded when the response body ends (dropped
// when the caller canceled). It sits inside the circuit, whose classifier
// ignores its rejection (failsafeClassifier), as breakerhttp's own limit
// is ignored.
type failsafeTransport struct {
	limiter adaptivelimiter.AdaptiveLimiter[any]
	next    http.RoundTripper
}

func (t *failsafeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	p, ok := t.limiter.TryAcquirePermit()
	if !ok {
		return nil, adaptivelimiter.ErrExceeded
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		if breaker.CallerCanceled(req.Context()) {
			p.Drop()
		} else {
			p.Record()
		}
		return nil, err
	}
	resp.Body = &recordOnEnd{ReadCloser: resp.Body, permit: p}
	return resp, nil
}

type recordOnEnd struct {
	io.ReadCloser
	permit adaptivelimiter.Permit
	once   sync.Once
}

func (b *recordOnEnd) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.once.Do(b.permit.Record)
	}
	return n, err
}

func (b *recordOnEnd) Close() error {
	b.once.Do(b.permit.Record)
	return b.ReadCloser.Close()
}

// failsafeClassifier ignores failsafe-go's rejection, as breakerhttp
// ignores its own limit's.
func failsafeClassifier(resp *http.Response, err error) breaker.Outcome {
	if errors.Is(err, adaptivelimiter.ErrExceeded) {
		return breaker.Ignore
	}
	return breakerhttp.DefaultClassifier(resp, err)
}

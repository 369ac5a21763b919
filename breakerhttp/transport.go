package breakerhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// Transport is an http.RoundTripper that sends each request through one
// circuit. Its fields must not change once it is in use.
type Transport struct {
	// Breaker is the call site's circuit. Required.
	Breaker *breaker.Breaker
	// Base sends the request; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Timeout, if positive, bounds one attempt from sending the request to
	// the end of the response body, inside the circuit, so that running out
	// of it is counted as a failure. It also bounds an upgraded (101)
	// connection, which lives on the attempt's context: leave it zero at a
	// call site that upgrades, and put a deadline on the request instead.
	Timeout time.Duration
	// Classify decides what an attempt means to the circuit; nil means
	// DefaultClassifier.
	Classify Classifier
	// Limit, if set, bounds this call site's attempts in flight, inside the
	// circuit and outside Timeout: an attempt the circuit admits takes a
	// permit (waiting, for a Bulkhead with MaxWaitDuration, outside the
	// Timeout) and gives it back when the attempt ends as the circuit sees
	// it end. A rejection (errors.Is limit.ErrLimited) sends nothing and is
	// not an outcome of the callee: the circuit ignores it, and Retry never
	// retries it.
	Limit limit.Limiter
	// RetryAfter opts into the server's word on when to come back: a 429 or
	// 503 response with a Retry-After header (seconds or an HTTP date)
	// opens the circuit until then (Breaker.OpenFor, OpenUntil), never
	// longer than the breaker's Config.OpenUntilCap. The response itself is
	// classified and returned as usual; the calls after it fail fast.
	RetryAfter bool
}

var errNoBreaker = errors.New("breakerhttp: Transport.Breaker is nil")

// RoundTrip implements http.RoundTripper. A request whose context is
// already done, or that the circuit rejects, is answered without network
// I/O; the rejection matches breaker.ErrOpen.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Breaker == nil {
		closeRequestBody(req)
		return nil, errNoBreaker
	}
	if err := req.Context().Err(); err != nil {
		closeRequestBody(req)
		return nil, err
	}
	pm, err := t.Breaker.Allow()
	if err != nil {
		closeRequestBody(req)
		return nil, err
	}
	var lp limit.Permit
	if t.Limit != nil {
		if lp, err = t.Limit.Acquire(req.Context()); err != nil {
			pm.Done(breaker.Ignore) // nothing was sent: the callee did nothing
			closeRequestBody(req)
			return nil, err
		}
	}
	classify := judge{caller: req.Context(), c: t.Classify}
	var ctx context.Context
	cancel := context.CancelFunc(nil)
	if t.Timeout > 0 {
		ctx, cancel = context.WithTimeout(req.Context(), t.Timeout)
		req = req.WithContext(ctx)
	}
	resp, err := t.base().RoundTrip(req)
	if err != nil {
		pm.Done(classify.outcome(nil, err))
		lp.End(classify.caller)
		if cancel != nil {
			cancel()
		}
		return nil, err
	}
	o := classify.outcome(resp, nil)
	if t.RetryAfter {
		defer t.honorRetryAfter(resp)
	}
	// A success is only known once the body has arrived; a failure or an
	// ignored response is known now. Bodies that are not plain payloads
	// (none, or a protocol switch) end the attempt here.
	deferred := o == breaker.Success && resp.Body != nil && resp.Body != http.NoBody && resp.StatusCode != http.StatusSwitchingProtocols
	if !deferred {
		pm.Done(o)
		lp.End(classify.caller)
		if cancel == nil || resp.Body == nil || resp.Body == http.NoBody {
			if cancel != nil {
				cancel()
			}
			return resp, nil
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// The connection now belongs to the caller; Timeout still
			// bounds it (see Transport.Timeout).
			return resp, nil
		}
	}
	b := &body{rc: resp.Body, pm: pm, lp: lp, cancel: cancel, classify: classify}
	if deferred && ctx != nil {
		// A body nobody reads or closes must not hold the permit (in
		// HALF_OPEN, the circuit) past the timeout: running out of it is a
		// failure, however late the caller closes the body.
		b.timedOut = make(chan struct{})
		b.stop = context.AfterFunc(ctx, func() {
			defer close(b.timedOut)
			b.pm.Done(classify.outcome(nil, ctx.Err()))
			b.lp.End(classify.caller)
		})
	}
	resp.Body = b
	return resp, nil
}

// honorRetryAfter opens the circuit for as long as a 429 or 503 asks.
// It runs after the attempt's outcome is recorded.
func (t *Transport) honorRetryAfter(resp *http.Response) {
	v := retryAfter(resp)
	if v == "" {
		return
	}
	if d, ok := breaker.ParseWait(v, time.Second); ok {
		t.Breaker.OpenFor(d) // OpenFor caps it
		return
	}
	if at, err := http.ParseTime(v); err == nil {
		t.Breaker.OpenUntil(at)
	}
}

// retryAfter is the Retry-After header of a 429 or 503, or "".
func retryAfter(resp *http.Response) string {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return ""
	}
	return strings.TrimSpace(resp.Header.Get("Retry-After"))
}

// CloseIdleConnections closes the base transport's idle connections, so
// that http.Client.CloseIdleConnections reaches them through the circuit.
func (t *Transport) CloseIdleConnections() { closeIdle(t.base()) }

// judge classifies the attempts of a caller whose context is caller: an
// error while that context is canceled is Ignore, whatever the error says
// (a context canceled with a cause makes net/http return the cause, not
// context.Canceled), and everything else is up to c (nil:
// DefaultClassifier). A deadline is still c's to judge.
type judge struct {
	caller context.Context
	c      Classifier
}

func (j judge) outcome(resp *http.Response, err error) breaker.Outcome {
	if err != nil && breaker.CallerCanceled(j.caller) {
		return breaker.Ignore
	}
	if j.c == nil {
		return DefaultClassifier(resp, err)
	}
	return j.c(resp, err)
}

// closeIdle closes rt's idle connections if it keeps any.
func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// closeRequestBody closes the request body on a path that does not send it,
// as a RoundTripper must.
func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// body records a deferred success when the body ends (EOF or Close), a
// failure when reading it fails or the timeout runs out first, and releases
// the attempt's timeout. The first of these to happen decides: completing a
// permit is idempotent, and a permit completed before the body was wrapped
// (a failure or ignored status) records nothing more.
type body struct {
	rc       io.ReadCloser
	classify judge
	cancel   context.CancelFunc
	stop     func() bool // the timeout's failure, when the success is deferred
	// timedOut is closed when the timeout's failure has been recorded.
	timedOut chan struct{}
	stopOnce sync.Once
	fired    bool // the timeout's failure ran (or runs) instead of ours

	closed atomic.Bool // a read error after Close is the caller's doing
	pm     breaker.Permit
	lp     limit.Permit
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		if err == io.EOF || b.closed.Load() {
			b.finish(breaker.Success)
		} else {
			b.finish(b.classify.outcome(nil, err))
		}
	}
	return n, err
}

// Close records a success if nothing was recorded yet: the caller stopped
// reading a response whose headers were fine.
func (b *body) Close() error {
	b.closed.Store(true)
	err := b.rc.Close()
	b.finish(breaker.Success)
	if b.cancel != nil {
		b.cancel()
	}
	return err
}

func (b *body) finish(o breaker.Outcome) {
	b.pm.Done(o)
	b.lp.End(b.classify.caller)
	if b.stop == nil {
		return
	}
	// The timeout's failure may be recording right now (our Done lost to
	// it): the read or Close that returns must find it recorded, not about
	// to be. stop reports false on every call after the first, hence once.
	b.stopOnce.Do(func() { b.fired = !b.stop() })
	if b.fired {
		<-b.timedOut
	}
}

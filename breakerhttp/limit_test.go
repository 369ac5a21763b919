package breakerhttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
	"github.com/tripswitch-dev/tripswitch/limit"
)

func bulkheadOf(t testing.TB, n int) *limit.Bulkhead {
	t.Helper()
	b, err := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: n})
	if err != nil {
		t.Fatal(err)
	}
	b.EnableRejectionCount() // the tests count rejections: nothing retried
	return b
}

// holding is a server that holds each request until released.
func holding(t *testing.T) (*server, chan struct{}, chan struct{}, *atomic.Int64) {
	arrived, release := make(chan struct{}, 10), make(chan struct{})
	var requests atomic.Int64
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		arrived <- struct{}{}
		<-release
	}))
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the server's Close, which waits for handlers
	return srv, arrived, release, &requests
}

// TestALimitsRejectionIsNotACircuitFailureAndIsNeverRetried: with one
// attempt in flight at a limit of one, the next call is rejected at once
// without touching the network; the circuit counts it as nothing (a
// circuit that opens on a single failure stays CLOSED) and the retry,
// even one told that every error is retryable, does not try again.
func TestALimitsRejectionIsNotACircuitFailureAndIsNeverRetried(t *testing.T) {
	srv, arrived, release, requests := holding(t)
	b := newBreaker(t, 1, newClock())
	l := bulkheadOf(t, 1)
	everyError := func(_ *http.Request, _ *http.Response, err error) bool { return err != nil }
	c := client(t, breakerhttp.Policy{Breaker: b, Limit: l, Base: base(t), Timeout: time.Minute,
		Retry: &breakerhttp.Retry{Attempts: 5, Retryable: everyError, Wait: func(context.Context, time.Duration) error { return nil }}}.RoundTripper())
	done := make(chan error, 1)
	go func() {
		resp, err := c.Get(srv.URL)
		if err == nil {
			breakerhttp.DrainClose(resp)
		}
		done <- err
	}()
	<-arrived
	_, err := c.Get(srv.URL)
	if !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("second call: %v, want the limit's rejection", err)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("the server saw %d requests, want 1 (a rejection sends nothing)", n)
	}
	if m := l.Metrics(); m.Rejected != 1 {
		t.Fatalf("limit %+v, want one rejection (no retry)", m)
	}
	// Ignored: neither a success nor a failure, and not in the window.
	if tot, m := b.Totals(), b.Metrics(); tot.Failed != 0 || tot.Ignored != 1 || m.Calls != 0 || b.State() != breaker.Closed {
		t.Fatalf("circuit %s, window %+v, totals %+v: want the rejection ignored", b.State(), m, tot)
	}
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m := l.Metrics(); m.InFlight != 0 {
		t.Fatalf("limit %+v after the call ended, want its permit back", m)
	}
}

// TestTheLimitIsInsideTheCircuit: an open circuit fails fast without
// taking a permit (Resilience4j's order: circuit, then limit).
func TestTheLimitIsInsideTheCircuit(t *testing.T) {
	srv := newServer(t, statusHandler())
	b := newBreaker(t, 1, newClock())
	b.ForceOpen()
	l := bulkheadOf(t, 1)
	_, err := client(t, breakerhttp.Policy{Breaker: b, Limit: l, Base: base(t)}.RoundTripper()).Get(srv.URL)
	if !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("%v, want the open circuit", err)
	}
	if m := l.Metrics(); m.InFlight != 0 || m.Rejected != 0 {
		t.Fatalf("limit %+v, want it untouched", m)
	}
}

// TestTheLimitsPermitComesBackOnEveryEnding: success (body read or
// closed), a 5xx, a 4xx, the per-attempt timeout, a caller canceled with a
// cause, a refused connection, and a body nobody closes past the timeout.
func TestTheLimitsPermitComesBackOnEveryEnding(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/500":
			w.WriteHeader(500)
		case "/404":
			w.WriteHeader(404)
		case "/hang":
			<-r.Context().Done()
		default:
			_, _ = w.Write([]byte("ok"))
		}
	}))
	refused := newServer(t, statusHandler())
	refused.Close()
	for name, call := range map[string]func(c *http.Client) error{
		"a body read to the end": func(c *http.Client) error {
			resp, err := c.Get(srv.URL)
			if err == nil {
				_, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			return err
		},
		"a 5xx":     func(c *http.Client) error { return get(c, srv.URL+"/500") },
		"a 4xx":     func(c *http.Client) error { return get(c, srv.URL+"/404") },
		"a timeout": func(c *http.Client) error { return get(c, srv.URL+"/hang") },
		"a refused connection": func(c *http.Client) error {
			return get(c, refused.URL)
		},
		"a caller canceled with a cause": func(c *http.Client) error {
			ctx, cancel := context.WithCancelCause(context.Background())
			time.AfterFunc(20*time.Millisecond, func() { cancel(errors.New("client went away")) })
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/hang", nil)
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		},
		"a body never closed": func(c *http.Client) error {
			_, err := c.Get(srv.URL) // the timeout ends the attempt
			time.Sleep(300 * time.Millisecond)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			l := bulkheadOf(t, 1)
			c := client(t, breakerhttp.Policy{Breaker: newBreaker(t, 100, newClock()), Limit: l, Base: base(t), Timeout: 100 * time.Millisecond}.RoundTripper())
			_ = call(c)
			for deadline := time.Now().Add(10 * time.Second); l.Metrics().InFlight != 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("limit %+v: the permit was not given back", l.Metrics())
				}
			}
		})
	}
}

func get(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err == nil {
		breakerhttp.DrainClose(resp)
	}
	return err
}

// TestLimitHandlerShedsWith503AndRetryAfter: a server behind a limit of
// one answers the second concurrent request 503 with Retry-After at once,
// without running the handler, and serves again once the first is done;
// a handler that panics gives its permit back.
func TestLimitHandlerShedsWith503AndRetryAfter(t *testing.T) {
	l := bulkheadOf(t, 1)
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	var ran atomic.Int64
	h := breakerhttp.LimitHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		switch r.URL.Path {
		case "/hold":
			arrived <- struct{}{}
			<-release
		case "/panic":
			panic(http.ErrAbortHandler)
		}
	}), l, 1500*time.Millisecond)
	srv := newServer(t, h)
	c := client(t, base(t))
	first := make(chan error, 1)
	go func() { first <- get(c, srv.URL+"/hold") }()
	<-arrived
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	breakerhttp.DrainClose(resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" || ran.Load() != 1 {
		t.Fatalf("status %d, Retry-After %q, handler ran %d times; want 503, 2 (1.5 s rounded up), 1", resp.StatusCode, resp.Header.Get("Retry-After"), ran.Load())
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(srv.URL + "/panic"); err == nil {
		t.Fatal("the panicking handler answered")
	}
	resp, err = c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	breakerhttp.DrainClose(resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the panic: status %d, want 200 (the permit back)", resp.StatusCode)
	}
	if m := l.Metrics(); m.Rejected != 1 || m.InFlight != 0 {
		t.Fatalf("limit %+v, want 1 rejection and nothing in flight", m)
	}
}

// rejecting is a base transport behind a limit of the caller's own, full:
// it rejects every request without sending it.
type rejecting struct{ err error }

func (r rejecting) RoundTrip(req *http.Request) (*http.Response, error) { return nil, r.err }

// TestALimitBelowTheTransportIsIgnoredToo: a limit composed by hand below
// the Transport (in its Base) rejects with an error that matches
// breaker.ErrNotCalled; DefaultClassifier ignores it, so a circuit that
// opens on one failure stays CLOSED, and any other error still counts.
func TestALimitBelowTheTransportIsIgnoredToo(t *testing.T) {
	b := newBreaker(t, 1, newClock())
	full := bulkheadOf(t, 1)
	held, _ := full.Acquire(context.Background())
	defer held.Release()
	_, rejection := full.Acquire(context.Background())
	c := client(t, &breakerhttp.Transport{Breaker: b, Base: rejecting{rejection}})
	if _, err := c.Get("http://account.invalid/"); !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("%v, want the limit's rejection", err)
	}
	if tot := b.Totals(); tot.Ignored != 1 || tot.Failed != 0 || b.State() != breaker.Closed {
		t.Fatalf("circuit %s, totals %+v: want the rejection ignored", b.State(), tot)
	}
	c = client(t, &breakerhttp.Transport{Breaker: b, Base: rejecting{errors.New("connection reset")}})
	if _, err := c.Get("http://account.invalid/"); err == nil || b.State() != breaker.Open {
		t.Fatalf("%v, circuit %s: want a failure that opens it", err, b.State())
	}
}

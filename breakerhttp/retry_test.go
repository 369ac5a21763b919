package breakerhttp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
)

// script answers requests with the given statuses in order, then 200.
func script(codes ...int) (http.Handler, *atomic.Int64) {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		code := http.StatusOK
		if i < len(codes) {
			code = codes[i]
		}
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(code)
		_, _ = w.Write(body)
	}), &n
}

// TestRetryCountsEveryAttempt: two 503s then a 200 through the composed
// policy is three attempts in the circuit and one answer to the caller;
// the waits back off.
func TestRetryCountsEveryAttempt(t *testing.T) {
	h, n := script(503, 503)
	srv := newServer(t, h)
	b := newBreaker(t, 100, nil)
	var waits []time.Duration
	p := breakerhttp.Policy{Breaker: b, Base: base(t), Retry: &breakerhttp.Retry{Attempts: 3, Backoff: 100 * time.Millisecond,
		Wait: func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }}}
	c := client(t, p.RoundTripper())
	req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("replayed body"))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != "replayed body" || n.Load() != 3 {
		t.Fatalf("status %d body %q after %d attempts", resp.StatusCode, got, n.Load())
	}
	if tot := b.Totals(); tot.Failed != 2 || tot.Successful != 1 {
		t.Fatalf("the circuit did not count every attempt: %+v", tot)
	}
	if len(waits) != 2 || waits[0] < 50*time.Millisecond || waits[0] > 100*time.Millisecond || waits[1] < 100*time.Millisecond || waits[1] > 200*time.Millisecond {
		t.Fatalf("backoff waits %v, want one in [50ms,100ms] then one in [100ms,200ms]", waits)
	}
}

// TestRetryStopsAtTheOpenCircuit: the circuit opens during the retries; the
// next attempt is rejected without I/O and not retried.
func TestRetryStopsAtTheOpenCircuit(t *testing.T) {
	h, n := script(503, 503, 503, 503, 503)
	srv := newServer(t, h)
	b := newBreaker(t, 2, nil)
	p := breakerhttp.Policy{Breaker: b, Base: base(t), Retry: &breakerhttp.Retry{Attempts: 5, Wait: noWait}}
	c := client(t, p.RoundTripper())
	_, err := c.Get(srv.URL)
	if !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("want ErrOpen once the circuit opened, got %v", err)
	}
	if n.Load() != 2 {
		t.Fatalf("server saw %d attempts, want 2 (the third met the open circuit)", n.Load())
	}
	if got := b.Totals().NotPermitted; got != 1 {
		t.Fatalf("not permitted %d, want exactly 1: an open circuit is never retried", got)
	}
}

// TestRetryOnlyTransientAndReplayable: 4xx, a POST without an idempotency
// key and a body that cannot be replayed are sent once.
func TestRetryOnlyTransientAndReplayable(t *testing.T) {
	cases := []struct {
		name  string
		codes []int
		req   func(url string) *http.Request
		want  int64
	}{
		{"404", []int{404}, func(u string) *http.Request { r, _ := http.NewRequest(http.MethodGet, u, nil); return r }, 1},
		{"429", []int{429}, func(u string) *http.Request { r, _ := http.NewRequest(http.MethodGet, u, nil); return r }, 1},
		{"POST", []int{503}, func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, u, strings.NewReader("x"))
			return r
		}, 1},
		{"POST with Idempotency-Key", []int{503}, func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, u, strings.NewReader("x"))
			r.Header.Set("Idempotency-Key", "k1")
			return r
		}, 2},
		{"unreplayable body", []int{503}, func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPut, u, io.NopCloser(strings.NewReader("x")))
			return r
		}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, n := script(tc.codes...)
			srv := newServer(t, h)
			p := breakerhttp.Policy{Breaker: newBreaker(t, 100, nil), Base: base(t), Retry: &breakerhttp.Retry{Attempts: 3, Wait: noWait}}
			resp, err := client(t, p.RoundTripper()).Do(tc.req(srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			breakerhttp.DrainClose(resp)
			if n.Load() != tc.want {
				t.Fatalf("%d attempts, want %d", n.Load(), tc.want)
			}
		})
	}
}

// TestRetryGivesUpWhenTheCallerCannotWait: a backoff longer than the
// caller's remaining deadline returns the last answer instead of waiting.
func TestRetryGivesUpWhenTheCallerCannotWait(t *testing.T) {
	h, n := script(503, 503)
	srv := newServer(t, h)
	p := breakerhttp.Policy{Breaker: newBreaker(t, 100, nil), Base: base(t), Retry: &breakerhttp.Retry{Attempts: 3, Backoff: time.Hour}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := client(t, p.RoundTripper()).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	breakerhttp.DrainClose(resp)
	if resp.StatusCode != 503 || n.Load() != 1 {
		t.Fatalf("status %d after %d attempts, want the first 503", resp.StatusCode, n.Load())
	}
}

// refusingDialer refuses the first dial with a real ECONNREFUSED (it dials
// a closed loopback port), then dials normally.
type refusingDialer struct {
	closed string
	dials  atomic.Int64
}

func (d *refusingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.dials.Add(1) == 1 {
		addr = d.closed
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

func closedAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestRetryRefused: a POST whose connection was refused was never sent, so
// Retry sends it once more, outside the circuit: the circuit counts both
// attempts, the refusal as a failure.
func TestRetryRefused(t *testing.T) {
	h, n := script()
	srv := newServer(t, h)
	d := &refusingDialer{closed: closedAddr(t)}
	tr := base(t)
	tr.DialContext = d.DialContext
	b := newBreaker(t, 100, nil)
	c := client(t, breakerhttp.Policy{Breaker: b, Base: tr, Retry: &breakerhttp.Retry{Attempts: 2, Wait: noWait}}.RoundTripper())
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("order"))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(got) != "order" || n.Load() != 1 || d.dials.Load() != 2 {
		t.Fatalf("body %q, %d requests served, %d dials", got, n.Load(), d.dials.Load())
	}
	if tot := b.Totals(); tot.Successful != 1 || tot.Failed != 1 {
		t.Fatalf("totals %+v, want the refused attempt failed and the second successful", tot)
	}

	// A POST that reached the server and failed is not resent.
	h3, n3 := script(http.StatusBadGateway, http.StatusOK)
	srv3 := newServer(t, h3)
	c3 := client(t, breakerhttp.Policy{Breaker: newBreaker(t, 100, nil), Base: base(t), Retry: &breakerhttp.Retry{Attempts: 3, Wait: noWait}}.RoundTripper())
	req3, _ := http.NewRequest(http.MethodPost, srv3.URL, strings.NewReader("order"))
	resp3, err := c3.Do(req3)
	if err != nil {
		t.Fatal(err)
	}
	breakerhttp.DrainClose(resp3)
	if resp3.StatusCode != http.StatusBadGateway || n3.Load() != 1 {
		t.Fatalf("a POST that was sent: status %d after %d attempts, want 502 after 1", resp3.StatusCode, n3.Load())
	}

	// Without Retry the refusal reaches the circuit.
	d2 := &refusingDialer{closed: closedAddr(t)}
	b2 := newBreaker(t, 100, nil)
	tr2 := base(t)
	tr2.DialContext = d2.DialContext
	c2 := client(t, breakerhttp.Policy{Breaker: b2, Base: tr2}.RoundTripper())
	if _, err := c2.Get(srv.URL); !breakerhttp.Refused(err) {
		t.Fatalf("want the refusal without Retry, got %v", err)
	}
	if b2.Totals().Failed != 1 {
		t.Fatal("the refusal was not counted")
	}
}

// TestRetryRejectsNegativeSettings: a negative Attempts, Backoff or
// MaxBackoff is an error naming the field, from Validate and from every
// request through the policy, and nothing reaches the server.
func TestRetryRejectsNegativeSettings(t *testing.T) {
	h, served := script()
	srv := newServer(t, h)
	for _, tc := range []struct {
		retry breakerhttp.Retry
		field string
	}{
		{breakerhttp.Retry{Attempts: -1, Backoff: -time.Second}, "Retry.Attempts"},
		{breakerhttp.Retry{Attempts: 2, Backoff: -time.Second}, "Retry.Backoff"},
		{breakerhttp.Retry{MaxBackoff: -time.Second}, "Retry.MaxBackoff"},
	} {
		var ce *breaker.ConfigError
		if err := tc.retry.Validate(); !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%+v: Validate = %v, want a ConfigError for %s", tc.retry, err, tc.field)
		}
		c := client(t, breakerhttp.Policy{Breaker: newBreaker(t, 100, nil), Base: base(t), Retry: &tc.retry}.RoundTripper())
		resp, err := c.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: Get = %v, want an error naming %s", tc.retry, err, tc.field)
		}
	}
	if err := (&breakerhttp.Retry{}).Validate(); err != nil {
		t.Errorf("the zero Retry (every default): %v", err)
	}
	if n := served.Load(); n != 0 {
		t.Errorf("the server saw %d requests, want none", n)
	}
}

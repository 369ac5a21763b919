package breakerhttp_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
)

// TestRetryAfterOpensTheCircuitUntilThen: with the opt-in, a 429 or 503
// carrying Retry-After opens the circuit for that long, capped; the calls
// after it fail fast without touching the network.
func TestRetryAfterOpensTheCircuitUntilThen(t *testing.T) {
	clk := newClock()
	date := clk.Now().Add(40 * time.Second).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		name       string
		status     int
		header     string
		optIn      bool
		wantOpenOf time.Duration // 0: stays closed
	}{
		{"503 with seconds", 503, "120", true, 120 * time.Second},
		{"429 with an HTTP date", 429, date, true, 40 * time.Second},
		{"a long wait is cut to the cap", 503, "86400", true, 5 * time.Minute},
		{"the longest wait a Duration holds is cut to the cap", 503, "9223372036", true, 5 * time.Minute},
		{"a wait past a Duration saturates, then is cut to the cap", 503, "9223372037", true, 5 * time.Minute},
		{"a wait past an int64 saturates too", 429, "99999999999999999999999", true, 5 * time.Minute},
		{"a date centuries ahead is cut to the cap", 503, "Fri, 31 Dec 9999 23:59:59 GMT", true, 5 * time.Minute},
		{"without the opt-in nothing happens", 503, "120", false, 0},
		{"another status is not a request to wait", 500, "120", true, 0},
		{"a header that is neither is ignored", 503, "soon", true, 0},
		{"zero is no wait", 429, "0", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", tc.header)
				w.WriteHeader(tc.status)
			}))
			b, err := breaker.New("account-read", breaker.Config{MinimumNumberOfCalls: 100, OpenUntilCap: 5 * time.Minute, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			c := client(t, breakerhttp.Policy{Breaker: b, Base: base(t), RetryAfter: tc.optIn}.RoundTripper())
			resp, err := c.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			breakerhttp.DrainClose(resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want the server's %d", resp.StatusCode, tc.status)
			}
			if tc.wantOpenOf == 0 {
				if s := b.State(); s != breaker.Closed {
					t.Fatalf("state %s, want CLOSED", s)
				}
				return
			}
			conns := srv.conns.Load()
			_, err = c.Get(srv.URL)
			var oe *breaker.OpenError
			if !errors.As(err, &oe) || !oe.Until.Equal(clk.Now().Add(tc.wantOpenOf)) {
				t.Fatalf("next call: %v, want open until now+%v", err, tc.wantOpenOf)
			}
			if srv.conns.Load() != conns {
				t.Fatal("the open circuit touched the network")
			}
		})
	}
}

// TestRetryReturnsTheAnswerThatOpenedTheCircuit: with Retry outside, the
// caller gets the server's 503 and its Retry-After, not an open-circuit
// error from a retry that could only fail fast.
func TestRetryReturnsTheAnswerThatOpenedTheCircuit(t *testing.T) {
	var attempts atomic.Int64
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	b, err := breaker.New("account-read", breaker.Config{MinimumNumberOfCalls: 100, OpenUntilCap: time.Minute, Clock: newClock()})
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, breakerhttp.Policy{Breaker: b, Base: base(t), RetryAfter: true,
		Retry: &breakerhttp.Retry{Attempts: 3, Wait: func(context.Context, time.Duration) error { return nil }}}.RoundTripper())
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatalf("%v, want the server's 503", err)
	}
	breakerhttp.DrainClose(resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "30" || attempts.Load() != 1 {
		t.Fatalf("status %d, Retry-After %q after %d attempts; want 503, 30, 1", resp.StatusCode, resp.Header.Get("Retry-After"), attempts.Load())
	}
	if b.State() != breaker.Open {
		t.Fatalf("state %s, want OPEN", b.State())
	}
}

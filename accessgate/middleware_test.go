package accessgate_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/accessgate"
)

// TestMiddleware: the protected handler runs only on an allow; a denial is
// 403 SERVICE_ACCESS_DENIED; an unknown decision is 503
// SERVICE_ACCESS_UNAVAILABLE with Retry-After, whatever the reason.
func TestMiddleware(t *testing.T) {
	f := newFixture(t, accessgate.Config{}, "alice")
	var invoked atomic.Int64
	orders := f.gate.Middleware("orders", func(r *http.Request) (string, bool) {
		u := r.Header.Get("X-User")
		return u, u != ""
	})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		invoked.Add(1)
		_, _ = w.Write([]byte("your orders"))
	}))
	srv := httptest.NewServer(orders)
	defer srv.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}

	get := func(user string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		if user != "" {
			req.Header.Set("X-User", user)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ Code string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Code, resp.Header.Get("Retry-After")
	}
	expect := func(user string, status int, code string, handlerRuns int64) {
		t.Helper()
		before := invoked.Load()
		s, c, _ := get(user)
		if s != status || c != code || invoked.Load()-before != handlerRuns {
			t.Fatalf("%q: %d %q, handler ran %d times; want %d %q, %d", user, s, c, invoked.Load()-before, status, code, handlerRuns)
		}
	}
	expect("alice", 200, "", 1)
	expect("bob", 403, accessgate.CodeDenied, 0)
	expect("", 401, accessgate.CodeUnauthenticated, 0)

	f.acct.mode.Store("error")
	expect("carol", 503, accessgate.CodeUnavailable, 0)
	expect("alice", 200, "", 1) // cached allow keeps working
	expect("bob", 403, accessgate.CodeDenied, 0)
	for _, u := range []string{"dave", "erin", "frank"} {
		expect(u, 503, accessgate.CodeUnavailable, 0)
	}
	// Four failures: the circuit is open; the answer says when to retry.
	if s, code, retry := get("grace"); s != 503 || code != accessgate.CodeUnavailable || retry != "15" {
		t.Fatalf("open circuit: %d %q Retry-After %q, want 503 %s 15", s, code, retry, accessgate.CodeUnavailable)
	}
	f.acct.mode.Store("forbidden")
	f.clk.Advance(15 * time.Second) // half-open: the trial meets the 403
	if s, code, retry := get("heidi"); s != 503 || code != accessgate.CodeUnavailable || retry != "1" {
		t.Fatalf("misconfigured: %d %q Retry-After %q, want 503 with Retry-After 1", s, code, retry)
	}
}

package breakerhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// Two call sites of one account service: the permission check is timeout →
// circuit with no retry; other lookups get a bounded retry outside the
// circuit. Each has its own circuit, so a sick lookup path cannot open the
// permission path.
func ExamplePolicy() {
	calls := 0
	account := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if r.URL.Path == "/users/7" && calls < 3 {
			w.WriteHeader(http.StatusServiceUnavailable) // two blips, then fine
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer account.Close()

	circuits, _ := breaker.NewRegistry(breaker.Config{WindowType: breaker.TimeBased, WindowSize: 30, MinimumNumberOfCalls: 10}, nil)
	shared := http.DefaultTransport.(*http.Transport).Clone() // one pool for both call sites
	access := breakerhttp.Policy{Breaker: circuits.Get("account-access"), Timeout: 10 * time.Second, Base: shared}.Client()
	read := breakerhttp.Policy{Breaker: circuits.Get("account-read"), Timeout: 10 * time.Second, Base: shared,
		Retry: &breakerhttp.Retry{Attempts: 3, Backoff: time.Millisecond}}.Client()

	resp, err := read.Get(account.URL + "/users/7")
	if err != nil {
		fmt.Println(err)
		return
	}
	breakerhttp.DrainClose(resp)
	fmt.Println("account-read:", resp.StatusCode, "after", calls, "attempts")

	resp, err = access.Get(account.URL + "/access")
	if err != nil {
		fmt.Println(err)
		return
	}
	breakerhttp.DrainClose(resp)
	fmt.Println("account-access:", resp.StatusCode)
	m := circuits.Get("account-read").Metrics()
	fmt.Println("account-read window:", m.Calls, "calls,", m.FailedCalls, "failed")
	// Output:
	// account-read: 200 after 3 attempts
	// account-access: 200
	// account-read window: 3 calls, 2 failed
}

// A Transport is one call site's circuit under an http.Client of your own.
// What counts is DefaultClassifier's: a 5xx is a failure, a 4xx is the
// caller's problem and is not counted at all (FailOnStatus changes that),
// and a success is recorded once its body has been read or closed.
func ExampleTransport() {
	codes := []int{http.StatusNotFound, http.StatusNotFound, http.StatusInternalServerError, http.StatusOK}
	calls := 0
	account := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(codes[calls%len(codes)])
		calls++
	}))
	defer account.Close()

	b, _ := breaker.New("account-read", breaker.Config{})
	client := &http.Client{Transport: &breakerhttp.Transport{Breaker: b, Timeout: 10 * time.Second}}
	var got []int
	for range codes {
		resp, err := client.Get(account.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		breakerhttp.DrainClose(resp)
		got = append(got, resp.StatusCode)
	}
	m := b.Metrics()
	fmt.Println(got)
	fmt.Println("window:", m.Calls, "calls,", m.FailedCalls, "failed")
	// Output:
	// [404 404 500 200]
	// window: 2 calls, 1 failed
}

// A fire-and-forget notification swallows its errors, but the circuit has
// already seen them: the Transport records each attempt before the error or
// status reaches the code that drops it. Once the circuit opens, the
// notifications fail fast instead of piling up on a dead service.
func ExampleTransport_fireAndForget() {
	notifier := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway) // the notification service is down
	}))
	defer notifier.Close()

	circuit, _ := breaker.New("notification", breaker.Config{MinimumNumberOfCalls: 3})
	client := breakerhttp.Policy{Breaker: circuit, Timeout: 5 * time.Second}.Client()
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))

	notify := func(ctx context.Context, msg string) {
		done := make(chan struct{})
		go func() { // fire and forget
			defer close(done)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, notifier.URL, nil)
			resp, err := client.Do(req)
			switch {
			case errors.Is(err, breaker.ErrOpen):
				log.Warn("notification skipped", "circuit", "open")
			case err != nil:
				log.Warn("notification failed", "err", err)
			default:
				breakerhttp.DrainClose(resp)
				if resp.StatusCode >= 300 {
					log.Warn("notification failed", "status", resp.StatusCode)
				}
			}
		}()
		<-done // only so that the example's output is in order
	}
	for i := range 5 {
		notify(context.Background(), fmt.Sprint("message ", i))
	}
	fmt.Println("circuit:", circuit.State())
	// Output:
	// level=WARN msg="notification failed" status=502
	// level=WARN msg="notification failed" status=502
	// level=WARN msg="notification failed" status=502
	// level=WARN msg="notification skipped" circuit=open
	// level=WARN msg="notification skipped" circuit=open
	// circuit: OPEN
}

// With RetryAfter, a server that sheds load with 503 and Retry-After opens
// the call site's circuit for as long as it asks (capped by the breaker's
// OpenUntilCap): the calls after it fail fast instead of adding load.
func ExamplePolicy_retryAfter() {
	account := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer account.Close()

	b, _ := breaker.New("account-read", breaker.Config{OpenUntilCap: 5 * time.Minute})
	c := breakerhttp.Policy{Breaker: b, RetryAfter: true}.Client()
	resp, err := c.Get(account.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	breakerhttp.DrainClose(resp)
	_, err = c.Get(account.URL)
	var oe *breaker.OpenError
	if errors.As(err, &oe) {
		d := oe.RetryAfter(time.Now())
		fmt.Println(resp.StatusCode, b.State(), d > 0 && d <= 30*time.Second)
	}
	c.CloseIdleConnections()
	// Output: 503 OPEN true
}

// A limit per call site: with one attempt in flight at a bulkhead of one,
// the next call is rejected at once without touching the network, the
// circuit does not count it, and it is not retried.
func ExamplePolicy_limit() {
	release := make(chan struct{})
	account := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release // a slow dependency
	}))
	defer account.Close()
	b, _ := breaker.New("account-read", breaker.Config{})
	bulkhead, _ := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 1})
	bulkhead.EnableRejectionCount() // as breakerprom's collector does
	c := breakerhttp.Policy{Breaker: b, Limit: bulkhead, Timeout: 10 * time.Second, Retry: &breakerhttp.Retry{Attempts: 3}}.Client()
	defer c.CloseIdleConnections()

	first := make(chan struct{})
	go func() {
		defer close(first)
		if resp, err := c.Get(account.URL); err == nil {
			breakerhttp.DrainClose(resp)
		}
	}()
	for bulkhead.Metrics().InFlight == 0 {
		time.Sleep(time.Millisecond)
	}
	_, err := c.Get(account.URL)
	fmt.Println(errors.Is(err, limit.ErrLimited), bulkhead.Metrics().Rejected, b.Metrics().Calls)
	close(release)
	<-first
	// Output:
	// true 1 0
}

// LimitHandler sheds a server's load beyond its limit: 503 with
// Retry-After, at once, without running the handler.
func ExampleLimitHandler() {
	bulkhead, _ := limit.NewBulkhead("orders", limit.BulkheadConfig{MaxConcurrentCalls: 1})
	held, _ := bulkhead.Acquire(context.Background()) // one request in flight already
	defer held.Release()
	h := breakerhttp.LimitHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("not reached")
	}), bulkhead, 2*time.Second)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/orders", nil))
	fmt.Println(rec.Code, rec.Header().Get("Retry-After"))
	// Output:
	// 503 2
}

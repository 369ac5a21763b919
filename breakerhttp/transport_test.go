package breakerhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breaker/manualclock"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newClock() *manualclock.Clock { return manualclock.New(time.Time{}) }

// newBreaker opens after `min` calls at 50% failures, with totals counted.
func newBreaker(t testing.TB, min int, clk breaker.Clock) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New("test", breaker.Config{MinimumNumberOfCalls: min, WindowSize: 100, WaitDurationInOpenState: time.Minute, PermittedNumberOfCallsInHalfOpenState: 1, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	b.EnableTotals()
	return b
}

// server is a real loopback server that counts the connections it accepts.
type server struct {
	*httptest.Server
	conns atomic.Int64
}

func newServer(t testing.TB, h http.Handler) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// client returns a client over tr whose idle connections are closed at the
// end of the test, so the leak check sees no transport goroutines.
func client(t testing.TB, tr http.RoundTripper) *http.Client {
	t.Cleanup(func() { (&http.Client{Transport: tr}).CloseIdleConnections() })
	return &http.Client{Transport: tr}
}

func base(t testing.TB) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func statusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var code int
		_, _ = fmt.Sscanf(strings.TrimPrefix(r.URL.Path, "/"), "%d", &code)
		w.WriteHeader(code)
		_, _ = fmt.Fprintf(w, "body of %d", code)
	})
}

// TestClassificationOnARealServer: every status class, through http.Client,
// counted by the circuit as the package documents, with 4xx responses
// reaching the caller unchanged.
func TestClassificationOnARealServer(t *testing.T) {
	srv := newServer(t, statusHandler())
	cases := []struct {
		code int
		want breaker.Outcome
	}{
		{200, breaker.Success}, {201, breaker.Success}, {204, breaker.Success}, {304, breaker.Success},
		{400, breaker.Ignore}, {401, breaker.Ignore}, {403, breaker.Ignore}, {404, breaker.Ignore},
		{409, breaker.Ignore}, {429, breaker.Ignore},
		{500, breaker.Failure}, {502, breaker.Failure}, {503, breaker.Failure}, {504, breaker.Failure},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			b := newBreaker(t, 100, nil)
			c := client(t, &breakerhttp.Transport{Breaker: b, Base: base(t)})
			resp, err := c.Get(fmt.Sprintf("%s/%d", srv.URL, tc.code))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d reached the caller as %d", tc.code, resp.StatusCode)
			}
			if tc.code != 204 && tc.code != 304 && string(got) != fmt.Sprintf("body of %d", tc.code) {
				t.Fatalf("body changed: %q", got)
			}
			assertOutcome(t, b, tc.want)
		})
	}
}

func assertOutcome(t *testing.T, b *breaker.Breaker, want breaker.Outcome) {
	t.Helper()
	tot := b.Totals()
	got := map[breaker.Outcome]uint64{breaker.Success: tot.Successful, breaker.Failure: tot.Failed, breaker.Ignore: tot.Ignored}
	for o, n := range got {
		if w := uint64(0); o == want {
			if n != 1 {
				t.Errorf("%s counted %d times, want once (totals %+v)", o, n, tot)
			}
		} else if n != w {
			t.Errorf("%s counted %d times, want 0 (totals %+v)", o, n, tot)
		}
	}
	m := b.Metrics()
	wantCalls := int64(1)
	if want == breaker.Ignore {
		wantCalls = 0 // ignored calls are not in the window
	}
	if m.Calls != wantCalls {
		t.Errorf("window holds %d calls, want %d", m.Calls, wantCalls)
	}
}

// TestFailOnStatus: one call site may count 429 as a failure.
func TestFailOnStatus(t *testing.T) {
	srv := newServer(t, statusHandler())
	b := newBreaker(t, 100, nil)
	c := client(t, &breakerhttp.Transport{Breaker: b, Base: base(t), Classify: breakerhttp.FailOnStatus(breakerhttp.DefaultClassifier, http.StatusTooManyRequests)})
	resp, err := c.Get(srv.URL + "/429")
	if err != nil {
		t.Fatal(err)
	}
	breakerhttp.DrainClose(resp)
	assertOutcome(t, b, breaker.Failure)
}

// TestConnectionRefusedIsAFailure: a server whose listener is closed.
func TestConnectionRefusedIsAFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	b := newBreaker(t, 100, nil)
	c := client(t, &breakerhttp.Transport{Breaker: b, Base: base(t)})
	_, err = c.Get("http://" + addr + "/")
	if err == nil || !breakerhttp.Refused(err) {
		t.Fatalf("want a refused connection, got %v", err)
	}
	assertOutcome(t, b, breaker.Failure)
}

// hanging answers only when released or when its client goes away.
func hanging(t testing.TB) (*server, chan struct{}) {
	release := make(chan struct{})
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return srv, release
}

// TestTimeoutsAreFailuresCancellationIsIgnored: the Transport's own
// timeout, http.Client.Timeout and the caller's deadline are failures; the
// caller cancelling is ignored.
func TestTimeoutsAreFailuresCancellationIsIgnored(t *testing.T) {
	srv, _ := hanging(t)
	t.Run("transport timeout", func(t *testing.T) {
		b := newBreaker(t, 100, nil)
		c := client(t, &breakerhttp.Transport{Breaker: b, Base: base(t), Timeout: 50 * time.Millisecond})
		if _, err := c.Get(srv.URL); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want a deadline error, got %v", err)
		}
		assertOutcome(t, b, breaker.Failure)
	})
	t.Run("client timeout", func(t *testing.T) {
		b := newBreaker(t, 100, nil)
		c := client(t, &breakerhttp.Transport{Breaker: b, Base: base(t)})
		c.Timeout = 50 * time.Millisecond
		if _, err := c.Get(srv.URL); err == nil {
			t.Fatal("no error from a hanging server")
		}
		assertOutcome(t, b, breaker.Failure)
	})
	t.Run("caller deadline", func(t *testing.T) {
		b := newBreaker(t, 100, nil)
		c := client(t, &breakerhttp.Transport{Breaker: b, Base: base(t)})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want a deadline error, got %v", err)
		}
		assertOutcome(t, b, breaker.Failure)
	})
	t.Run("caller cancels", func(t *testing.T) {
		b := newBreaker(t, 100, nil)
		c := client(t, &breakerhttp.Transport{Breaker: b, Base: base(t)})
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		go func() { time.Sleep(20 * time.Millisecond); cancel() }()
		if _, err := c.Do(req); !errors.Is(err, context.Canceled) {
			t.Fatalf("want a cancellation, got %v", err)
		}
		assertOutcome(t, b, breaker.Ignore)
	})
}

// TestBodyFailureAfterGoodHeaders: headers arrive, then the body stalls
// until the per-attempt timeout: the attempt is a failure, not a success.
func TestBodyFailureAfterGoodHeaders(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	b := newBreaker(t, 100, nil)
	c := client(t, &breakerhttp.Transport{Breaker: b, Base: base(t), Timeout: 100 * time.Millisecond})
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if tot := b.Totals(); tot.Successful+tot.Failed != 0 {
		t.Fatalf("recorded before the body arrived: %+v", tot)
	}
	_, err = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err == nil {
		t.Fatal("the stalled body read did not fail")
	}
	assertOutcome(t, b, breaker.Failure)
}

// TestOpenCircuitDoesNoNetworkIO: once open, requests fail with ErrOpen
// (through http.Client's *url.Error) and the server sees no connection.
func TestOpenCircuitDoesNoNetworkIO(t *testing.T) {
	srv := newServer(t, statusHandler())
	b := newBreaker(t, 2, nil)
	tr := base(t)
	c := client(t, &breakerhttp.Transport{Breaker: b, Base: tr})
	for range 2 {
		resp, err := c.Get(srv.URL + "/503")
		if err != nil {
			t.Fatal(err)
		}
		breakerhttp.DrainClose(resp)
	}
	if b.State() != breaker.Open {
		t.Fatalf("state %s after two 503s, want OPEN", b.State())
	}
	tr.CloseIdleConnections()
	before := srv.conns.Load()
	body := &closeCounter{Reader: strings.NewReader("payload")}
	for range 50 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/200", body)
		_, err := c.Do(req)
		if !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("want ErrOpen, got %v", err)
		}
		var oe *breaker.OpenError
		if !errors.As(err, &oe) || oe.Breaker != "test" {
			t.Fatalf("the rejection does not name the circuit: %v", err)
		}
	}
	if n := srv.conns.Load() - before; n != 0 {
		t.Fatalf("the server saw %d new connections from an open circuit", n)
	}
	if body.closed.Load() != 50 {
		t.Fatalf("request bodies closed %d times, want 50 (a RoundTripper must close them)", body.closed.Load())
	}
	if got := b.Totals().NotPermitted; got != 50 {
		t.Fatalf("not permitted %d, want 50", got)
	}
}

type closeCounter struct {
	io.Reader
	closed atomic.Int64
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

// TestHalfOpenTrialCompletesWhenTheBodyEnds: the trial call's success is
// recorded when its body is read, which closes the circuit.
// openThenWait opens b with two 500s through c and moves past its open wait,
// so that the next call is a HALF_OPEN trial.
func openThenWait(t *testing.T, c *http.Client, url string, clk *manualclock.Clock) {
	t.Helper()
	for range 2 {
		resp, err := c.Get(url + "/500")
		if err != nil {
			t.Fatal(err)
		}
		breakerhttp.DrainClose(resp)
	}
	clk.Advance(time.Minute)
}

func TestHalfOpenTrialCompletesWhenTheBodyEnds(t *testing.T) {
	srv := newServer(t, statusHandler())
	clk := newClock()
	b := newBreaker(t, 2, clk)
	c := client(t, &breakerhttp.Transport{Breaker: b, Base: base(t)})
	openThenWait(t, c, srv.URL, clk)
	resp, err := c.Get(srv.URL + "/200")
	if err != nil {
		t.Fatal(err)
	}
	if b.State() != breaker.HalfOpen {
		t.Fatalf("state %s while the trial body is unread, want HALF_OPEN", b.State())
	}
	if _, err := c.Get(srv.URL + "/200"); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("a second call took the only trial permit: %v", err)
	}
	breakerhttp.DrainClose(resp)
	if b.State() != breaker.Closed {
		t.Fatalf("state %s after the trial succeeded, want CLOSED", b.State())
	}
}

// TestNoConnectionLeak: failed, ignored and successful responses drained
// by the package's helpers reuse one keep-alive connection.
func TestNoConnectionLeak(t *testing.T) {
	srv := newServer(t, statusHandler())
	b := newBreaker(t, 1000, nil)
	p := breakerhttp.Policy{Breaker: b, Base: base(t), Timeout: time.Second, Retry: &breakerhttp.Retry{Attempts: 3, Wait: noWait}}
	c := client(t, p.RoundTripper())
	for i := range 30 {
		code := []int{200, 404, 503}[i%3]
		resp, err := c.Get(fmt.Sprintf("%s/%d", srv.URL, code))
		if err != nil {
			t.Fatal(err)
		}
		breakerhttp.DrainClose(resp)
	}
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("%d connections for 30 sequential requests (with retries), want 1: a body was not drained", n)
	}
}

func noWait(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// A HALF_OPEN trial whose body nobody reads or closes gives its permit back
// as a failure when the timeout runs out, and a late Close records nothing:
// the circuit reopens instead of rejecting everything for ever.
func TestUnreadTrialBodyFailsAtTheTimeout(t *testing.T) {
	srv := newServer(t, statusHandler())
	clk := newClock()
	b := newBreaker(t, 2, clk)
	c := client(t, breakerhttp.Policy{Breaker: b, Base: base(t), Timeout: 200 * time.Millisecond}.RoundTripper())
	openThenWait(t, c, srv.URL, clk)
	resp, err := c.Get(srv.URL + "/200")
	if err != nil {
		t.Fatal(err)
	}
	if s := b.State(); s != breaker.HalfOpen {
		t.Fatalf("state %s while the trial body is unread, want HALF_OPEN", s)
	}
	deadline := time.Now().Add(20 * time.Second)
	for b.State() == breaker.HalfOpen {
		if time.Now().After(deadline) {
			t.Fatal("the unread trial held its permit long after the 200ms timeout")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := b.State(); s != breaker.Open {
		t.Fatalf("state %s after the trial timed out, want OPEN", s)
	}
	_ = resp.Body.Close()
	if s, tot := b.State(), b.Totals(); s != breaker.Open || tot.Successful != 0 {
		t.Fatalf("a late Close after the timeout: state %s, %d successes recorded; want OPEN and none", s, tot.Successful)
	}
}

// Policy's client closes the base transport's idle keep-alive connections
// through the retry and the circuit.
func TestCloseIdleConnectionsReachesTheBase(t *testing.T) {
	var closed atomic.Int64
	srv := httptest.NewUnstartedServer(statusHandler())
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := breakerhttp.Policy{Breaker: newBreaker(t, 100, nil), Base: base(t), Retry: &breakerhttp.Retry{}}.Client()
	resp, err := c.Get(srv.URL + "/200")
	if err != nil {
		t.Fatal(err)
	}
	breakerhttp.DrainClose(resp)
	c.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for closed.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle keep-alive connection is still open after CloseIdleConnections")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

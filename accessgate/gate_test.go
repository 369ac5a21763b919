package accessgate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tripswitch-dev/tripswitch/accessgate"
	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breaker/manualclock"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newClock() *manualclock.Clock { return manualclock.New(time.Time{}) }

const secret = "internal-secret-5f2a9c"

// account is a real permission service on 127.0.0.1: subjects listed in
// allow may use any resource; mode scripts outages.
type account struct {
	srv   *httptest.Server
	calls atomic.Int64
	mode  atomic.Value // "up", "error" (500), "hang", "forbidden" (403: bad secret)
	gate  chan struct{}
	allow map[string]bool
}

func newAccount(t testing.TB, allow ...string) *account {
	a := &account{allow: map[string]bool{}}
	for _, s := range allow {
		a.allow[s] = true
	}
	a.mode.Store("up")
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.calls.Add(1)
		if g := a.gate; g != nil {
			<-g
		}
		switch a.mode.Load() {
		case "error":
			http.Error(w, "boom for "+r.Header.Get("X-Internal-Secret"), http.StatusInternalServerError)
			return
		case "hang":
			<-r.Context().Done()
			return
		case "forbidden":
			http.Error(w, "bad secret", http.StatusForbidden)
			return
		}
		if r.Header.Get("X-Internal-Secret") != secret {
			http.Error(w, "bad secret", http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]bool{"allowed": a.allow[r.URL.Query().Get("subject")]})
	}))
	t.Cleanup(a.srv.Close)
	return a
}

type fixture struct {
	acct     *account
	clk      *manualclock.Clock
	circuits *breaker.Registry
	gate     *accessgate.Checker
	logs     *bytes.Buffer
}

// newFixture wires the gate as a service would: an HTTPLookup through the
// account-access circuit (timeout inside, no retry), a fake clock for the
// cache and the circuit, real HTTP for the rest.
func newFixture(t testing.TB, cfg accessgate.Config, allow ...string) *fixture {
	t.Helper()
	f := &fixture{acct: newAccount(t, allow...), clk: newClock(), logs: &bytes.Buffer{}}
	var err error
	f.circuits, err = breaker.NewRegistry(breaker.Config{WindowType: breaker.TimeBased, WindowSize: 30, MinimumNumberOfCalls: 4,
		WaitDurationInOpenState: 15 * time.Second, PermittedNumberOfCallsInHalfOpenState: 1, Clock: f.clk}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	client := breakerhttp.Policy{Breaker: f.circuits.Get("account-access"), Timeout: 200 * time.Millisecond, Base: tr}.Client()
	cfg.Lookup = &accessgate.HTTPLookup{Client: client, Request: accessgate.Query(f.acct.srv.URL+"/internal/access", http.Header{"X-Internal-Secret": {secret}})}
	cfg.Clock = f.clk
	cfg.Logger = slog.New(slog.NewJSONHandler(&syncWriter{w: f.logs}, nil))
	f.gate, err = accessgate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.gate.Close)
	return f
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestDecisionCache: an allow is cached 60s and a deny 10s, then asked again.
func TestDecisionCache(t *testing.T) {
	f := newFixture(t, accessgate.Config{}, "alice")
	ctx := context.Background()
	check := func(subject string, want error) {
		t.Helper()
		if err := f.gate.Check(ctx, subject, "orders"); !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("%s: got %v, want %v", subject, err, want)
		}
	}
	check("alice", nil)
	check("bob", accessgate.ErrDenied)
	check("alice", nil)
	check("bob", accessgate.ErrDenied)
	if n := f.acct.calls.Load(); n != 2 {
		t.Fatalf("%d lookups, want 2 (the repeats were cached)", n)
	}
	f.clk.Advance(11 * time.Second) // the deny expired, the allow did not
	check("alice", nil)
	check("bob", accessgate.ErrDenied)
	if n := f.acct.calls.Load(); n != 3 {
		t.Fatalf("%d lookups, want 3 (only the deny was asked again)", n)
	}
	f.clk.Advance(50 * time.Second) // 61s: the allow expired
	check("alice", nil)
	if n := f.acct.calls.Load(); n != 4 {
		t.Fatalf("%d lookups, want 4", n)
	}
	if s := f.gate.Stats(); s.CacheHits != 3 || s.CacheMisses != 4 || s.Allowed != 4 || s.Denied != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// TestFailClosed: every way of not knowing is refused, and never cached.
func TestFailClosed(t *testing.T) {
	ctx := context.Background()
	t.Run("5xx", func(t *testing.T) {
		f := newFixture(t, accessgate.Config{}, "alice")
		f.acct.mode.Store("error")
		for range 3 {
			if err := f.gate.Check(ctx, "alice", "orders"); !errors.Is(err, accessgate.ErrUnavailable) {
				t.Fatalf("got %v, want unavailable", err)
			}
		}
		if n := f.acct.calls.Load(); n != 3 {
			t.Fatalf("%d lookups for 3 checks: a failure was cached", n)
		}
		f.acct.mode.Store("up")
		if err := f.gate.Check(ctx, "alice", "orders"); err != nil {
			t.Fatalf("after recovery: %v", err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		f := newFixture(t, accessgate.Config{}, "alice")
		f.acct.mode.Store("hang")
		err := f.gate.Check(ctx, "alice", "orders")
		if !errors.Is(err, accessgate.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want unavailable after the per-call timeout", err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		f := newFixture(t, accessgate.Config{}, "alice")
		f.acct.srv.Close()
		err := f.gate.Check(ctx, "alice", "orders")
		if !errors.Is(err, accessgate.ErrUnavailable) || !breakerhttp.Refused(err) {
			t.Fatalf("got %v, want unavailable (refused)", err)
		}
	})
	t.Run("circuit open", func(t *testing.T) {
		f := newFixture(t, accessgate.Config{}, "alice")
		f.acct.mode.Store("error")
		for i := range 4 {
			_ = f.gate.Check(ctx, "user"+string(rune('a'+i)), "orders")
		}
		if s := f.circuits.Get("account-access").State(); s != breaker.Open {
			t.Fatalf("circuit %s after 4 failures, want OPEN", s)
		}
		before := f.acct.calls.Load()
		err := f.gate.Check(ctx, "alice", "orders")
		var ue *accessgate.UnavailableError
		if !errors.As(err, &ue) || !errors.Is(err, breaker.ErrOpen) || ue.RetryAfter != 15*time.Second {
			t.Fatalf("got %v (%+v), want unavailable from the open circuit, retry after 15s", err, ue)
		}
		if f.acct.calls.Load() != before {
			t.Fatal("the open circuit called the permission service")
		}
	})
	t.Run("4xx is a configuration problem", func(t *testing.T) {
		f := newFixture(t, accessgate.Config{}, "alice")
		f.acct.mode.Store("forbidden")
		for range 10 {
			err := f.gate.Check(ctx, "alice", "orders")
			var ue *accessgate.UnavailableError
			if !errors.As(err, &ue) || !ue.Misconfigured || errors.Is(err, accessgate.ErrDenied) {
				t.Fatalf("got %v, want unavailable (misconfigured), not a denial", err)
			}
		}
		if s := f.circuits.Get("account-access").State(); s != breaker.Closed {
			t.Fatalf("10 rejections from the permission service opened its circuit (%s): a 4xx is not an outage", s)
		}
		if !strings.Contains(f.logs.String(), `"level":"ERROR"`) || !strings.Contains(f.logs.String(), "configuration problem") {
			t.Fatalf("no error-level configuration log:\n%s", f.logs.String())
		}
		if f.gate.Stats().LookupsMisconfigured != 10 {
			t.Fatalf("stats %+v", f.gate.Stats())
		}
	})
}

// TestKillSwitchKeepsFailClosed: with the circuits disabled, a failed
// lookup is still refused.
func TestKillSwitchKeepsFailClosed(t *testing.T) {
	f := newFixture(t, accessgate.Config{}, "alice")
	f.circuits.SetEnabled(false)
	f.acct.mode.Store("error")
	for range 10 {
		if err := f.gate.Check(context.Background(), "alice", "orders"); !errors.Is(err, accessgate.ErrUnavailable) {
			t.Fatalf("circuits off: got %v, want unavailable", err)
		}
	}
	if s := f.circuits.Get("account-access").State(); s != breaker.Disabled {
		t.Fatalf("circuit %s, want DISABLED", s)
	}
	if f.acct.calls.Load() != 10 {
		t.Fatal("a disabled circuit must let every lookup through")
	}
}

// TestAllowWhenUnavailable: the explicit opt-in lets a request through
// without a decision, counts it, and still never caches the failure.
func TestAllowWhenUnavailable(t *testing.T) {
	f := newFixture(t, accessgate.Config{WhenUnavailable: accessgate.AllowWhenUnavailable})
	f.acct.mode.Store("error")
	if err := f.gate.Check(context.Background(), "bob", "orders"); err != nil {
		t.Fatalf("got %v, want allowed", err)
	}
	f.acct.mode.Store("up")
	if err := f.gate.Check(context.Background(), "bob", "orders"); !errors.Is(err, accessgate.ErrDenied) {
		t.Fatalf("after recovery got %v, want the real denial", err)
	}
	if s := f.gate.Stats(); s.AllowedUnavailable != 1 || s.Unavailable != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestConcurrentColdMisses: 1,000 requests for one cold key make one
// upstream call.
func TestConcurrentColdMisses(t *testing.T) {
	f := newFixture(t, accessgate.Config{}, "alice")
	release := make(chan struct{})
	f.acct.gate = release
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for range 1000 {
		wg.Go(func() {
			if f.gate.Check(context.Background(), "alice", "orders") == nil {
				allowed.Add(1)
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.gate.Stats().CacheMisses < 1000 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if n := f.acct.calls.Load(); n != 1 {
		t.Fatalf("%d upstream calls for 1,000 concurrent cold requests, want 1", n)
	}
	if allowed.Load() != 1000 {
		t.Fatalf("%d of 1,000 allowed", allowed.Load())
	}
}

// TestCallerLeavingDoesNotFailOthers: the first caller's context ending
// does not cancel the shared lookup.
func TestCallerLeavingDoesNotFailOthers(t *testing.T) {
	f := newFixture(t, accessgate.Config{}, "alice")
	release := make(chan struct{})
	f.acct.gate = release
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- f.gate.Check(ctx, "alice", "orders") }()
	for f.acct.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() { second <- f.gate.Check(context.Background(), "alice", "orders") }()
	for f.gate.Stats().CacheMisses < 2 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-first; !errors.Is(err, accessgate.ErrUnavailable) {
		t.Fatalf("the caller that left got %v", err)
	}
	close(release)
	if err := <-second; err != nil {
		t.Fatalf("the caller that stayed got %v, want allowed", err)
	}
}

// TestLogsCarryNoSecrets: the internal secret (echoed by the failing
// service) and the subject in the lookup URL never reach the logs.
func TestLogsCarryNoSecrets(t *testing.T) {
	f := newFixture(t, accessgate.Config{}, "user-84731")
	ctx := context.Background()
	f.acct.mode.Store("error")
	_ = f.gate.Check(ctx, "user-84731", "orders")
	f.acct.mode.Store("hang")
	_ = f.gate.Check(ctx, "user-84731", "orders")
	f.acct.mode.Store("forbidden")
	_ = f.gate.Check(ctx, "user-84731", "orders")
	f.acct.srv.Close()
	_ = f.gate.Check(ctx, "user-84731", "orders")
	logs := f.logs.String()
	if strings.Count(logs, "\n") != 4 {
		t.Fatalf("want one line per kind of failure:\n%s", logs)
	}
	for _, s := range []string{secret, "user-84731", "subject=", "127.0.0.1"} {
		if strings.Contains(logs, s) {
			t.Errorf("logs contain %q:\n%s", s, logs)
		}
	}
	for _, kind := range []string{`"error":"status 500"`, `"error":"timeout"`, `"status":403`, `"error":"connection refused"`} {
		if !strings.Contains(logs, kind) {
			t.Errorf("logs lack %s:\n%s", kind, logs)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	lookup := accessgate.LookupFunc(func(context.Context, string, string) (bool, error) { return true, nil })
	for _, tc := range []struct {
		cfg  accessgate.Config
		want string
	}{
		{accessgate.Config{}, "Lookup"},
		{accessgate.Config{Lookup: lookup, AllowTTL: -time.Second}, "AllowTTL"},
		{accessgate.Config{Lookup: lookup, DenyTTL: -1}, "DenyTTL"},
		{accessgate.Config{Lookup: lookup, MaxEntries: -5}, "MaxEntries"},
		{accessgate.Config{Lookup: lookup, WhenUnavailable: 7}, "WhenUnavailable"},
	} {
		if _, err := accessgate.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

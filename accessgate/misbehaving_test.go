package accessgate_test

import (
	"bytes"
	"context"
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

	"github.com/tripswitch-dev/tripswitch/accessgate"
	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
)

// A permission service that is not down but wrong. Every test here runs
// real HTTP on 127.0.0.1 and the race detector in CI.

// target records what reaches it: a redirect's destination.
type target struct {
	srv      *httptest.Server
	requests atomic.Int64
	secret   atomic.Value // the secret header it received, if any
}

func newTarget(t *testing.T) *target {
	tg := &target{}
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.requests.Add(1)
		tg.secret.Store(r.Header.Get("X-Internal-Secret") + r.Header.Get("Authorization"))
		_, _ = io.WriteString(w, "true")
	}))
	t.Cleanup(tg.srv.Close)
	return tg
}

func unavailableMisconfigured(t *testing.T, err error, what string) {
	t.Helper()
	var ue *accessgate.UnavailableError
	if !errors.As(err, &ue) || !ue.Misconfigured {
		t.Fatalf("%s: got %v, want an UnavailableError marked Misconfigured", what, err)
	}
}

// A permission check never follows a redirect, with the client that the
// README recommends or one that follows redirects itself; the secret goes
// nowhere but the configured endpoint.
func TestRedirectsAreNeverFollowed(t *testing.T) {
	for _, code := range []int{301, 302, 303, 307, 308} {
		for _, clientKind := range []string{"policy", "following"} {
			t.Run(http.StatusText(code)+"/"+clientKind, func(t *testing.T) {
				tg := newTarget(t)
				// Another host name and port than the permission service.
				dest := strings.Replace(tg.srv.URL, "127.0.0.1", "localhost", 1) + "/elsewhere"
				perm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, dest, code)
				}))
				defer perm.Close()
				tr := http.DefaultTransport.(*http.Transport).Clone()
				defer tr.CloseIdleConnections()
				client := breakerhttp.Policy{Breaker: mustBreaker(t), Base: tr}.Client()
				if clientKind == "following" {
					client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}
				}
				var logs bytes.Buffer
				g, err := accessgate.New(accessgate.Config{
					Lookup: &accessgate.HTTPLookup{Client: client, Request: accessgate.Query(perm.URL, http.Header{
						"X-Internal-Secret": {secret}, "Authorization": {"Bearer " + secret}})},
					Logger: slog.New(slog.NewJSONHandler(&syncWriter{w: &logs}, nil)),
				})
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				unavailableMisconfigured(t, g.Check(context.Background(), "alice", "orders"), "a redirect")
				if n := tg.requests.Load(); n != 0 {
					t.Fatalf("the redirect target got %d requests (headers %q)", n, tg.secret.Load())
				}
				if !strings.Contains(logs.String(), `"level":"ERROR"`) || !strings.Contains(logs.String(), "configuration problem") {
					t.Fatalf("a redirect was not logged as a configuration problem: %s", logs.String())
				}
			})
		}
	}
}

// No two (subject, resource) pairs share a lookup or a cache entry,
// whatever bytes they hold.
func TestKeysNeverCollide(t *testing.T) {
	var calls atomic.Int64
	release := make(chan struct{})
	var inFlight sync.WaitGroup
	g, err := accessgate.New(accessgate.Config{Lookup: accessgate.LookupFunc(func(_ context.Context, s, r string) (bool, error) {
		inFlight.Add(1)
		defer inFlight.Done()
		calls.Add(1)
		<-release
		return s == "a\x00b" && r == "c", nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	results := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { results[0] = g.Check(context.Background(), "a\x00b", "c") })
	waitFor(t, "the first lookup", func() bool { return calls.Load() == 1 })
	wg.Go(func() { results[1] = g.Check(context.Background(), "a", "b\x00c") })
	waitFor(t, "a lookup of its own for the second pair", func() bool { return calls.Load() == 2 })
	close(release)
	wg.Wait()
	inFlight.Wait()
	if results[0] != nil || !errors.Is(results[1], accessgate.ErrDenied) {
		t.Fatalf("results %v; want allowed for (a\\x00b, c) and denied for (a, b\\x00c)", results)
	}
	if err := g.Check(context.Background(), "a", "b\x00c"); !errors.Is(err, accessgate.ErrDenied) {
		t.Fatalf("from the cache: %v, want denied", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20s", what)
		}
	}
}

// An empty subject is unauthenticated and an empty resource a programming
// error; neither is looked up or allowed, even on a fail-open gate whose
// service says yes to everything.
func TestEmptyIdentitiesAreNeverAllowed(t *testing.T) {
	var calls atomic.Int64
	g, err := accessgate.New(accessgate.Config{WhenUnavailable: accessgate.AllowWhenUnavailable,
		Lookup: accessgate.LookupFunc(func(context.Context, string, string) (bool, error) { calls.Add(1); return true, nil })})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Check(context.Background(), "", "orders"); !errors.Is(err, accessgate.ErrUnauthenticated) {
		t.Errorf("empty subject: %v, want ErrUnauthenticated", err)
	}
	if err := g.Check(context.Background(), "alice", ""); !errors.Is(err, accessgate.ErrNoResource) {
		t.Errorf("empty resource: %v, want ErrNoResource", err)
	}
	var ran atomic.Int64
	handler := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Add(1) })
	for _, c := range []struct {
		name     string
		resource string
		subject  accessgate.Subject
		want     int
	}{
		{"extractor says authenticated with an empty subject", "orders", func(*http.Request) (string, bool) { return "", true }, http.StatusUnauthorized},
		{"extractor says not authenticated but returns a subject", "orders", func(*http.Request) (string, bool) { return "alice", false }, http.StatusUnauthorized},
		{"empty resource", "", func(*http.Request) (string, bool) { return "alice", true }, http.StatusInternalServerError},
	} {
		srv := httptest.NewServer(g.Middleware(c.resource, c.subject)(handler))
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		srv.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	if ran.Load() != 0 || calls.Load() != 0 {
		t.Fatalf("handler ran %d times, service asked %d times; want neither", ran.Load(), calls.Load())
	}
}

// Only a clean answer decides. Everything else is a configuration problem:
// 503, logged, never cached.
func TestOnlyACleanAnswerDecides(t *testing.T) {
	pad := strings.Repeat(" ", 8<<10)
	long := strings.Repeat("x", accessgate.AnswerLimit)
	for body, want := range map[string]error{
		"true":                      nil,
		"false":                     accessgate.ErrDenied,
		"true\n":                    nil,
		" \ttrue\r\n":               nil,
		`{"allowed":true}`:          nil,
		`{"allowed": false}` + "\n": accessgate.ErrDenied,
		`{"reason":{"rules":[1,2]},"allowed":true}`:  nil,
		"true" + pad + "false":                       accessgate.ErrUnavailable,
		`{"allowed":true,"pad":"` + long + `"}`:      accessgate.ErrUnavailable,
		`{"ALLOWED":true}`:                           accessgate.ErrUnavailable,
		`{"Allowed":true}`:                           accessgate.ErrUnavailable,
		`{"allowed":false,"allowed":true}`:           accessgate.ErrUnavailable,
		`{"reason":"a","reason":"b","allowed":true}`: accessgate.ErrUnavailable,
		`"true"`:             accessgate.ErrUnavailable,
		`{"allowed":"true"}`: accessgate.ErrUnavailable,
		`{"allowed":1}`:      accessgate.ErrUnavailable,
		`{}`:                 accessgate.ErrUnavailable,
		`[true]`:             accessgate.ErrUnavailable,
		`null`:               accessgate.ErrUnavailable,
		"":                   accessgate.ErrUnavailable,
		"truex":              accessgate.ErrUnavailable,
		"<html><body>Service maintenance</body></html>": accessgate.ErrUnavailable,
		`{"allowed":true}<html>`:                        accessgate.ErrUnavailable,
	} {
		var calls atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			calls.Add(1)
			_, _ = io.WriteString(w, body)
		}))
		var logs bytes.Buffer
		g, err := accessgate.New(accessgate.Config{WhenUnavailable: accessgate.AllowWhenUnavailable,
			Lookup: &accessgate.HTTPLookup{Client: srv.Client(), Request: accessgate.Query(srv.URL, nil)},
			Logger: slog.New(slog.NewJSONHandler(&syncWriter{w: &logs}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		name := body
		if len(name) > 40 {
			name = name[:40] + "..."
		}
		for i := range 2 {
			err := g.Check(context.Background(), "alice", "orders")
			switch {
			case want == accessgate.ErrUnavailable:
				var ue *accessgate.UnavailableError
				if !errors.As(err, &ue) || !ue.Misconfigured {
					t.Errorf("%q (check %d): %v, want unavailable as a configuration problem, even on a fail-open gate", name, i, err)
				}
			case !errors.Is(err, want) && err != want:
				t.Errorf("%q: %v, want %v", name, err, want)
			}
		}
		if want == accessgate.ErrUnavailable {
			if calls.Load() != 2 {
				t.Errorf("%q: asked %d times for two checks; a bad answer must not be cached", name, calls.Load())
			}
			if !strings.Contains(logs.String(), `"level":"ERROR"`) {
				t.Errorf("%q: not logged at ERROR", name)
			}
		}
		g.Close()
		srv.Close()
	}
}

// stubborn is a Lookup that ignores its context: its first call waits for
// release, whatever the context says.
type stubborn struct {
	release chan struct{}
	calls   atomic.Int64
	exited  chan struct{} // one value per call that has returned
}

func (l *stubborn) Check(context.Context, string, string) (bool, error) {
	defer func() { l.exited <- struct{}{} }()
	if l.calls.Add(1) == 1 {
		<-l.release
	}
	return true, nil
}

// LookupTimeout bounds every wait, even for a Lookup that ignores its
// context; the late answer is neither used nor cached.
func TestLookupTimeoutBoundsEveryWait(t *testing.T) {
	l := &stubborn{release: make(chan struct{}), exited: make(chan struct{}, 2)}
	g, err := accessgate.New(accessgate.Config{LookupTimeout: 300 * time.Millisecond, Lookup: l})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	done := make(chan error, 1)
	go func() { done <- g.Check(context.Background(), "alice", "orders") }()
	select {
	case err := <-done:
		if !errors.Is(err, accessgate.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want unavailable after the lookup timeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Check waited for a lookup that ignores its context, far past LookupTimeout")
	}
	close(l.release) // the late answer: allow
	<-l.exited
	err = g.Check(context.Background(), "alice", "orders")
	<-l.exited
	if err != nil || l.calls.Load() != 2 {
		t.Fatalf("after the late answer: %v with %d lookups; want a fresh lookup (the late allow was not cached)", err, l.calls.Load())
	}
}

// A fail-open gate allows when the service is down, but not when it says
// our credentials or URL are wrong.
func TestFailOpenGateRefusesOnMisconfiguration(t *testing.T) {
	for code, wantAllowed := range map[int]bool{500: true, 503: true, 401: false, 403: false, 404: false, 302: false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if code == 302 {
				http.Redirect(w, r, "/moved", code)
				return
			}
			w.WriteHeader(code)
		}))
		g, err := accessgate.New(accessgate.Config{WhenUnavailable: accessgate.AllowWhenUnavailable,
			Lookup: &accessgate.HTTPLookup{Client: srv.Client(), Request: accessgate.Query(srv.URL, nil)},
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		err = g.Check(context.Background(), "alice", "orders")
		if wantAllowed && err != nil {
			t.Errorf("%d on a fail-open gate: %v, want allowed (the service is failing)", code, err)
		}
		if !wantAllowed {
			unavailableMisconfigured(t, err, http.StatusText(code)+" on a fail-open gate")
		}
		g.Close()
		srv.Close()
	}
}

func mustBreaker(t *testing.T) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New("account-access", breaker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

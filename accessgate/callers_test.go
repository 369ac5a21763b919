package accessgate_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tripswitch-dev/tripswitch/accessgate"
)

// slowDeny answers deny once released, after telling that it started.
type slowDeny struct {
	started, release chan struct{}
}

func (l *slowDeny) Check(ctx context.Context, _, _ string) (bool, error) {
	close(l.started)
	<-l.release
	return false, nil
}

// TestFailOpenGateRefusesACallerThatLeft: a client that disconnects while
// the service is still deciding (and would deny) is not "the service is
// unavailable": a fail-open gate must not run the handler for it.
func TestFailOpenGateRefusesACallerThatLeft(t *testing.T) {
	for _, cancelWith := range []error{nil, errors.New("client went away")} {
		l := &slowDeny{started: make(chan struct{}), release: make(chan struct{})}
		g, err := accessgate.New(accessgate.Config{WhenUnavailable: accessgate.AllowWhenUnavailable, Lookup: l, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		h := g.Middleware("orders", func(*http.Request) (string, bool) { return "mallory", true })(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
		ctx, cancel := context.WithCancelCause(context.Background())
		go func() { <-l.started; cancel(cancelWith) }()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/orders", nil))
		close(l.release)
		if ran {
			t.Errorf("cause %v: the handler ran for a caller that left", cancelWith)
		}
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("cause %v: status %d, want 503", cancelWith, rec.Code)
		}
		// The shared lookup finishes for the others and its deny is cached.
		for {
			if err := g.Check(context.Background(), "mallory", "orders"); errors.Is(err, accessgate.ErrDenied) {
				break
			}
		}
		g.Close()
	}
}

// TestAPanickingLookupIsA503: a bug in a custom Lookup answers 503 and is
// logged with its stack; it does not take the process down, and it is
// never allowed, even on a fail-open gate.
func TestAPanickingLookupIsA503(t *testing.T) {
	for _, when := range []accessgate.WhenUnavailable{accessgate.RejectWhenUnavailable, accessgate.AllowWhenUnavailable} {
		var logs bytes.Buffer
		g, err := accessgate.New(accessgate.Config{WhenUnavailable: when, Logger: slog.New(slog.NewJSONHandler(&syncWriter{w: &logs}, nil)),
			Lookup: accessgate.LookupFunc(func(context.Context, string, string) (bool, error) {
				var rights []bool
				return rights[3], nil // out of range: the bug
			})})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		h := g.Middleware("orders", func(*http.Request) (string, bool) { return "alice", true })(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/orders", nil))
		if ran || rec.Code != http.StatusServiceUnavailable {
			t.Errorf("when=%d: status %d, handler ran %v; want 503, not run", when, rec.Code, ran)
		}
		err = g.Check(context.Background(), "alice", "orders")
		var ue *accessgate.UnavailableError
		if !errors.As(err, &ue) || !ue.Misconfigured {
			t.Errorf("when=%d: err = %v, want a misconfigured UnavailableError", when, err)
		}
		if s := logs.String(); !strings.Contains(s, `"level":"ERROR"`) || !strings.Contains(s, "lookup panicked") || !strings.Contains(s, "goroutine") {
			t.Errorf("when=%d: logs %s, want an error line with the panic and its stack", when, s)
		}
		g.Close()
	}
}

package accessgate_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/accessgate"
)

// TestAnOpenCircuitIsLoggedAsATransitionAndSummaries: while the circuit is
// open every check is refused at once; the log says so once, then at most
// once per interval with a count, and once more when checks answer again,
// instead of one WARN line per refused request.
func TestAnOpenCircuitIsLoggedAsATransitionAndSummaries(t *testing.T) {
	f := newFixture(t, accessgate.Config{}, "alice")
	ctx := context.Background()
	f.circuits.Get("account-access").ForceOpen()
	for i := range 289 {
		_ = f.gate.Check(ctx, fmt.Sprintf("user-%d", i), "orders")
	}
	lines := strings.Split(strings.TrimSpace(f.logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"error":"circuit open"`) {
		t.Fatalf("289 refused checks wrote %d lines, want 1 (the circuit opening):\n%s", len(lines), f.logs.String())
	}
	f.clk.Advance(10 * time.Second)
	_ = f.gate.Check(ctx, "user-x", "orders")
	lines = strings.Split(strings.TrimSpace(f.logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"unlogged_failures":288`) {
		t.Fatalf("after the interval: %d lines, want a summary of 288 more:\n%s", len(lines), f.logs.String())
	}
	f.circuits.Get("account-access").Close()
	if err := f.gate.Check(ctx, "alice", "orders"); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(f.logs.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "answer again") || !strings.Contains(lines[2], `"level":"INFO"`) {
		t.Fatalf("after recovery: want one info line:\n%s", f.logs.String())
	}
}

// TestAnEmptyResourceIsLoggedOnce: a middleware guarding no resource
// refuses every request; it says so once, not once per request.
func TestAnEmptyResourceIsLoggedOnce(t *testing.T) {
	var logs bytes.Buffer
	g, err := accessgate.New(accessgate.Config{Logger: slog.New(slog.NewJSONHandler(&syncWriter{w: &logs}, nil)),
		Lookup: accessgate.LookupFunc(func(context.Context, string, string) (bool, error) { return true, nil })})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	h := g.Middleware("", func(*http.Request) (string, bool) { return "alice", true })(http.NotFoundHandler())
	for range 50 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != http.StatusInternalServerError {
			t.Fatalf("status %d, want 500", rec.Code)
		}
	}
	if n := strings.Count(logs.String(), "empty resource"); n != 1 {
		t.Fatalf("%d lines for 50 requests, want 1:\n%s", n, logs.String())
	}
}

package accessgate

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// logInterval is the most often a gate writes a line about failures of one
// kind while they go on; the first failure of a kind is written at once.
const logInterval = 10 * time.Second

// failureLog writes a gate's failed lookups as transitions and summaries,
// not one line per refused request: a line when the kind of failure changes
// (the first timeout, the circuit opening, a 403), then at most one line per
// logInterval with how many more failures it stood for, and one line when a
// lookup succeeds again. While a circuit is open every check fails fast;
// its log stays a few lines a minute whatever the request rate.
type failureLog struct {
	mu         sync.Mutex
	kind       string    // describe() of the failures now logged; "" while healthy
	last       time.Time // when the last line was written
	suppressed int       // failures since that line, not written
}

// failed records one failed lookup of the given kind and writes a line if
// it is a new kind or the interval has passed.
func (l *failureLog) failed(g *Checker, level slog.Level, msg, kind string, attrs ...any) {
	now := g.cfg.Clock.Now()
	l.mu.Lock()
	if kind == l.kind && now.Sub(l.last) < logInterval && now.Sub(l.last) >= 0 {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	prev, n, since := l.kind, l.suppressed, l.last
	l.kind, l.last, l.suppressed = kind, now, 0
	l.mu.Unlock()
	attrs = append([]any{"gate", g.cfg.Name}, attrs...)
	if n > 0 {
		attrs = append(attrs, "previous", prev, "unlogged_failures", n, "unlogged_since", since)
	}
	g.cfg.Logger.Log(context.Background(), level, msg, attrs...)
}

// succeeded records a lookup that answered, and writes one line if it ends
// a run of failures.
func (l *failureLog) succeeded(g *Checker) {
	l.mu.Lock()
	if l.kind == "" {
		l.mu.Unlock()
		return
	}
	prev, n := l.kind, l.suppressed
	l.kind, l.suppressed, l.last = "", 0, time.Time{}
	l.mu.Unlock()
	g.cfg.Logger.Info("accessgate: access checks answer again", "gate", g.cfg.Name, "previous", prev, "unlogged_failures", n)
}

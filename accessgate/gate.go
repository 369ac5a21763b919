// Package accessgate answers "may subject S use resource R?" from a
// permission service, and fails closed: when the answer is unknown (the
// lookup failed, timed out, or its circuit is open) the request is refused
// with "unavailable" (503), never allowed. An outage of the permission
// service must not become a permission bypass.
//
// Decisions are cached by (subject, resource): an allow for 60s and a deny
// for 10s by default; failures are never cached, so a recovered service is
// asked again at once and an outage is not stretched. Concurrent misses for
// one key share one lookup. The cache is bounded (otter, a W-TinyLFU cache
// with per-entry expiry).
//
// A gate whose failure default is "existing permissions stay" rather than
// "permissions wide open" (for example a gate that checks whether a
// token's permissions are still current, where the old permissions hold
// until the token expires) may opt into AllowWhenUnavailable; it is never
// the default, and it never covers a misconfiguration.
//
// The circuit breaker's kill switch (CIRCUITBREAKER_ENABLED=false) turns
// the circuits off, not this policy: a failed lookup is still refused.
package accessgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
	"golang.org/x/sync/singleflight"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// Lookup asks the permission service. A nil error with allowed false is a
// denial; any error means the answer is unknown.
type Lookup interface {
	Check(ctx context.Context, subject, resource string) (allowed bool, err error)
}

// LookupFunc adapts a function to Lookup.
type LookupFunc func(ctx context.Context, subject, resource string) (bool, error)

// Check calls f.
func (f LookupFunc) Check(ctx context.Context, subject, resource string) (bool, error) {
	return f(ctx, subject, resource)
}

// WhenUnavailable is what a gate does when it cannot get a decision.
type WhenUnavailable int

const (
	// RejectWhenUnavailable refuses the request (503). The default.
	RejectWhenUnavailable WhenUnavailable = iota
	// AllowWhenUnavailable lets the request through when the permission
	// service cannot be reached or fails: a timeout, a refused or broken
	// connection, a 5xx, an open circuit. Only for a gate whose failure
	// leaves existing permissions in place, never for the check that is a
	// request's authorization.
	//
	// It does not cover an answer that says the check itself is wrong: a
	// 3xx or 4xx (the service rejects our credentials or the URL moved) or
	// a 200 whose body is not a decision. Those are configuration problems
	// that no wait fixes; allowing on them would open the gate for good,
	// silently, from the first deploy. They are refused (503) and logged at
	// error level even on a fail-open gate. An empty subject or resource is
	// never allowed either, nor a caller whose own context ended before the
	// answer came (it gave up; the answer may be a deny), nor a lookup the
	// gate's own Limit rejected (the service was never asked).
	AllowWhenUnavailable
)

// Config configures a Checker.
type Config struct {
	// Name identifies the gate in logs and metrics. Default "access".
	Name string
	// Lookup asks the permission service. Required.
	Lookup Lookup
	// AllowTTL and DenyTTL are how long decisions are cached. Defaults
	// 60s and 10s.
	AllowTTL, DenyTTL time.Duration
	// MaxEntries bounds the cache. Default 100,000.
	MaxEntries int
	// Limit bounds the lookups in flight (of distinct pairs: checks of one
	// pair share a lookup), so that a slow permission service cannot pile
	// up permission checks, goroutines and connections. A lookup holds its
	// permit until the Lookup returns, past LookupTimeout if it ignores
	// its context. A lookup the limit rejects is unavailable (503), never
	// allowed, on an AllowWhenUnavailable gate too. Default: a
	// limit.Bulkhead of DefaultMaxLookups named after the gate, which
	// rejects at once; a limit.Adaptive follows the service's capacity
	// instead. Pass your own to export it (breakerprom.NewLimitCollector).
	Limit limit.Limiter
	// LookupTimeout bounds one shared lookup, whoever waits for it (the
	// lookup is not tied to the first caller's context, so that caller
	// leaving does not fail the others). Default 10s. Put the per-attempt
	// timeout that the circuit counts on the lookup's client.
	LookupTimeout time.Duration
	// WhenUnavailable: RejectWhenUnavailable (default) or AllowWhenUnavailable.
	WhenUnavailable WhenUnavailable
	// Logger receives the failed lookups, never tokens or bodies: a line
	// when the kind of failure changes (the first timeout, the circuit
	// opening, a 403), at most one more every 10s while it goes on, with
	// how many failures it stands for, and one when lookups answer again.
	// Default slog.Default().
	Logger *slog.Logger
	// Clock supplies time for the cache and Retry-After; default the system
	// clock. It is the breaker's clock interface, so one clock drives both.
	Clock breaker.Clock
}

// DefaultMaxLookups is the default Config.Limit: lookups in flight at once.
const DefaultMaxLookups = 100

// ErrDenied is the answer for a subject that may not use the resource.
var ErrDenied = errors.New("accessgate: access denied")

// ErrUnauthenticated is the answer for an empty subject: nobody is asked
// about, and nothing is allowed to, a request that names no one.
var ErrUnauthenticated = errors.New("accessgate: no subject: the request is not authenticated")

// ErrNoResource is the answer for an empty resource, a programming error
// in the caller: there is nothing to decide.
var ErrNoResource = errors.New("accessgate: no resource to check access to")

// ErrUnavailable is matched (errors.Is) by every *UnavailableError.
var ErrUnavailable = errors.New("accessgate: access decision unavailable")

// UnavailableError is the answer when the decision is unknown.
type UnavailableError struct {
	// Cause is the lookup's error.
	Cause error
	// RetryAfter is when asking again makes sense: the circuit's remaining
	// open wait, or one second.
	RetryAfter time.Duration
	// Misconfigured: the permission service rejected the check itself (a
	// 3xx or 4xx: a bad internal secret, a moved or wrong URL), answered
	// something that is not a decision, the request for the check could not
	// be built (see HTTPLookup), or the Lookup panicked (a bug):
	// no retry fixes it, and a fail-open gate refuses it too.
	Misconfigured bool
}

// Error names the kind of failure, never its text (see describe).
func (e *UnavailableError) Error() string {
	return fmt.Sprintf("accessgate: access decision unavailable: %s", describe(e.Cause))
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Cause }

type key struct{ subject, resource string }

// Checker is a permission check with a decision cache. Close it when done.
type Checker struct {
	cfg    Config
	cache  *otter.Cache[key, bool]
	flight singleflight.Group
	stats  stats
	log    failureLog
	// epoch counts invalidations: a lookup that began before one does not
	// cache its answer, which may predate the revocation.
	epoch atomic.Uint64
	// order keeps an older lookup's answer from replacing a newer one's.
	order lookupOrder
}

// Invalidate drops the cached decision for (subject, resource), so that
// the next check asks the permission service: call it when a permission is
// granted or revoked, instead of letting a revoked allow live its TTL. A
// lookup already in flight when it is called still answers the checks that
// were waiting for it, but does not cache that answer, and a check that
// comes after Invalidate does not join it.
func (g *Checker) Invalidate(subject, resource string) {
	g.epoch.Add(1)
	g.flight.Forget(flightKey(subject, resource))
	g.flight.Forget(freshKey(subject, resource))
	g.cache.Invalidate(key{subject, resource})
}

type freshCtxKey struct{}

// Fresh returns a context whose checks skip the decision cache: each one
// asks the permission service (sharing a lookup only with other fresh
// checks of the same pair that are in flight) and caches the answer for the
// checks that follow. Use it for the requests that must see a revocation at
// once (changing a password, deleting an account, an administrator's
// action); the Middleware reads it from the request's context. A fresh
// check that cannot be answered is unavailable as any other. Of two answers
// for one pair, the cache keeps the one whose lookup began last: a normal
// lookup that began before a fresh one and answers after it does not
// replace the fresh answer.
func Fresh(ctx context.Context) context.Context {
	return context.WithValue(ctx, freshCtxKey{}, true)
}

func fresh(ctx context.Context) bool {
	v, _ := ctx.Value(freshCtxKey{}).(bool)
	return v
}

// freshKey names the shared lookup of fresh checks of one pair.
func freshKey(subject, resource string) string { return "fresh:" + flightKey(subject, resource) }

type stats struct {
	hits, misses                                  atomic.Uint64
	allowed, denied, unavailable, allowedFailOpen atomic.Uint64
	lookupAllowed, lookupDenied, lookupFailed     atomic.Uint64
	lookupMisconfigured                           atomic.Uint64
}

// New returns a gate, or an error naming the invalid field.
func New(cfg Config) (*Checker, error) {
	if cfg.Lookup == nil {
		return nil, errors.New("accessgate: Config.Lookup is required")
	}
	if l, ok := cfg.Lookup.(*HTTPLookup); ok {
		if err := l.validate(); err != nil {
			return nil, fmt.Errorf("accessgate: Config.Lookup: %w", err)
		}
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"AllowTTL", &cfg.AllowTTL, 60 * time.Second}, {"DenyTTL", &cfg.DenyTTL, 10 * time.Second}, {"LookupTimeout", &cfg.LookupTimeout, 10 * time.Second}} {
		if *d.v < 0 {
			return nil, fmt.Errorf("accessgate: Config.%s=%v must not be negative", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.MaxEntries < 0 || cfg.MaxEntries > math.MaxInt32 {
		return nil, fmt.Errorf("accessgate: Config.MaxEntries=%d must be in [1, %d]", cfg.MaxEntries, math.MaxInt32)
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 100_000
	}
	if cfg.WhenUnavailable != RejectWhenUnavailable && cfg.WhenUnavailable != AllowWhenUnavailable {
		return nil, fmt.Errorf("accessgate: Config.WhenUnavailable=%d is not RejectWhenUnavailable or AllowWhenUnavailable", cfg.WhenUnavailable)
	}
	if cfg.Name == "" {
		cfg.Name = "access"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Limit == nil {
		l, err := limit.NewBulkhead(cfg.Name+"-lookups", limit.BulkheadConfig{MaxConcurrentCalls: DefaultMaxLookups})
		if err != nil {
			return nil, fmt.Errorf("accessgate: Config.Limit: %w", err)
		}
		cfg.Limit = l
	}
	allowTTL, denyTTL := cfg.AllowTTL, cfg.DenyTTL
	opts := &otter.Options[key, bool]{
		MaximumSize: cfg.MaxEntries,
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[key, bool]) time.Duration {
			if e.Value {
				return allowTTL
			}
			return denyTTL
		}),
	}
	if cfg.Clock != nil {
		opts.Clock = otterClock{cfg.Clock}
	} else {
		cfg.Clock = systemClock{}
	}

	cache, err := otter.New(opts)
	if err != nil {
		return nil, fmt.Errorf("accessgate: decision cache: %w", err)
	}
	return &Checker{cfg: cfg, cache: cache}, nil
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// otterClock drives the cache's expiry from an injected clock, without the
// periodic clean-up (expired entries are still never returned).
type otterClock struct{ c breaker.Clock }

func (o otterClock) NowNano() int64                      { return o.c.Now().UnixNano() }
func (o otterClock) Tick(time.Duration) <-chan time.Time { return nil }

// Close stops the cache's background work.
func (g *Checker) Close() { g.cache.StopAllGoroutines() }

// Check returns nil if subject may use resource, ErrDenied if not, and an
// *UnavailableError (errors.Is ErrUnavailable) if the decision is unknown,
// unless the gate was configured AllowWhenUnavailable and the service is
// unreachable or failing (see AllowWhenUnavailable). An empty subject is
// ErrUnauthenticated and an empty resource ErrNoResource; neither is looked
// up or allowed. No wait is longer than Config.LookupTimeout. A cache hit
// allocates nothing.
func (g *Checker) Check(ctx context.Context, subject, resource string) error {
	switch {
	case subject == "":
		return ErrUnauthenticated
	case resource == "":
		return ErrNoResource
	}
	k := key{subject, resource}
	skip := fresh(ctx)
	if !skip {
		if allowed, ok := g.cache.GetIfPresent(k); ok {
			g.stats.hits.Add(1)
			return g.decided(allowed)
		}
	}
	g.stats.misses.Add(1)
	fk := flightKey(subject, resource)
	if skip {
		fk = freshKey(subject, resource)
	}
	ch := g.flight.DoChan(fk, func() (any, error) { return g.lookup(k, skip) })
	select {
	case r := <-ch:
		if r.Err != nil {
			return g.unavailable(ctx, r.Err)
		}
		return g.decided(r.Val.(bool))
	case <-ctx.Done():
		// This caller left; the shared lookup goes on for the others.
		return g.unavailable(ctx, ctx.Err())
	}
}

// flightKey names one (subject, resource) pair for the shared lookups. The
// subject's length comes first, so no two pairs share a key whatever bytes
// they hold ("a\x00b"+"c" and "a"+"b\x00c" differ in it).
func flightKey(subject, resource string) string {
	return strconv.Itoa(len(subject)) + ":" + subject + resource
}

func (g *Checker) decided(allowed bool) error {
	if allowed {
		g.stats.allowed.Add(1)
		return nil
	}
	g.stats.denied.Add(1)
	return ErrDenied
}

// lookup asks the permission service once for every caller waiting on k
// and caches the decision; a failure is returned and not cached.
func (g *Checker) lookup(k key, fresh bool) (bool, error) {
	// A caller that missed just as the previous lookup for k finished
	// starts a new flight; the decision is already here.
	if allowed, ok := g.cache.GetIfPresent(k); ok && !fresh {
		return allowed, nil
	}
	epoch := g.epoch.Load()
	seq := g.order.begin(k)
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.LookupTimeout)
	defer cancel()
	allowed, err := g.bounded(ctx, k)
	g.order.end(k, seq, err == nil, func() { g.store(k, allowed, epoch) })
	if err != nil {
		var pe *panicError
		if errors.As(err, &pe) {
			g.stats.lookupMisconfigured.Add(1)
			g.log.failed(g, slog.LevelError, "accessgate: the lookup panicked; the check is refused (503). This is a bug in the Lookup",
				describe(err), "resource", k.resource, "error", describe(err), "panic", pe.describe(), "stack", pe.stack)
			return false, err
		}
		if misconfigured(err) {
			g.stats.lookupMisconfigured.Add(1)
			attrs := []any{"resource", k.resource, "error", describe(err)}
			if se := (*StatusError)(nil); errors.As(err, &se) {
				attrs = append(attrs, "status", se.Code)
			}
			g.log.failed(g, slog.LevelError, "accessgate: the permission service rejected the check or answered something that is not a decision; this is a configuration problem (credentials, URL, response format), not a denial", describe(err), attrs...)
		} else {
			g.stats.lookupFailed.Add(1)
			g.log.failed(g, slog.LevelWarn, "accessgate: access check unavailable", describe(err), "resource", k.resource, "error", describe(err))
		}
		return false, err
	}
	g.log.succeeded(g)
	if allowed {
		g.stats.lookupAllowed.Add(1)
	} else {
		g.stats.lookupDenied.Add(1)
	}
	return allowed, nil
}

// store caches a lookup's answer unless an Invalidate came since the lookup
// began (epoch): that answer may predate the revocation.
func (g *Checker) store(k key, allowed bool, epoch uint64) {
	if g.epoch.Load() == epoch {
		g.cache.Set(k, allowed)
		if g.epoch.Load() != epoch {
			// An Invalidate came between the check and the Set: it may
			// have run before the Set, so undo it.
			g.cache.Invalidate(k)
		}
	}
}

// bounded runs the lookup under the gate's limit and gives up when ctx
// ends, even if the Lookup ignores its context: the late answer is dropped,
// never used or cached. (Such a Lookup keeps its goroutine, and its permit,
// until it returns.)
func (g *Checker) bounded(ctx context.Context, k key) (bool, error) {
	type answer struct {
		allowed bool
		err     error
	}
	pm, err := g.cfg.Limit.Acquire(ctx)
	if err != nil {
		return false, err
	}
	done := make(chan answer, 1)
	go func() {
		defer pm.Release() // when the Lookup returns, however late
		// A panic here would end the process: no caller's recover reaches
		// this goroutine. It is a failed check instead.
		defer func() {
			if v := recover(); v != nil {
				done <- answer{false, &panicError{value: v, stack: string(debug.Stack())}}
			}
		}()
		allowed, err := g.cfg.Lookup.Check(ctx, k.subject, k.resource)
		done <- answer{allowed, err}
	}()
	select {
	case a := <-done:
		if a.err == nil && ctx.Err() != nil {
			return false, ctx.Err() // answered, but past the timeout
		}
		return a.allowed, a.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// misconfigured reports whether err says the check itself is wrong rather
// than the service unreachable: a 3xx or 4xx, or an answer that is not a
// decision.
func misconfigured(err error) bool {
	var se *StatusError
	return errors.Is(err, errBadAnswer) || errors.Is(err, errLookupPanicked) || errors.Is(err, errBadRequest) ||
		(errors.As(err, &se) && se.Code >= 300 && se.Code < 500)
}

// errLookupPanicked is matched by the error of a Lookup that panicked.
var errLookupPanicked = errors.New("accessgate: the lookup panicked")

// panicError is a Lookup's panic, recovered on the lookup's goroutine.
type panicError struct {
	value any
	stack string
}

func (e *panicError) Error() string        { return errLookupPanicked.Error() }
func (e *panicError) Is(target error) bool { return target == errLookupPanicked }

// describe names the panic for the log: a runtime error's text (a nil map,
// an index out of range) carries no data, any other value only its type.
func (e *panicError) describe() string {
	if re, ok := e.value.(runtime.Error); ok {
		return re.Error()
	}
	return fmt.Sprintf("panic(%T)", e.value)
}

// unavailable answers a check whose decision is unknown. A fail-open gate
// allows only when the service could not answer: never on a
// misconfiguration, never for a caller whose own context ended (it gave
// up, or ran out of its time; the service may be about to deny), and never
// on the gate's own limit (the service was not asked; a flood of distinct
// pairs filling the limit must not open the gate).
func (g *Checker) unavailable(ctx context.Context, cause error) error {
	if g.cfg.WhenUnavailable == AllowWhenUnavailable && !misconfigured(cause) && !errors.Is(cause, limit.ErrLimited) && ctx.Err() == nil {
		g.stats.allowedFailOpen.Add(1)
		return nil
	}
	g.stats.unavailable.Add(1)
	e := &UnavailableError{Cause: cause, RetryAfter: time.Second}
	var oe *breaker.OpenError
	if errors.As(cause, &oe) {
		if d := oe.RetryAfter(g.cfg.Clock.Now()); d > e.RetryAfter {
			e.RetryAfter = d
		}
	}
	e.Misconfigured = misconfigured(cause)
	return e
}

// describe names an error's kind without its text, which may carry a URL
// with identifiers or a server's echo of a credential.
func describe(err error) string {
	var se *StatusError
	var ne net.Error
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, breaker.ErrOpen):
		return "circuit open"
	case errors.Is(err, limit.ErrLimited):
		return "lookups limited"
	case errors.Is(err, errLookupPanicked):
		return "lookup panicked"
	case errors.Is(err, errBadRequest):
		return "request cannot be built"
	case errors.As(err, &se):
		return fmt.Sprintf("status %d", se.Code)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case breakerhttp.Refused(err):
		return "connection refused"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &ne):
		return "network error"
	case errors.Is(err, errBadAnswer):
		return "unreadable answer"
	}
	return "unclassified error" // a Lookup's own error: its text may carry identifiers
}

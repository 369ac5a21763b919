package accessgate_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/tripswitch-dev/tripswitch/accessgate"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// blockingLookup holds every lookup until released, and says when one
// started.
func blockingLookup() (accessgate.LookupFunc, chan struct{}, func()) {
	started, release := make(chan struct{}, 200), make(chan struct{})
	var once sync.Once
	return func(ctx context.Context, s, r string) (bool, error) {
		started <- struct{}{}
		<-release
		return true, nil
	}, started, func() { once.Do(func() { close(release) }) }
}

// TestARejectedLookupIsUnavailableNeverAllowed: with the lookups in flight
// at the gate's limit, a check that needs another is refused at once as
// unavailable (503 through the middleware) and the service is not asked,
// on a fail-open gate too; the permits come back when the lookups return.
func TestARejectedLookupIsUnavailableNeverAllowed(t *testing.T) {
	for _, when := range []accessgate.WhenUnavailable{accessgate.RejectWhenUnavailable, accessgate.AllowWhenUnavailable} {
		lookup, started, release := blockingLookup()
		l, err := limit.NewBulkhead("access-lookups", limit.BulkheadConfig{MaxConcurrentCalls: 1})
		if err != nil {
			t.Fatal(err)
		}
		l.EnableRejectionCount()
		g, err := accessgate.New(accessgate.Config{Lookup: lookup, Limit: l, WhenUnavailable: when, Clock: newClock(), Logger: discard()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		t.Cleanup(release)
		first := make(chan error, 1)
		go func() { first <- g.Check(context.Background(), "alice", "orders") }()
		<-started
		err = g.Check(context.Background(), "bob", "orders")
		if !errors.Is(err, accessgate.ErrUnavailable) || !errors.Is(err, limit.ErrLimited) {
			t.Fatalf("gate %d: %v, want unavailable because the lookups are limited", when, err)
		}
		rec := httptest.NewRecorder()
		g.Middleware("orders", func(*http.Request) (string, bool) { return "carol", true })(
			http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("the protected handler ran") }),
		).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("gate %d: middleware answered %d, want 503", when, rec.Code)
		}
		release()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if m := l.Metrics(); m.InFlight != 0 || m.Rejected != 2 {
			t.Fatalf("gate %d: limit %+v, want both rejections counted and the permit back", when, m)
		}
	}
}

// TestLookupsAreBoundedByDefault: without a Limit, DefaultMaxLookups
// lookups of distinct pairs may be in flight and the next is unavailable.
func TestLookupsAreBoundedByDefault(t *testing.T) {
	lookup, started, release := blockingLookup()
	g, err := accessgate.New(accessgate.Config{Lookup: lookup, Clock: newClock(), Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	var wg sync.WaitGroup
	for i := range accessgate.DefaultMaxLookups {
		wg.Go(func() { _ = g.Check(context.Background(), fmt.Sprint("user-", i), "orders") })
		<-started
	}
	err = g.Check(context.Background(), "one-too-many", "orders")
	release()
	wg.Wait()
	if !errors.Is(err, limit.ErrLimited) {
		t.Fatalf("lookup %d: %v, want limited", accessgate.DefaultMaxLookups+1, err)
	}
}

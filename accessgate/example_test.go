package accessgate_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/tripswitch-dev/tripswitch/accessgate"
	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
)

// A service protects its API with a gate that asks the account service
// through the account-access circuit. When account fails, a user without a
// cached decision gets 503 SERVICE_ACCESS_UNAVAILABLE, never access.
func ExampleChecker_Middleware() {
	var down atomic.Bool
	account := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		fmt.Fprint(w, r.URL.Query().Get("subject") == "alice")
	}))
	defer account.Close()

	circuits, _ := breaker.NewRegistry(breaker.Config{}, nil)
	client := breakerhttp.Policy{Breaker: circuits.Get("account-access"), Timeout: 10 * time.Second}.Client()
	gate, _ := accessgate.New(accessgate.Config{
		Lookup: &accessgate.HTTPLookup{Client: client, Request: accessgate.Query(account.URL+"/internal/access", nil)},
		Logger: discard(),
	})
	defer gate.Close()

	orders := gate.Middleware("orders", func(r *http.Request) (string, bool) {
		u := r.Header.Get("X-User") // in a real service: the authenticated principal
		return u, u != ""
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "orders of ", r.Header.Get("X-User")) }))

	get := func(user string) {
		req := httptest.NewRequest(http.MethodGet, "/orders", nil)
		req.Header.Set("X-User", user)
		rec := httptest.NewRecorder()
		orders.ServeHTTP(rec, req)
		body, _ := io.ReadAll(rec.Body)
		fmt.Printf("%s: %d %s", user, rec.Code, body)
		if rec.Code == 200 {
			fmt.Println()
		}
	}
	get("alice")
	get("bob")
	down.Store(true)
	get("alice") // cached allow
	get("carol") // unknown: refused
	// Output:
	// alice: 200 orders of alice
	// bob: 403 {"code":"SERVICE_ACCESS_DENIED","message":"you do not have access to orders"}
	// alice: 200 orders of alice
	// carol: 503 {"code":"SERVICE_ACCESS_UNAVAILABLE","message":"access to orders cannot be checked right now; retry later"}
}

// When a permission is revoked, Invalidate drops the cached allow so the
// next check asks again; a request that must see a revocation at once
// checks on a Fresh context and skips the cache.
func ExampleChecker_Invalidate() {
	var revoked atomic.Bool
	lookup := accessgate.LookupFunc(func(_ context.Context, subject, resource string) (bool, error) {
		return subject == "alice" && !revoked.Load(), nil
	})
	g, _ := accessgate.New(accessgate.Config{Lookup: lookup})
	defer g.Close()
	ctx := context.Background()

	fmt.Println(g.Check(ctx, "alice", "orders")) // asked, allow cached for 60s
	revoked.Store(true)
	fmt.Println(g.Check(ctx, "alice", "orders")) // the cached allow
	fmt.Println(g.Check(accessgate.Fresh(ctx), "alice", "orders"))

	revoked.Store(false)
	g.Invalidate("alice", "orders") // granted again: drop the cached deny
	fmt.Println(g.Check(ctx, "alice", "orders"))
	// Output:
	// <nil>
	// <nil>
	// accessgate: access denied
	// <nil>
}

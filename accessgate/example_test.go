package accessgate_test

import (
	"context"
	"errors"
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

// New with a Lookup of your own (here a function; HTTPLookup asks a
// permission service over HTTP). Check answers nil, ErrDenied, or an error
// that matches ErrUnavailable: the gate fails closed, and the error says
// when asking again makes sense.
func ExampleNew() {
	var down atomic.Bool
	gate, err := accessgate.New(accessgate.Config{
		Name: "orders",
		Lookup: accessgate.LookupFunc(func(_ context.Context, subject, resource string) (bool, error) {
			if down.Load() {
				return false, errors.New("permission service: connection refused")
			}
			return subject == "alice", nil
		}),
		Logger: discard(),
	})
	if err != nil {
		panic(err)
	}
	defer gate.Close()
	ctx := context.Background()
	fmt.Println(gate.Check(ctx, "alice", "orders"))
	fmt.Println(gate.Check(ctx, "bob", "orders"))
	down.Store(true)
	err = gate.Check(ctx, "carol", "orders")
	var ue *accessgate.UnavailableError
	fmt.Println(errors.Is(err, accessgate.ErrUnavailable), errors.As(err, &ue) && ue.RetryAfter > 0)
	// Output:
	// <nil>
	// accessgate: access denied
	// true true
}

// HTTPLookup asks a permission service; Query builds GET
// base?subject=S&resource=R with a header of yours. Only an exact decision
// decides: a 200 that is not `true`, `false` or {"allowed": bool} (here an
// HTML error page) is a misconfiguration, refused even by a fail-open gate.
func ExampleHTTPLookup() {
	account := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Internal-Secret") != "s3cret" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		switch r.URL.Query().Get("subject") {
		case "alice":
			fmt.Fprint(w, `{"allowed": true}`)
		case "bob":
			fmt.Fprint(w, `{"allowed": false}`)
		default:
			fmt.Fprint(w, "<html>maintenance</html>")
		}
	}))
	defer account.Close()

	b, _ := breaker.New("account-access", breaker.Config{})
	client := breakerhttp.Policy{Breaker: b, Timeout: 10 * time.Second}.Client()
	secret := http.Header{"X-Internal-Secret": {"s3cret"}}
	gate, _ := accessgate.New(accessgate.Config{
		Lookup:          &accessgate.HTTPLookup{Client: client, Request: accessgate.Query(account.URL+"/internal/access", secret)},
		WhenUnavailable: accessgate.AllowWhenUnavailable,
		Logger:          discard(),
	})
	defer gate.Close()
	ctx := context.Background()
	for _, user := range []string{"alice", "bob", "mallory"} {
		err := gate.Check(ctx, user, "orders")
		var ue *accessgate.UnavailableError
		fmt.Println(user, err == nil, errors.Is(err, accessgate.ErrDenied), errors.As(err, &ue) && ue.Misconfigured)
	}
	// Output:
	// alice true false false
	// bob false true false
	// mallory false false true
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tripswitch-dev/tripswitch/accessgate"
	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
)

// internalSecret authenticates the orders service to the account service.
const internalSecret = "orders-to-account-secret"

// Account is the permission service: GET /internal/access?subject=S&resource=R
// answers {"allowed": bool}. Down makes it hang, as a service that is
// restarting or overloaded does, until Up.
type Account struct {
	Calls atomic.Int64

	mu      sync.Mutex
	grants  map[string]bool // subject/resource
	down    bool
	release chan struct{}
}

// NewAccount grants each "subject/resource" listed.
func NewAccount(grants ...string) *Account {
	a := &Account{grants: map[string]bool{}, release: make(chan struct{})}
	for _, g := range grants {
		a.grants[g] = true
	}
	return a
}

// Down makes every request hang until Up.
func (a *Account) Down() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.down = true
}

// Up answers again, and releases the requests that hang.
func (a *Account) Up() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down {
		a.down = false
		close(a.release)
		a.release = make(chan struct{})
	}
}

// ServeHTTP answers a permission check.
func (a *Account) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.Calls.Add(1)
	if r.Header.Get("X-Internal-Secret") != internalSecret {
		http.Error(w, "bad internal secret", http.StatusUnauthorized)
		return
	}
	a.mu.Lock()
	down, release := a.down, a.release
	allowed := a.grants[r.URL.Query().Get("subject")+"/"+r.URL.Query().Get("resource")]
	a.mu.Unlock()
	if down {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]bool{"allowed": allowed})
}

// Orders is the API service: GET /orders for the user in X-User (standing
// in for authentication), behind the gate.
type Orders struct {
	Circuits *breaker.Registry
	Checker  *accessgate.Checker
	Handler  http.Handler
	Served   atomic.Int64 // requests that reached the orders handler
	base     *http.Transport
}

// OrdersConfig is what the walkthrough varies.
type OrdersConfig struct {
	AccountURL string
	// Timeout is the per-call timeout of the permission check, inside the
	// account-access circuit (10s in production settings).
	Timeout time.Duration
	// OpenWait is the circuit's open wait; default 15s.
	OpenWait time.Duration
	// Clock, if set, replaces the system clock (breaker.Clock).
	Clock breaker.Clock
	// Logger receives the gate's lines; default slog.Default().
	Logger *slog.Logger
}

// NewOrders wires the orders service: the account-access
// circuit (TIME_BASED 30s window, 10 calls minimum, 50%, 15s open, 3 trial
// calls), timeout inside it, no retry, and a fail-closed gate with a 60s
// allow / 10s deny cache.
func NewOrders(cfg OrdersConfig) (*Orders, error) {
	if cfg.OpenWait <= 0 {
		cfg.OpenWait = 15 * time.Second
	}
	circuits, err := breaker.NewRegistry(breaker.Config{
		WindowType: breaker.TimeBased, WindowSize: 30, MinimumNumberOfCalls: 10, FailureRateThreshold: 50,
		WaitDurationInOpenState: cfg.OpenWait, PermittedNumberOfCallsInHalfOpenState: 3,
		MaxWaitDurationInHalfOpenState: time.Minute, Clock: cfg.Clock,
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("circuits: %w", err)
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	client := breakerhttp.Policy{Breaker: circuits.Get("account-access"), Timeout: cfg.Timeout, Base: base}.Client()
	gate, err := accessgate.New(accessgate.Config{
		Name:   "orders",
		Lookup: &accessgate.HTTPLookup{Client: client, Request: accessgate.Query(cfg.AccountURL+"/internal/access", http.Header{"X-Internal-Secret": {internalSecret}})},
		Clock:  cfg.Clock,
		Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	o := &Orders{Circuits: circuits, Checker: gate, base: base}
	o.Handler = gate.Middleware("orders", func(r *http.Request) (string, bool) {
		u := r.Header.Get("X-User")
		return u, u != ""
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.Served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"orders":[],"user":%q}`+"\n", r.Header.Get("X-User"))
	}))
	return o, nil
}

// Close releases the gate and idle connections.
func (o *Orders) Close() {
	o.Checker.Close()
	o.base.CloseIdleConnections()
}

// serve starts h on 127.0.0.1 and returns its URL and a stop function.
func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

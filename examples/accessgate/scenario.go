package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker/manualclock"
)

// Row is one step of the outage table.
type Row struct {
	At        time.Duration // simulated time since the start
	Users     string
	Situation string
	Status    int
	Code      string
	Took      time.Duration // real time of the slowest request of the row
	Asked     int64         // requests that reached the account service
	Circuit   string        // account-access after the step
}

// Scenario is seed 002's outage table, replayed on real HTTP servers.
type Scenario struct {
	Timeout time.Duration // per-call timeout of the permission check
	Logger  *slog.Logger  // the gate's log; default slog.Default()
}

// Run plays the story and returns its rows.
func (s Scenario) Run() ([]Row, error) {
	account := NewAccount("alice/orders", "carol/orders", "erin/orders", "frank/orders", "grace/orders")
	accountURL, stopAccount, err := serve(account)
	if err != nil {
		return nil, err
	}
	defer stopAccount()
	// The decision cache and the circuit's open wait run on a simulated
	// clock, so the story takes a second, not minutes; the per-call timeout
	// and all HTTP are real.
	clk := manualclock.New(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	start := clk.Now()
	orders, err := NewOrders(OrdersConfig{AccountURL: accountURL, Timeout: s.Timeout, Clock: clk, Logger: s.Logger})
	if err != nil {
		return nil, err
	}
	defer orders.Close()
	ordersURL, stopOrders, err := serve(orders.Handler)
	if err != nil {
		return nil, err
	}
	defer stopOrders()
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	defer client.CloseIdleConnections()

	var rows []Row
	step := func(situation string, users ...string) error {
		before := account.Calls.Load()
		type result struct {
			status int
			code   string
			took   time.Duration
			err    error
		}
		results := make([]result, len(users))
		var wg sync.WaitGroup
		for i, u := range users {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodGet, ordersURL+"/orders", nil)
				req.Header.Set("X-User", u)
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					results[i].err = err
					return
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				var b struct{ Code string }
				_ = json.Unmarshal(body, &b)
				results[i] = result{status: resp.StatusCode, code: b.Code, took: time.Since(t0)}
			})
		}
		wg.Wait()
		r := Row{At: clk.Now().Sub(start), Situation: situation, Asked: account.Calls.Load() - before,
			Circuit: orders.Circuits.Get("account-access").State().String()}
		for i, res := range results {
			if res.err != nil {
				return fmt.Errorf("%s: %w", users[i], res.err)
			}
			if i > 0 && (res.status != results[0].status || res.code != results[0].code) {
				return fmt.Errorf("%s: users of one step answered differently: %d %s vs %d %s", situation, res.status, res.code, results[0].status, results[0].code)
			}
			r.Took = max(r.Took, res.took)
		}
		r.Status, r.Code = results[0].status, results[0].code
		r.Users = users[0]
		if len(users) > 1 {
			r.Users = fmt.Sprintf("%s +%d", users[0], len(users)-1)
		}
		rows = append(rows, r)
		return nil
	}

	steps := []func() error{
		func() error { return step("before the outage: allowed, cached 60s", "alice") },
		func() error { return step("before the outage: denied, cached 10s", "bob") },
		func() error { account.Down(); clk.Advance(5 * time.Second); return nil },
		func() error { return step("outage: allow decided in the last 60s", "alice") },
		func() error { return step("outage: inside the 10s deny cache", "bob") },
		func() error { return step("outage, cache miss, circuit CLOSED: waits for the timeout", "carol") },
		func() error {
			return step("outage, cache misses: the 10th failure opens the circuit",
				"u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8", "u9")
		},
		func() error { return step("outage, cache miss, circuit OPEN: refused at once", "dave") },
		func() error { account.Up(); clk.Advance(15 * time.Second); return nil },
		func() error {
			return step("recovered, 15s later: HALF_OPEN trial calls succeed", "erin", "frank", "grace")
		},
		func() error { return step("after recovery: decided and cached again", "carol") },
	}
	for _, f := range steps {
		if err := f(); err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// Print writes rows as a Markdown table.
func Print(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| t | user | situation | answer | took | asked account | account-access |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rows {
		answer := fmt.Sprint(r.Status)
		if r.Code != "" {
			answer += " " + r.Code
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d | %s |\n", r.At, r.Users, r.Situation, answer, r.Took.Round(100*time.Microsecond), r.Asked, r.Circuit)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Row is one step of the outage table.
type Row struct {
	At        time.Duration // time since the start, when the step began
	Users     string
	Situation string
	Status    int
	Code      string
	Took      time.Duration // real time of the slowest request of the row
	Asked     int64         // requests that reached the account service
	Circuit   string        // account-access after the step
}

// Scenario is the outage table, replayed on real HTTP servers on the system
// clock: every wait in it (the per-call timeout, the decision cache, the
// circuit's open wait) is the real one.
type Scenario struct {
	Timeout  time.Duration // per-call timeout of the permission check
	OpenWait time.Duration // the circuit's open wait; default 15s
	Pause    time.Duration // how long account is down before the first miss; default 5s
	Logger   *slog.Logger  // the gate's log; default slog.Default()
}

// Run plays the story and returns its rows.
func (s Scenario) Run() ([]Row, error) {
	account := NewAccount("alice/orders", "carol/orders", "erin/orders", "frank/orders", "grace/orders")
	accountURL, stopAccount, err := serve(account)
	if err != nil {
		return nil, err
	}
	defer stopAccount()
	if s.OpenWait <= 0 {
		s.OpenWait = 15 * time.Second
	}
	if s.Pause <= 0 {
		s.Pause = 5 * time.Second
	}
	start := time.Now()
	orders, err := NewOrders(OrdersConfig{AccountURL: accountURL, Timeout: s.Timeout, OpenWait: s.OpenWait, Logger: s.Logger})
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

	type result struct {
		status int
		code   string
		took   time.Duration
		err    error
	}
	get := func(user string) result {
		req, _ := http.NewRequest(http.MethodGet, ordersURL+"/orders", nil)
		req.Header.Set("X-User", user)
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return result{err: err}
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var b struct{ Code string }
		_ = json.Unmarshal(body, &b)
		return result{status: resp.StatusCode, code: b.Code, took: time.Since(t0)}
	}
	circuit := orders.Circuits.Get("account-access")
	var rows []Row
	record := func(situation string, began time.Time, asked int64, users []string, results []result) error {
		r := Row{At: began.Sub(start), Situation: situation, Asked: asked, Circuit: circuit.State().String()}
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
	step := func(situation string, users ...string) error {
		before, began := account.Calls.Load(), time.Now()
		results := make([]result, len(users))
		var wg sync.WaitGroup
		for i, u := range users {
			wg.Go(func() { results[i] = get(u) })
		}
		wg.Wait()
		return record(situation, began, account.Calls.Load()-before, users, results)
	}
	// untilAdmitted retries one user every 50 ms while the gate answers
	// 503, as a client does, and records the first other answer; Took is
	// how long after the first try it came.
	untilAdmitted := func(situation, user string) error {
		before, began := account.Calls.Load(), time.Now()
		refused := 0
		for {
			res := get(user)
			if res.err != nil || res.status != http.StatusServiceUnavailable {
				res.took = time.Since(began)
				return record(fmt.Sprintf("%s (after %d refusals)", situation, refused), began, account.Calls.Load()-before, []string{user}, []result{res})
			}
			if time.Since(began) > s.OpenWait+time.Minute {
				return fmt.Errorf("%s: still 503 %v after account came back", situation, time.Since(began))
			}
			refused++
			time.Sleep(50 * time.Millisecond)
		}
	}
	steps := []func() error{
		func() error { return step("before the outage: allowed, cached 60s", "alice") },
		func() error { return step("before the outage: denied, cached 10s", "bob") },
		func() error { account.Down(); time.Sleep(s.Pause); return nil },
		func() error { return step("outage: allow decided in the last 60s", "alice") },
		func() error { return step("outage: inside the 10s deny cache", "bob") },
		func() error { return step("outage, cache miss, circuit CLOSED: waits for the timeout", "carol") },
		func() error {
			return step("outage, cache misses: the 10th failure opens the circuit",
				"u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8", "u9")
		},
		func() error { return step("outage, cache miss, circuit OPEN: refused at once", "dave") },
		func() error { account.Up(); return nil },
		func() error { return step("account is back, circuit still OPEN: refused at once", "heidi") },
		func() error {
			return untilAdmitted(fmt.Sprintf("retried until the %v open wait is over: a HALF_OPEN trial succeeds", s.OpenWait), "erin")
		},
		func() error { return step("two more trial calls succeed: the circuit closes", "frank", "grace") },
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
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d | %s |\n", r.At.Round(100*time.Millisecond), r.Users, r.Situation, answer, r.Took.Round(100*time.Microsecond), r.Asked, r.Circuit)
	}
}

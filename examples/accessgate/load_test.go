package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// openOutage starts account (down) and orders, and opens the
// account-access circuit with ten failed cache misses.
func openOutage(tb testing.TB) (ordersURL string, account *Account, orders *Orders) {
	tb.Helper()
	account = NewAccount()
	account.Down()
	accountURL, stopAccount, err := serve(account)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { account.Up(); stopAccount() })
	orders, err = NewOrders(OrdersConfig{AccountURL: accountURL, Timeout: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(orders.Close)
	ordersURL, stopOrders, err := serve(orders.Handler)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stopOrders)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, ordersURL, nil)
			req.Header.Set("X-User", fmt.Sprint("warmup-", i))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		})
	}
	wg.Wait()
	http.DefaultClient.CloseIdleConnections()
	if s := orders.Circuits.Get("account-access").State(); s != breaker.Open {
		tb.Fatalf("account-access is %s after ten failures, want OPEN", s)
	}
	return ordersURL, account, orders
}

// TestNoPileUpWhileOpen: 500 concurrent cache misses while the circuit is
// open are all refused without asking account, and no goroutine is left.
func TestNoPileUpWhileOpen(t *testing.T) {
	url, account, orders := openOutage(t)
	asked := account.Calls.Load()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	var refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 500 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set("X-User", fmt.Sprint("user-", i))
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if refused.Load() != 500 || account.Calls.Load() != asked || orders.Served.Load() != 0 {
		t.Fatalf("%d of 500 refused, account asked %d more times, orders served %d", refused.Load(), account.Calls.Load()-asked, orders.Served.Load())
	}
}

// BenchmarkOpenCircuitLoad attacks orders with cache misses (a new user per
// request) while account is down and the circuit open, at a fixed rate on
// loopback with vegeta, and reports the latency percentiles of the 503s and
// the most goroutines seen during the attack over the count before it.
// Goal: p99 < 1ms, goroutines flat. The baseline is a handler that answers
// 503 at once, attacked the same way in the same run: what loopback HTTP
// and the load generator cost on this machine without any gate.
func BenchmarkOpenCircuitLoad(b *testing.B) {
	for _, rate := range []int{500, 1000, 2000} {
		b.Run(fmt.Sprintf("baseline/rate=%d", rate), func(b *testing.B) {
			url, stop, err := serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			attack(b, url, rate, nil)
		})
		b.Run(fmt.Sprintf("gate/rate=%d", rate), func(b *testing.B) {
			url, _, orders := openOutage(b)
			attack(b, url, rate, orders)
		})
	}
}

func attack(b *testing.B, url string, rate int, orders *Orders) {
	for b.Loop() {
		var n atomic.Int64
		targeter := func(t *vegeta.Target) error {
			t.Method, t.URL = http.MethodGet, url
			t.Header = http.Header{"X-User": {fmt.Sprint("user-", n.Add(1))}}
			return nil
		}
		before := runtime.NumGoroutine()
		var peak atomic.Int64
		stop := make(chan struct{})
		go func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if g := int64(runtime.NumGoroutine()); g > peak.Load() {
						peak.Store(g)
					}
				}
			}
		}()
		attacker := vegeta.NewAttacker(vegeta.KeepAlive(true), vegeta.Workers(8))
		var m vegeta.Metrics
		for res := range attacker.Attack(targeter, vegeta.Rate{Freq: rate, Per: time.Second}, 4*time.Second, "open") {
			m.Add(res)
		}
		m.Close()
		close(stop)
		attacker.Stop()
		if m.StatusCodes["503"] != int(m.Requests) || (orders != nil && orders.Served.Load() != 0) {
			b.Fatalf("status codes %v for %d requests", m.StatusCodes, m.Requests)
		}
		b.ReportMetric(float64(m.Requests), "requests")
		b.ReportMetric(float64(m.Latencies.P50.Microseconds()), "p50-µs")
		b.ReportMetric(float64(m.Latencies.P99.Microseconds()), "p99-µs")
		b.ReportMetric(float64(m.Latencies.Max.Microseconds()), "max-µs")
		b.ReportMetric(float64(peak.Load()-int64(before)), "goroutines-added")
	}
}

package breakerprom_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breaker/manualclock"
	"github.com/tripswitch-dev/tripswitch/breakerprom"
)

// setup: account-access measures durations, account-read does not.
func setup(t *testing.T) (*breaker.Registry, *manualclock.Clock, *breakerprom.Collector) {
	t.Helper()
	clk := manualclock.New(time.Time{})
	reg, err := breaker.NewRegistry(breaker.Config{MinimumNumberOfCalls: 4, WindowSize: 10, Clock: clk, WaitDurationInOpenState: time.Minute},
		map[string]breaker.Override{"account-access": func(c *breaker.Config) { c.RecordCallDurations = true }})
	if err != nil {
		t.Fatal(err)
	}
	return reg, clk, breakerprom.NewCollector(reg)
}

func call(t *testing.T, clk *manualclock.Clock, b *breaker.Breaker, took time.Duration, o breaker.Outcome) {
	t.Helper()
	p, err := b.Allow()
	if err != nil {
		t.Fatalf("%s rejected a call: %v", b.Name(), err)
	}
	clk.Advance(took)
	p.Done(o)
}

// TestExportedSeries scrapes the collector and compares the Resilience4j
// series, value by value.
func TestExportedSeries(t *testing.T) {
	reg, clk, col := setup(t)
	access, read := reg.Get("account-access"), reg.Get("account-read")
	call(t, clk, access, 100*time.Millisecond, breaker.Success)
	call(t, clk, access, 300*time.Millisecond, breaker.Success)
	call(t, clk, access, 2*time.Second, breaker.Failure)
	call(t, clk, access, 50*time.Millisecond, breaker.Ignore)
	call(t, clk, read, time.Second, breaker.Success)
	for range 3 {
		call(t, clk, read, time.Second, breaker.Failure) // 3 of 4 failed: opens
	}
	for range 3 {
		if _, err := read.Allow(); err == nil {
			t.Fatal("open circuit admitted a call")
		}
	}

	// account-read is OPEN and still reports the window that opened it (3
	// of 4 failed, 75%), as Resilience4j does: an alert on the failure rate
	// does not clear when the outage starts.
	want := `
# HELP resilience4j_circuitbreaker_state The states of the circuit breaker
# TYPE resilience4j_circuitbreaker_state gauge
resilience4j_circuitbreaker_state{name="account-access",state="closed"} 1
resilience4j_circuitbreaker_state{name="account-access",state="disabled"} 0
resilience4j_circuitbreaker_state{name="account-access",state="forced_open"} 0
resilience4j_circuitbreaker_state{name="account-access",state="half_open"} 0
resilience4j_circuitbreaker_state{name="account-access",state="metrics_only"} 0
resilience4j_circuitbreaker_state{name="account-access",state="open"} 0
resilience4j_circuitbreaker_state{name="account-read",state="closed"} 0
resilience4j_circuitbreaker_state{name="account-read",state="disabled"} 0
resilience4j_circuitbreaker_state{name="account-read",state="forced_open"} 0
resilience4j_circuitbreaker_state{name="account-read",state="half_open"} 0
resilience4j_circuitbreaker_state{name="account-read",state="metrics_only"} 0
resilience4j_circuitbreaker_state{name="account-read",state="open"} 1
# HELP resilience4j_circuitbreaker_calls_seconds Total number of calls by outcome, and their duration when measured
# TYPE resilience4j_circuitbreaker_calls_seconds summary
resilience4j_circuitbreaker_calls_seconds_sum{kind="failed",name="account-access"} 2
resilience4j_circuitbreaker_calls_seconds_count{kind="failed",name="account-access"} 1
resilience4j_circuitbreaker_calls_seconds_sum{kind="failed",name="account-read"} NaN
resilience4j_circuitbreaker_calls_seconds_count{kind="failed",name="account-read"} 3
resilience4j_circuitbreaker_calls_seconds_sum{kind="ignored",name="account-access"} 0.05
resilience4j_circuitbreaker_calls_seconds_count{kind="ignored",name="account-access"} 1
resilience4j_circuitbreaker_calls_seconds_sum{kind="ignored",name="account-read"} NaN
resilience4j_circuitbreaker_calls_seconds_count{kind="ignored",name="account-read"} 0
resilience4j_circuitbreaker_calls_seconds_sum{kind="successful",name="account-access"} 0.4
resilience4j_circuitbreaker_calls_seconds_count{kind="successful",name="account-access"} 2
resilience4j_circuitbreaker_calls_seconds_sum{kind="successful",name="account-read"} NaN
resilience4j_circuitbreaker_calls_seconds_count{kind="successful",name="account-read"} 1
# HELP resilience4j_circuitbreaker_calls_seconds_max Longest call by outcome in the last one to two minutes
# TYPE resilience4j_circuitbreaker_calls_seconds_max gauge
resilience4j_circuitbreaker_calls_seconds_max{kind="failed",name="account-access"} 2
resilience4j_circuitbreaker_calls_seconds_max{kind="ignored",name="account-access"} 0.05
resilience4j_circuitbreaker_calls_seconds_max{kind="successful",name="account-access"} 0.3
# HELP resilience4j_circuitbreaker_not_permitted_calls_total Total number of not permitted calls
# TYPE resilience4j_circuitbreaker_not_permitted_calls_total counter
resilience4j_circuitbreaker_not_permitted_calls_total{kind="not_permitted",name="account-access"} 0
resilience4j_circuitbreaker_not_permitted_calls_total{kind="not_permitted",name="account-read"} 3
# HELP resilience4j_circuitbreaker_buffered_calls The number of buffered calls stored in the sliding window
# TYPE resilience4j_circuitbreaker_buffered_calls gauge
resilience4j_circuitbreaker_buffered_calls{kind="failed",name="account-access"} 1
resilience4j_circuitbreaker_buffered_calls{kind="failed",name="account-read"} 3
resilience4j_circuitbreaker_buffered_calls{kind="successful",name="account-access"} 2
resilience4j_circuitbreaker_buffered_calls{kind="successful",name="account-read"} 1
# HELP resilience4j_circuitbreaker_failure_rate The failure rate of the circuit breaker
# TYPE resilience4j_circuitbreaker_failure_rate gauge
resilience4j_circuitbreaker_failure_rate{name="account-access"} -1
resilience4j_circuitbreaker_failure_rate{name="account-read"} 75
`
	names := []string{
		"resilience4j_circuitbreaker_state", "resilience4j_circuitbreaker_calls_seconds",
		"resilience4j_circuitbreaker_calls_seconds_max", "resilience4j_circuitbreaker_not_permitted_calls_total",
		"resilience4j_circuitbreaker_buffered_calls", "resilience4j_circuitbreaker_failure_rate",
	}
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// Resilience4j's older dashboards plot the window's capacity next to
	// its contents: COUNT_BASED windows have one.
	if err := testutil.CollectAndCompare(col, strings.NewReader(`
# HELP resilience4j_circuitbreaker_max_buffered_calls The maximum number of buffered calls the sliding window can store
# TYPE resilience4j_circuitbreaker_max_buffered_calls gauge
resilience4j_circuitbreaker_max_buffered_calls{name="account-access"} 10
resilience4j_circuitbreaker_max_buffered_calls{name="account-read"} 10
`), "resilience4j_circuitbreaker_max_buffered_calls"); err != nil {
		t.Fatal(err)
	}

	// Below the minimum the rate is -1, as in Resilience4j; at it, a percentage.
	call(t, clk, access, time.Millisecond, breaker.Success)
	if got := gauge(t, col, "resilience4j_circuitbreaker_failure_rate", "account-access"); got != 25 {
		t.Fatalf("failure rate %v, want 25 (1 of 4)", got)
	}
}

func gauge(t *testing.T, col prometheus.Collector, metric, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == name {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s for %s", metric, name)
	return 0
}

// TestScrapeOverHTTPAndLint: a real scrape through promhttp with a pedantic
// registry (which checks consistency), and promlint finds nothing.
func TestScrapeOverHTTPAndLint(t *testing.T) {
	reg, clk, col := setup(t)
	call(t, clk, reg.Get("account-access"), time.Millisecond, breaker.Success)
	reg.Get("notification").ForceOpen()
	preg := prometheus.NewPedanticRegistry()
	preg.MustRegister(col)
	srv := httptest.NewServer(promhttp.HandlerFor(preg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("scrape: %d %s", resp.StatusCode, body)
	}
	for _, line := range []string{
		`resilience4j_circuitbreaker_state{name="notification",state="forced_open"} 1`,
		`resilience4j_circuitbreaker_calls_seconds_count{kind="successful",name="account-access"} 1`,
		`resilience4j_circuitbreaker_slow_calls{kind="all",name="account-access"} 0`,
		`resilience4j_circuitbreaker_slow_call_rate{name="notification"} -1`,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("scrape lacks %s", line)
		}
	}
	problems, err := testutil.CollectAndLint(col)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestLabelsCarryOnlyTheCircuitName: calls carrying a bearer token, a user
// ID and a body through a real HTTP server leave no trace in the series:
// every label is name, kind or state, and every value is a circuit name or
// one of the fixed kinds and states.
func TestLabelsCarryOnlyTheCircuitName(t *testing.T) {
	reg, _, col := setup(t)
	const token, user, secretBody = "Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0", "user-84731", "card=4111111111111111"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "denied for "+r.URL.Path+" "+r.Header.Get("Authorization"), http.StatusForbidden)
	}))
	defer srv.Close()
	b := reg.Get("account-access")
	for range 3 {
		p, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/users/"+user+"/access", strings.NewReader(secretBody))
		req.Header.Set("Authorization", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			p.Done(breaker.Failure)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		p.Done(breaker.Ignore)
	}
	http.DefaultClient.CloseIdleConnections()

	preg := prometheus.NewPedanticRegistry()
	preg.MustRegister(col)
	mfs, err := preg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]map[string]bool{
		"name":  {"account-access": true},
		"kind":  {"successful": true, "failed": true, "ignored": true, "not_permitted": true, "all": true},
		"state": {"closed": true, "open": true, "half_open": true, "disabled": true, "forced_open": true, "metrics_only": true},
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				vals, ok := allowed[l.GetName()]
				if !ok || !vals[l.GetValue()] {
					t.Errorf("%s has label %s=%q", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
	var text bytes.Buffer
	enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	for _, secret := range []string{"eyJhbGci", user, "4111111111111111"} {
		if strings.Contains(text.String(), secret) {
			t.Errorf("the exposition contains %q", secret)
		}
	}
	if !strings.Contains(text.String(), `resilience4j_circuitbreaker_calls_seconds_count{kind="ignored",name="account-access"} 3`) {
		t.Errorf("the calls were not counted:\n%s", text.String())
	}
}

package accessgate_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tripswitch-dev/tripswitch/accessgate"
)

// TestCollector: the decision counters, scraped.
func TestCollector(t *testing.T) {
	f := newFixture(t, accessgate.Config{Name: "orders"}, "alice")
	ctx := context.Background()
	_ = f.gate.Check(ctx, "alice", "orders") // miss, lookup allowed
	_ = f.gate.Check(ctx, "alice", "orders") // hit
	_ = f.gate.Check(ctx, "bob", "orders")   // miss, lookup denied
	f.acct.mode.Store("error")
	_ = f.gate.Check(ctx, "carol", "orders") // miss, lookup failed
	f.acct.mode.Store("forbidden")
	_ = f.gate.Check(ctx, "dave", "orders") // miss, misconfigured
	want := `
# HELP accessgate_cache_requests_total Decision cache requests by result
# TYPE accessgate_cache_requests_total counter
accessgate_cache_requests_total{gate="orders",result="hit"} 1
accessgate_cache_requests_total{gate="orders",result="miss"} 4
# HELP accessgate_decisions_total Access decisions by outcome
# TYPE accessgate_decisions_total counter
accessgate_decisions_total{gate="orders",outcome="allowed"} 2
accessgate_decisions_total{gate="orders",outcome="allowed_unavailable"} 0
accessgate_decisions_total{gate="orders",outcome="denied"} 1
accessgate_decisions_total{gate="orders",outcome="unavailable"} 2
# HELP accessgate_lookups_total Lookups sent to the permission service by result
# TYPE accessgate_lookups_total counter
accessgate_lookups_total{gate="orders",result="allowed"} 1
accessgate_lookups_total{gate="orders",result="denied"} 1
accessgate_lookups_total{gate="orders",result="failed"} 1
accessgate_lookups_total{gate="orders",result="misconfigured"} 1
`
	if err := testutil.CollectAndCompare(f.gate.Collector(), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.CollectAndLint(f.gate.Collector()); err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %v", problems, err)
	}
}

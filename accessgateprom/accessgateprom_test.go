package accessgateprom_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tripswitch-dev/tripswitch/accessgate"
	"github.com/tripswitch-dev/tripswitch/accessgateprom"
)

// gate answers alice allowed, bob denied, carol with a failed lookup and
// dave with a 403 from the permission service (a misconfiguration).
func gate(t *testing.T, name string) *accessgate.Checker {
	t.Helper()
	g, err := accessgate.New(accessgate.Config{
		Name:   name,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Lookup: accessgate.LookupFunc(func(_ context.Context, subject, _ string) (bool, error) {
			switch subject {
			case "carol":
				return false, errors.New("connection reset")
			case "dave":
				return false, &accessgate.StatusError{Code: 403}
			}
			return subject == "alice", nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// TestCollector: the decision counters of two gates, scraped from one
// registry and linted.
func TestCollector(t *testing.T) {
	orders, admin := gate(t, "orders"), gate(t, "admin")
	ctx := context.Background()
	_ = orders.Check(ctx, "alice", "orders") // miss, lookup allowed
	_ = orders.Check(ctx, "alice", "orders") // hit
	_ = orders.Check(ctx, "bob", "orders")   // miss, lookup denied
	_ = orders.Check(ctx, "carol", "orders") // miss, lookup failed
	_ = orders.Check(ctx, "dave", "orders")  // miss, misconfigured
	_ = admin.Check(ctx, "bob", "users")     // miss, lookup denied

	reg := prometheus.NewPedanticRegistry()
	c := accessgateprom.NewCollector(orders, admin)
	reg.MustRegister(c)
	want := `
# HELP accessgate_cache_requests_total Decision cache requests by result
# TYPE accessgate_cache_requests_total counter
accessgate_cache_requests_total{gate="admin",result="hit"} 0
accessgate_cache_requests_total{gate="admin",result="miss"} 1
accessgate_cache_requests_total{gate="orders",result="hit"} 1
accessgate_cache_requests_total{gate="orders",result="miss"} 4
# HELP accessgate_decisions_total Access decisions by outcome
# TYPE accessgate_decisions_total counter
accessgate_decisions_total{gate="admin",outcome="allowed"} 0
accessgate_decisions_total{gate="admin",outcome="allowed_unavailable"} 0
accessgate_decisions_total{gate="admin",outcome="denied"} 1
accessgate_decisions_total{gate="admin",outcome="unavailable"} 0
accessgate_decisions_total{gate="orders",outcome="allowed"} 2
accessgate_decisions_total{gate="orders",outcome="allowed_unavailable"} 0
accessgate_decisions_total{gate="orders",outcome="denied"} 1
accessgate_decisions_total{gate="orders",outcome="unavailable"} 2
# HELP accessgate_lookups_total Lookups sent to the permission service by result
# TYPE accessgate_lookups_total counter
accessgate_lookups_total{gate="admin",result="allowed"} 0
accessgate_lookups_total{gate="admin",result="denied"} 1
accessgate_lookups_total{gate="admin",result="failed"} 0
accessgate_lookups_total{gate="admin",result="misconfigured"} 0
accessgate_lookups_total{gate="orders",result="allowed"} 1
accessgate_lookups_total{gate="orders",result="denied"} 1
accessgate_lookups_total{gate="orders",result="failed"} 1
accessgate_lookups_total{gate="orders",result="misconfigured"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %v", problems, err)
	}
}

// TestCollectorLabelsNothingFromARequest: subjects and resources never
// become label values.
func TestCollectorLabelsNothingFromARequest(t *testing.T) {
	g := gate(t, "orders")
	_ = g.Check(context.Background(), "alice-secret-subject", "resource-42")
	reg := prometheus.NewRegistry()
	reg.MustRegister(accessgateprom.NewCollector(g))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.Contains(l.GetValue(), "alice") || strings.Contains(l.GetValue(), "42") {
					t.Errorf("%s carries %s=%q", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

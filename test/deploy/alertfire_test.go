package deploy

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// shippedRule returns the alerting rule named alert from
// config/prometheus/rules.yaml, as Prometheus loads it.
func shippedRule(t *testing.T, alert string) *rules.AlertingRule {
	t.Helper()
	groups := shippedGroups(t)
	p := parser.NewParser(parser.Options{})
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != alert {
				continue
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatal(err)
			}
			return rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
				labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", false, slog.New(slog.DiscardHandler))
		}
	}
	t.Fatalf("no alert %s", alert)
	return nil
}

// TestOpenTooLongAlertFires evaluates the shipped TripswitchCircuitOpenTooLong
// rule with Prometheus's own rule engine, once a minute over two hours of
// the controller's series:
//   - "held": open from the start (onMaxOpen: Stay) fires 15 minutes in;
//   - "closed": maxOpenDuration reached at minute 30 and onMaxOpen: Close
//     closed it at once, so tripswitch_circuit_open_too_long was 1 for one
//     scrape and the circuit is closed: it still fires, 15 minutes after,
//     and resolves once the hour it is kept for has passed;
//   - "healthy": never open, never fires.
func TestOpenTooLongAlertFires(t *testing.T) {
	rule := shippedRule(t, "TripswitchCircuitOpenTooLong")
	storage := promqltest.LoadedStorage(t, `
load 1m
  tripswitch_circuit_open{breaker="held"}           1x120
  tripswitch_circuit_open_too_long{breaker="held"}  0x120
  tripswitch_circuit_open{breaker="closed"}         0x120
  tripswitch_circuit_open_too_long{breaker="closed"} 0x29 1 0x90
  tripswitch_circuit_open{breaker="healthy"}        0x120
  tripswitch_circuit_open_too_long{breaker="healthy"} 0x120
`)
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 100000)
	query := rules.EngineQueryFunc(engine, storage)
	start := time.Unix(0, 0).UTC()
	firing := map[int]map[string]bool{}
	for m := 0; m <= 120; m++ {
		if _, err := rule.Eval(context.Background(), 0, start.Add(time.Duration(m)*time.Minute), query, nil, 0); err != nil {
			t.Fatalf("minute %d: %v", m, err)
		}
		firing[m] = map[string]bool{}
		for _, a := range rule.ActiveAlerts() {
			if a.State == rules.StateFiring {
				firing[m][a.Labels.Get("breaker")] = true
			}
		}
	}
	for _, c := range []struct {
		minute  int
		breaker string
		want    bool
	}{
		{14, "held", false}, {15, "held", true}, {120, "held", true},
		{44, "closed", false}, {45, "closed", true}, {89, "closed", true}, {91, "closed", false},
	} {
		if got := firing[c.minute][c.breaker]; got != c.want {
			t.Errorf("minute %d: %s firing %v, want %v", c.minute, c.breaker, got, c.want)
		}
	}
	for m := range firing {
		if firing[m]["healthy"] {
			t.Fatalf("minute %d: the healthy breaker's alert fires", m)
		}
	}
}

package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tripswitch-dev/tripswitch/internal/metrics"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestMetricsFollowACycle checks the exported series after an open and a
// close on the real API server.
func TestMetricsFollowACycle(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	wcb := b.createBreaker(b.cfg, nil)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := b.reconciler(b.c)
	r.Metrics = m
	m.ObserveProbe(wcb.Name, probe.Result{Status: probe.Unhealthy, Reason: "timeout"})

	// The series the alerts and dashboard read exist, at 0, from the first
	// reconcile: the first ExternalChange is an increase from 0.
	b.settle(r, wcb.Name)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP tripswitch_circuit_transitions_total Writes to webhook configurations, by kind of write (Open, Close, Drop) and reason.
# TYPE tripswitch_circuit_transitions_total counter
tripswitch_circuit_transitions_total{breaker="`+wcb.Name+`",reason="APIServerFailing",write="Open"} 0
tripswitch_circuit_transitions_total{breaker="`+wcb.Name+`",reason="ExternalChange",write="Drop"} 0
tripswitch_circuit_transitions_total{breaker="`+wcb.Name+`",reason="WebhookRecovered",write="Close"} 0
tripswitch_circuit_transitions_total{breaker="`+wcb.Name+`",reason="WebhookUnhealthy",write="Open"} 0
# HELP tripswitch_patch_conflicts_total Patches rejected because the webhook configuration changed since it was read.
# TYPE tripswitch_patch_conflicts_total counter
tripswitch_patch_conflicts_total{breaker="`+wcb.Name+`"} 0
`), "tripswitch_circuit_transitions_total", "tripswitch_patch_conflicts_total"); err != nil {
		t.Fatal(err)
	}

	b.drive(r, wcb.Name, probe.Unhealthy)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP tripswitch_circuit_open 1 while tripswitch holds the breaker's webhook open, else 0.
# TYPE tripswitch_circuit_open gauge
tripswitch_circuit_open{breaker="`+wcb.Name+`"} 1
`), "tripswitch_circuit_open"); err != nil {
		t.Fatal(err)
	}
	b.clock.Step(90 * time.Second)
	b.drive(r, wcb.Name, probe.Healthy)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP tripswitch_circuit_open 1 while tripswitch holds the breaker's webhook open, else 0.
# TYPE tripswitch_circuit_open gauge
tripswitch_circuit_open{breaker="`+wcb.Name+`"} 0
# HELP tripswitch_circuit_open_seconds_total Seconds the breaker's webhook spent open, counted when it closes.
# TYPE tripswitch_circuit_open_seconds_total counter
tripswitch_circuit_open_seconds_total{breaker="`+wcb.Name+`"} 90
# HELP tripswitch_circuit_transitions_total Writes to webhook configurations, by kind of write (Open, Close, Drop) and reason.
# TYPE tripswitch_circuit_transitions_total counter
tripswitch_circuit_transitions_total{breaker="`+wcb.Name+`",reason="APIServerFailing",write="Open"} 0
tripswitch_circuit_transitions_total{breaker="`+wcb.Name+`",reason="ExternalChange",write="Drop"} 0
tripswitch_circuit_transitions_total{breaker="`+wcb.Name+`",reason="WebhookRecovered",write="Close"} 1
tripswitch_circuit_transitions_total{breaker="`+wcb.Name+`",reason="WebhookUnhealthy",write="Open"} 1
# HELP tripswitch_probe_results_total Probe results by status (Healthy, Unhealthy, Unknown, Discarded).
# TYPE tripswitch_probe_results_total counter
tripswitch_probe_results_total{breaker="`+wcb.Name+`",result="Discarded"} 0
tripswitch_probe_results_total{breaker="`+wcb.Name+`",result="Healthy"} 0
tripswitch_probe_results_total{breaker="`+wcb.Name+`",result="Unhealthy"} 1
tripswitch_probe_results_total{breaker="`+wcb.Name+`",result="Unknown"} 0
`), "tripswitch_circuit_open", "tripswitch_circuit_open_seconds_total", "tripswitch_circuit_transitions_total", "tripswitch_probe_results_total"); err != nil {
		t.Fatal(err)
	}
}

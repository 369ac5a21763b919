// Package breakerprom exports a registry's circuits to Prometheus with the
// metric and label names that Resilience4j's Micrometer binding
// (TaggedCircuitBreakerMetrics) produces in Prometheus, so that dashboards
// and alerts written for Resilience4j work unchanged:
//
//	resilience4j_circuitbreaker_state{name,state}                 gauge, 1 for the current state and 0 for the others
//	resilience4j_circuitbreaker_calls_seconds{name,kind}          summary (_count, _sum); kind successful, failed, ignored
//	resilience4j_circuitbreaker_calls_seconds_max{name,kind}      gauge, the decaying maximum
//	resilience4j_circuitbreaker_not_permitted_calls_total{name,kind="not_permitted"}  counter
//	resilience4j_circuitbreaker_buffered_calls{name,kind}         gauge; kind successful, failed: the calls in the window
//	resilience4j_circuitbreaker_max_buffered_calls{name}          gauge, the window's size in calls (COUNT_BASED only)
//	resilience4j_circuitbreaker_slow_calls{name,kind}             gauge (see below)
//	resilience4j_circuitbreaker_failure_rate{name}                gauge, percent; -1 below the minimum number of calls
//	resilience4j_circuitbreaker_slow_call_rate{name}              gauge, percent; -1 below the minimum number of calls
//
// The state label takes Resilience4j's values: closed, open, half_open,
// disabled, forced_open, metrics_only.
//
// While a circuit is OPEN, buffered_calls, slow_calls and the rates are
// those of the window (or the half-open trial calls) that opened it, as in
// Resilience4j, whose open state keeps the metrics of the state before it.
//
// Every difference from resilience4j-micrometer's export:
//
//   - Call durations are measured only by breakers with
//     Config.RecordCallDurations (or slow-call tracking) on, since timing
//     costs two clock reads per call. For the others the summary's _sum is
//     NaN (not measured, rather than a misleading zero) and _max is absent;
//     _count, which is what call-rate panels use, is always exact.
//   - The window counts slow calls without splitting them by outcome, so
//     slow_calls is exported once, with kind="all", instead of the
//     successful/failed pair; sum(...) by name gives the same total.
//   - Counts start when the collector is created (it turns counting on, see
//     breaker.Registry.EnableTotals), as Micrometer's start when it binds.
//   - max_buffered_calls is exported for COUNT_BASED circuits only: a
//     TIME_BASED window is bounded in seconds, so it has no maximum number
//     of calls to report.
//   - The _max gauge keeps the longest call of the latest clock minute that
//     had one, for one to two minutes, on the breaker's own clock;
//     Micrometer's rotates its own ring of buffers, so the two may drop a
//     maximum at slightly different moments.
//   - FORCED_OPEN and DISABLED report an empty window (rates -1), as
//     Resilience4j's do; the state gauge says which state it is.
//   - Nothing else: names, label keys and values, types and the -1 below
//     the minimum number of calls are Micrometer's.
//
// Labels are the circuit's name and the fixed kind or state values, never
// anything from a request: no tokens, bodies, paths or user IDs.
//
// LimitCollector does the same for concurrency limits (limit.Bulkhead,
// limit.Adaptive) under Resilience4j's bulkhead names; see its doc.
package breakerprom

import (
	"math"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// Collector is a prometheus.Collector that reads a registry's circuits at
// scrape time; circuits the registry creates later appear on the next
// scrape.
type Collector struct {
	reg *breaker.Registry

	state, calls, callsMax, notPermitted, buffered, maxBuffered, slow, failureRate, slowRate *prometheus.Desc
}

// NewCollector returns a collector over r and starts r's call counting.
func NewCollector(r *breaker.Registry) *Collector {
	r.EnableTotals()
	const ns = "resilience4j_circuitbreaker_"
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(ns+name, help, append([]string{"name"}, labels...), nil)
	}
	return &Collector{
		reg:          r,
		state:        d("state", "The states of the circuit breaker", "state"),
		calls:        d("calls_seconds", "Total number of calls by outcome, and their duration when measured", "kind"),
		callsMax:     d("calls_seconds_max", "Longest call by outcome in the last one to two minutes", "kind"),
		notPermitted: d("not_permitted_calls_total", "Total number of not permitted calls", "kind"),
		buffered:     d("buffered_calls", "The number of buffered calls stored in the sliding window", "kind"),
		maxBuffered:  d("max_buffered_calls", "The maximum number of buffered calls the sliding window can store"),
		slow:         d("slow_calls", "The number of slow calls in the sliding window", "kind"),
		failureRate:  d("failure_rate", "The failure rate of the circuit breaker"),
		slowRate:     d("slow_call_rate", "The slow call rate of the circuit breaker"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.state, c.calls, c.callsMax, c.notPermitted, c.buffered, c.maxBuffered, c.slow, c.failureRate, c.slowRate} {
		ch <- d
	}
}

var states = []breaker.State{breaker.Closed, breaker.Open, breaker.HalfOpen, breaker.Disabled, breaker.ForcedOpen, breaker.MetricsOnly}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.reg.All() {
		name := b.Name()
		m := b.Metrics()
		t := b.Totals()
		for _, s := range states {
			v := 0.0
			if m.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, v, name, strings.ToLower(s.String()))
		}
		for _, k := range []struct {
			kind         string
			n            uint64
			sum, longest float64
		}{
			{"successful", t.Successful, t.SuccessfulTime.Seconds(), t.SuccessfulMax.Seconds()},
			{"failed", t.Failed, t.FailedTime.Seconds(), t.FailedMax.Seconds()},
			{"ignored", t.Ignored, t.IgnoredTime.Seconds(), t.IgnoredMax.Seconds()},
		} {
			sum := math.NaN()
			if t.Timed {
				sum = k.sum
				ch <- prometheus.MustNewConstMetric(c.callsMax, prometheus.GaugeValue, k.longest, name, k.kind)
			}
			ch <- prometheus.MustNewConstSummary(c.calls, k.n, sum, nil, name, k.kind)
		}
		ch <- prometheus.MustNewConstMetric(c.notPermitted, prometheus.CounterValue, float64(t.NotPermitted), name, "not_permitted")
		ch <- prometheus.MustNewConstMetric(c.buffered, prometheus.GaugeValue, float64(m.Calls-m.FailedCalls), name, "successful")
		ch <- prometheus.MustNewConstMetric(c.buffered, prometheus.GaugeValue, float64(m.FailedCalls), name, "failed")
		if cfg := b.Config(); cfg.WindowType == breaker.CountBased {
			ch <- prometheus.MustNewConstMetric(c.maxBuffered, prometheus.GaugeValue, float64(cfg.WindowSize), name)
		}
		ch <- prometheus.MustNewConstMetric(c.slow, prometheus.GaugeValue, float64(m.SlowCalls), name, "all")
		ch <- prometheus.MustNewConstMetric(c.failureRate, prometheus.GaugeValue, m.FailureRate, name)
		ch <- prometheus.MustNewConstMetric(c.slowRate, prometheus.GaugeValue, m.SlowCallRate, name)
	}
}

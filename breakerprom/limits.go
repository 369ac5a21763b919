package breakerprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tripswitch-dev/tripswitch/limit"
)

// LimitCollector is a prometheus.Collector that reads concurrency limits
// (limit.Bulkhead, limit.Adaptive) at scrape time under the names
// Resilience4j's Micrometer binding (TaggedBulkheadMetrics) gives its
// bulkheads in Prometheus, so bulkhead dashboards work unchanged:
//
//	resilience4j_bulkhead_available_concurrent_calls{name}       gauge, calls that would be admitted now
//	resilience4j_bulkhead_max_allowed_concurrent_calls{name}     gauge, the limit (an adaptive limit's current one)
//	resilience4j_bulkhead_queued_calls{name}                     gauge, callers waiting for a permit
//
// and one series Resilience4j does not export (it reports rejections as
// events only), under tripswitch's own prefix:
//
//	tripswitch_limit_rejected_calls_total{name}                  counter, calls rejected since the collector was built
//
// The name label is the limit's name; nothing from a request is a label.
// A limiter counts its rejections only once asked (its
// EnableRejectionCount, which keeps a rejection free of atomic writes
// until then): NewLimitCollector asks every limit it is given, as
// NewCollector turns on a registry's totals.
type LimitCollector struct {
	limits []limit.Limiter

	available, maxAllowed, queued, rejected *prometheus.Desc
}

// NewLimitCollector returns a collector over limits, and turns on the
// rejection count of each that has one (limit.Bulkhead, limit.Adaptive,
// and a Bulkhead's WithMaxWait view).
func NewLimitCollector(limits ...limit.Limiter) *LimitCollector {
	for _, l := range limits {
		if c, ok := l.(interface{ EnableRejectionCount() }); ok {
			c.EnableRejectionCount()
		}
	}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"name"}, nil)
	}
	return &LimitCollector{
		limits:     limits,
		available:  d("resilience4j_bulkhead_available_concurrent_calls", "The number of available permissions"),
		maxAllowed: d("resilience4j_bulkhead_max_allowed_concurrent_calls", "The maximum number of available permissions"),
		queued:     d("resilience4j_bulkhead_queued_calls", "The number of calls waiting for a permission"),
		rejected:   d("tripswitch_limit_rejected_calls_total", "Total number of calls the limit rejected"),
	}
}

// Describe implements prometheus.Collector.
func (c *LimitCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.available, c.maxAllowed, c.queued, c.rejected} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *LimitCollector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.limits {
		m, name := l.Metrics(), l.Name()
		ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, float64(m.AvailableConcurrentCalls), name)
		ch <- prometheus.MustNewConstMetric(c.maxAllowed, prometheus.GaugeValue, float64(m.MaxAllowedConcurrentCalls), name)
		ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(m.QueuedCalls), name)
		ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(m.Rejected), name)
	}
}

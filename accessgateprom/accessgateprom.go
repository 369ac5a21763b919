// Package accessgateprom exports accessgate's counts to Prometheus. It is a
// module of its own, as breakerprom is for the circuits, so that a service
// that uses the gate without Prometheus does not build client_golang.
//
// A Collector reads each gate's [accessgate.Checker.Stats] at scrape time
// (no second set of counters) and exports, labelled by the gate's name and
// fixed values only (never a subject, a resource or anything else from a
// request):
//
//	accessgate_decisions_total{gate,outcome}      allowed, denied, unavailable, allowed_unavailable
//	accessgate_cache_requests_total{gate,result}  hit, miss
//	accessgate_lookups_total{gate,result}         allowed, denied, failed, misconfigured
//
// Register it next to breakerprom's collector for the registry that holds
// the lookup's circuit, so that the gate's refusals and the circuit's state
// are on one dashboard.
package accessgateprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tripswitch-dev/tripswitch/accessgate"
)

// Collector is a prometheus.Collector over one or more gates.
type Collector struct {
	gates []*accessgate.Checker
}

// NewCollector returns a collector of the gates' counts. Each gate's
// series carry its Config.Name as the gate label, so gates collected by
// one registry need distinct names (a repeated name fails the scrape, as
// any duplicate series does).
func NewCollector(gates ...*accessgate.Checker) *Collector {
	return &Collector{gates: gates}
}

var (
	decisionsDesc = prometheus.NewDesc("accessgate_decisions_total", "Access decisions by outcome", []string{"gate", "outcome"}, nil)
	cacheDesc     = prometheus.NewDesc("accessgate_cache_requests_total", "Decision cache requests by result", []string{"gate", "result"}, nil)
	lookupsDesc   = prometheus.NewDesc("accessgate_lookups_total", "Lookups sent to the permission service by result", []string{"gate", "result"}, nil)
)

// Describe sends the three series' descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- decisionsDesc
	ch <- cacheDesc
	ch <- lookupsDesc
}

// Collect reads every gate's counts.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.gates {
		s, name := g.Stats(), g.Name()
		counter := func(d *prometheus.Desc, v uint64, label string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name, label)
		}
		counter(decisionsDesc, s.Allowed, "allowed")
		counter(decisionsDesc, s.Denied, "denied")
		counter(decisionsDesc, s.Unavailable, "unavailable")
		counter(decisionsDesc, s.AllowedUnavailable, "allowed_unavailable")
		counter(cacheDesc, s.CacheHits, "hit")
		counter(cacheDesc, s.CacheMisses, "miss")
		counter(lookupsDesc, s.LookupsAllowed, "allowed")
		counter(lookupsDesc, s.LookupsDenied, "denied")
		counter(lookupsDesc, s.LookupsFailed, "failed")
		counter(lookupsDesc, s.LookupsMisconfigured, "misconfigured")
	}
}

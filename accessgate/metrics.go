package accessgate

import "github.com/prometheus/client_golang/prometheus"

// Stats are the gate's cumulative counts.
type Stats struct {
	// Decisions by outcome. AllowedUnavailable counts requests let through
	// without a decision by an AllowWhenUnavailable gate.
	Allowed, Denied, Unavailable, AllowedUnavailable uint64
	// CacheHits and CacheMisses count Check calls.
	CacheHits, CacheMisses uint64
	// Lookups that reached the permission service, by result.
	LookupsAllowed, LookupsDenied, LookupsFailed, LookupsMisconfigured uint64
}

// Stats reads the counts.
func (g *Checker) Stats() Stats {
	s := &g.stats
	return Stats{
		Allowed: s.allowed.Load(), Denied: s.denied.Load(), Unavailable: s.unavailable.Load(), AllowedUnavailable: s.allowedFailOpen.Load(),
		CacheHits: s.hits.Load(), CacheMisses: s.misses.Load(),
		LookupsAllowed: s.lookupAllowed.Load(), LookupsDenied: s.lookupDenied.Load(), LookupsFailed: s.lookupFailed.Load(), LookupsMisconfigured: s.lookupMisconfigured.Load(),
	}
}

// Collector exports the gate's counts, labelled by gate name and fixed
// outcome values only:
//
//	accessgate_decisions_total{gate,outcome}   allowed, denied, unavailable, allowed_unavailable
//	accessgate_cache_requests_total{gate,result} hit, miss
//	accessgate_lookups_total{gate,result}      allowed, denied, failed, misconfigured
//
// Register it next to breakerprom's collector for the lookup's circuit.
func (g *Checker) Collector() prometheus.Collector { return collector{g} }

type collector struct{ g *Checker }

var (
	decisionsDesc = prometheus.NewDesc("accessgate_decisions_total", "Access decisions by outcome", []string{"gate", "outcome"}, nil)
	cacheDesc     = prometheus.NewDesc("accessgate_cache_requests_total", "Decision cache requests by result", []string{"gate", "result"}, nil)
	lookupsDesc   = prometheus.NewDesc("accessgate_lookups_total", "Lookups sent to the permission service by result", []string{"gate", "result"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- decisionsDesc
	ch <- cacheDesc
	ch <- lookupsDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s, name := c.g.Stats(), c.g.cfg.Name
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

package accessgate

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

// Name is the gate's name (Config.Name, default "access"), as its logs
// and accessgateprom's series label it.
func (g *Checker) Name() string { return g.cfg.Name }

// Stats reads the counts. They are cumulative from New and read without a
// lock, each counter on its own: accessgateprom exports them.
func (g *Checker) Stats() Stats {
	s := &g.stats
	return Stats{
		Allowed: s.allowed.Load(), Denied: s.denied.Load(), Unavailable: s.unavailable.Load(), AllowedUnavailable: s.allowedFailOpen.Load(),
		CacheHits: s.hits.Load(), CacheMisses: s.misses.Load(),
		LookupsAllowed: s.lookupAllowed.Load(), LookupsDenied: s.lookupDenied.Load(), LookupsFailed: s.lookupFailed.Load(), LookupsMisconfigured: s.lookupMisconfigured.Load(),
	}
}

package breaker

import (
	"slices"
	"strings"
	"sync"
)

// Registry holds one named breaker per call site (account-access,
// account-read, notification, mail-send, ...), created on first use from
// shared defaults and per-name overrides.
type Registry struct {
	mu        sync.RWMutex
	defaults  Config
	overrides map[string]Config
	breakers  map[string]*Breaker
	disabled  bool
}

// NewRegistry validates defaults and every override (merged over the
// defaults) up front, so Get never fails. A zero field in an override
// inherits the default.
func NewRegistry(defaults Config, overrides map[string]Config) (*Registry, error) {
	if _, err := defaults.withDefaults(); err != nil {
		return nil, err
	}
	r := &Registry{defaults: defaults, overrides: map[string]Config{}, breakers: map[string]*Breaker{}}
	for name, o := range overrides {
		merged := merge(defaults, o)
		if _, err := merged.withDefaults(); err != nil {
			if ce, ok := err.(*ConfigError); ok {
				ce.Field = name + "." + ce.Field
			}
			return nil, err
		}
		r.overrides[name] = merged
	}
	return r, nil
}

// Get returns the named breaker, creating it on first use. While the
// registry is disabled, new breakers start DISABLED.
func (r *Registry) Get(name string) *Breaker {
	r.mu.RLock()
	b, ok := r.breakers[name]
	r.mu.RUnlock()
	if ok {
		return b
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.breakers[name]; ok {
		return b
	}
	cfg, ok := r.overrides[name]
	if !ok {
		cfg = r.defaults
	}
	b, err := New(name, cfg)
	if err != nil {
		panic("breaker: registry config validated at construction failed later: " + err.Error())
	}
	if r.disabled {
		b.Disable()
	}
	r.breakers[name] = b
	return b
}

// All returns every breaker created so far, sorted by name.
func (r *Registry) All() []*Breaker {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Breaker, 0, len(r.breakers))
	for _, b := range r.breakers {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b *Breaker) int { return strings.Compare(a.name, b.name) })
	return out
}

// SetEnabled is the global kill switch (CIRCUITBREAKER_ENABLED=false):
// disabled, every breaker is DISABLED, admitting all calls and recording
// nothing; enabled again, every breaker is reset to CLOSED.
func (r *Registry) SetEnabled(enabled bool) {
	r.mu.Lock()
	r.disabled = !enabled
	all := make([]*Breaker, 0, len(r.breakers))
	for _, b := range r.breakers {
		all = append(all, b)
	}
	r.mu.Unlock()
	for _, b := range all {
		if enabled {
			b.Reset()
		} else {
			b.Disable()
		}
	}
}

// Enabled reports the kill switch.
func (r *Registry) Enabled() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return !r.disabled
}

// merge returns base with every non-zero field of o applied.
func merge(base, o Config) Config {
	override(&base.FailureRateThreshold, o.FailureRateThreshold)
	override(&base.SlowCallRateThreshold, o.SlowCallRateThreshold)
	override(&base.SlowCallDurationThreshold, o.SlowCallDurationThreshold)
	override(&base.MinimumNumberOfCalls, o.MinimumNumberOfCalls)
	override(&base.WindowType, o.WindowType)
	override(&base.WindowSize, o.WindowSize)
	override(&base.WaitDurationInOpenState, o.WaitDurationInOpenState)
	override(&base.PermittedNumberOfCallsInHalfOpenState, o.PermittedNumberOfCallsInHalfOpenState)
	override(&base.MaxWaitDurationInHalfOpenState, o.MaxWaitDurationInHalfOpenState)
	override(&base.AutomaticTransitionFromOpenToHalfOpen, o.AutomaticTransitionFromOpenToHalfOpen)
	override(&base.Clock, o.Clock)
	if o.WaitIntervalFunction != nil {
		base.WaitIntervalFunction = o.WaitIntervalFunction
	}
	if o.Classifier != nil {
		base.Classifier = o.Classifier
	}
	if o.OnEvent != nil {
		base.OnEvent = o.OnEvent
	}
	return base
}

// override sets *dst to v unless v is the zero value ("inherit").
func override[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

package breaker

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Override changes one circuit's copy of a registry's defaults. It is a
// function rather than a partial Config so that setting a field to its zero
// value (CountBased, false, 0) is an override like any other, as
// Resilience4j's CircuitBreakerConfig.from(defaults) builder allows.
type Override func(*Config)

// Registry holds one named breaker per call site (account-access,
// account-read, notification, mail-send, ...), created on first use from
// shared defaults and per-name overrides, with a global kill switch.
type Registry struct {
	mu       sync.RWMutex
	defaults Config            // validated, with defaults applied
	configs  map[string]Config // the same, with each override applied
	breakers map[string]*Breaker
	disabled bool
	totals   bool // EnableTotals was called

	switching sync.Mutex // serialises SetEnabled
}

// NewRegistry validates defaults and every override (applied to a copy of
// the defaults) up front, so Get never fails. An error names the circuit and
// the field.
func NewRegistry(defaults Config, overrides map[string]Override) (*Registry, error) {
	d, err := defaults.withDefaults()
	if err != nil {
		return nil, err
	}
	configs := make(map[string]Config, len(overrides))
	for name, o := range overrides {
		c := defaults
		if o != nil {
			o(&c)
		}
		if configs[name], err = c.withDefaults(); err != nil {
			return nil, qualify(err, name+".")
		}
	}
	return newRegistry(d, configs), nil
}

// newRegistry takes configurations that are validated and defaulted.
func newRegistry(defaults Config, configs map[string]Config) *Registry {
	return &Registry{defaults: defaults, configs: configs, breakers: map[string]*Breaker{}}
}

// qualify prefixes the field a *ConfigError names.
func qualify(err error, prefix string) error {
	var ce *ConfigError
	if errors.As(err, &ce) {
		q := *ce
		q.Field = prefix + ce.Field
		return &q
	}
	return fmt.Errorf("%s%w", prefix, err)
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
	if b, ok := r.breakers[name]; ok {
		r.mu.Unlock()
		return b
	}
	cfg, ok := r.configs[name]
	if !ok {
		cfg = r.defaults
	}
	b = newBreaker(name, cfg)
	if r.disabled {
		// Queued, not delivered: the consumers run after the unlock, so
		// they may use the registry.
		b.queueTransition(Disabled)
	}
	if r.totals {
		b.EnableTotals()
	}
	r.breakers[name] = b
	r.mu.Unlock()
	b.drain()
	return b
}

// EnableTotals starts counting calls (Breaker.EnableTotals) on every breaker
// the registry has and will create.
func (r *Registry) EnableTotals() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.totals = true
	for _, b := range r.breakers {
		b.EnableTotals()
	}
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

// SetEnabled is the global kill switch (CIRCUITBREAKER_ENABLED=false).
// Disabling moves every breaker to DISABLED: it admits all calls and records
// nothing. Enabling moves the DISABLED ones to CLOSED and leaves the others
// (say, one forced open while the switch was off) alone. Setting the value
// the registry already has does nothing, so a configuration reload never
// closes an OPEN circuit. Calls are serialised: when one returns, every
// breaker agrees with Enabled. Do not call it from an event consumer of one
// of the registry's breakers.
func (r *Registry) SetEnabled(enabled bool) {
	r.switching.Lock()
	defer r.switching.Unlock()
	r.mu.Lock()
	if r.disabled == !enabled {
		r.mu.Unlock()
		return
	}
	r.disabled = !enabled
	// Breakers created from now on see the new value in Get; those created
	// before are all in this list.
	all := make([]*Breaker, 0, len(r.breakers))
	for _, b := range r.breakers {
		all = append(all, b)
	}
	r.mu.Unlock()
	for _, b := range all {
		if enabled {
			b.enableIfDisabled()
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

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
	// reloading serialises Update and Reload from start to end, so that
	// the last to return has set every circuit and the defaults alike.
	reloading sync.Mutex
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

// Update changes the named circuit's configuration without losing its
// state: a CLOSED or METRICS_ONLY circuit keeps the outcomes its window
// holds, judged from the next outcome on by cfg's thresholds and minimum,
// as long as the window keeps its shape (type, size and, for TIME_BASED,
// whether slow calls are tracked); otherwise it starts an empty window, and
// Update reports false. An OPEN, HALF_OPEN, DISABLED or FORCED_OPEN circuit
// stays as it is (an OPEN wait is not cut short) and uses cfg from its next
// transition. Calls in flight during the update count for nothing. Every
// breaker keeps the Clock, Logger and OnEvent it was built with. cfg is
// validated (an error names the circuit and the field and changes nothing)
// and, for a circuit not created yet, used when Get creates it.
func (r *Registry) Update(name string, cfg Config) (windowKept bool, err error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return false, qualify(err, name+".")
	}
	r.reloading.Lock()
	defer r.reloading.Unlock()
	r.mu.Lock()
	r.configs[name] = c
	b := r.breakers[name]
	r.mu.Unlock()
	if b == nil {
		return true, nil
	}
	return b.update(c), nil
}

// Reload applies a configuration file to a running registry the way
// Update does, circuit by circuit: each existing breaker takes its new
// settings (its circuit's, or the new defaults) and keeps its state where
// the window's shape allows; breakers created later use the new settings.
// It returns the names of the circuits whose windows had to start empty,
// sorted. The kill switch follows the file (enabled unless it says
// "enabled": false), and, as SetEnabled, does nothing when it already
// agrees, so a reload never closes an OPEN circuit. A file with an invalid
// setting changes nothing. Reloads (and Updates) are ordered: when two run
// at once, the one that returns last has set every circuit, existing and
// future, from its file. Do not call it from an event consumer of one of the
// registry's breakers.
func (r *Registry) Reload(f File) (dropped []string, err error) {
	defaults, configs, err := f.configs()
	if err != nil {
		return nil, err
	}
	r.reloading.Lock()
	defer r.reloading.Unlock()
	r.mu.Lock()
	r.defaults, r.configs = defaults, configs
	all := make([]*Breaker, 0, len(r.breakers))
	for _, b := range r.breakers {
		all = append(all, b)
	}
	r.mu.Unlock()
	slices.SortFunc(all, func(a, b *Breaker) int { return strings.Compare(a.name, b.name) })
	for _, b := range all {
		c, ok := configs[b.name]
		if !ok {
			c = defaults
		}
		if !b.update(c) {
			dropped = append(dropped, b.name)
		}
	}
	r.SetEnabled(f.Enabled == nil || *f.Enabled)
	return dropped, nil
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

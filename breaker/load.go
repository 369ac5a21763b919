package breaker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Settings is the serialisable form of a Config, with Resilience4j's
// property names. Unset fields inherit; a field that is set must be valid
// (an explicit 0 window size is an error, not "default").
type Settings struct {
	FailureRateThreshold                         *float64 `json:"failureRateThreshold,omitempty"`
	SlowCallRateThreshold                        *float64 `json:"slowCallRateThreshold,omitempty"`
	SlowCallDurationThreshold                    *string  `json:"slowCallDurationThreshold,omitempty"`
	RecordCallDurations                          *bool    `json:"recordCallDurations,omitempty"`
	MinimumNumberOfCalls                         *int     `json:"minimumNumberOfCalls,omitempty"`
	SlidingWindowType                            *string  `json:"slidingWindowType,omitempty"`
	SlidingWindowSize                            *int     `json:"slidingWindowSize,omitempty"`
	WaitDurationInOpenState                      *string  `json:"waitDurationInOpenState,omitempty"`
	PermittedNumberOfCallsInHalfOpenState        *int     `json:"permittedNumberOfCallsInHalfOpenState,omitempty"`
	MaxWaitDurationInHalfOpenState               *string  `json:"maxWaitDurationInHalfOpenState,omitempty"`
	AutomaticTransitionFromOpenToHalfOpenEnabled *bool    `json:"automaticTransitionFromOpenToHalfOpenEnabled,omitempty"`
	// OpenUntilCap is Config.OpenUntilCap (not a Resilience4j property).
	OpenUntilCap *string `json:"openUntilCap,omitempty"`

	// Backoff of the open wait, with Resilience4j's property names and
	// defaults: with enableExponentialBackoff each consecutive opening
	// waits exponentialBackoffMultiplier (default 1.5, at least 1) times
	// the previous one, starting at waitDurationInOpenState, up to
	// exponentialMaxWaitDurationInOpenState (default no bound); with
	// enableRandomizedWait each wait is drawn from ±randomizedWaitFactor
	// (default 0.5, in [0, 1)) around it. They build
	// Config.WaitIntervalFunction (ExponentialBackoff,
	// ExponentialRandomBackoff) from each circuit's own open wait.
	EnableExponentialBackoff              *bool    `json:"enableExponentialBackoff,omitempty"`
	ExponentialBackoffMultiplier          *float64 `json:"exponentialBackoffMultiplier,omitempty"`
	ExponentialMaxWaitDurationInOpenState *string  `json:"exponentialMaxWaitDurationInOpenState,omitempty"`
	EnableRandomizedWait                  *bool    `json:"enableRandomizedWait,omitempty"`
	RandomizedWaitFactor                  *float64 `json:"randomizedWaitFactor,omitempty"`
}

// File is a registry's configuration: the kill switch, shared defaults and
// per-circuit overrides, in JSON. (The package reads JSON and environment
// variables only, to stay free of dependencies; for YAML, convert it first,
// for example with sigs.k8s.io/yaml's YAMLToJSON.)
type File struct {
	// Enabled false disables every circuit (CIRCUITBREAKER_ENABLED=false).
	Enabled  *bool               `json:"enabled,omitempty"`
	Defaults Settings            `json:"defaults"`
	Circuits map[string]Settings `json:"circuits,omitempty"`
}

// ParseFile decodes a JSON File. It rejects every unknown key and every
// value of the wrong kind, each as a *ConfigError that names the key by its
// path (circuits.mail.slidingWindowSize) and, for a typo, suggests the
// nearest known key; several are joined (errors.Join). A duration is a
// string with its unit ("15s", "500ms"); a bare number is refused, since it
// could mean seconds or milliseconds.
func ParseFile(data []byte) (File, error) {
	var f File
	if err := checkKeys(data); err != nil {
		return f, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("breaker config: %w", err)
	}
	if dec.More() {
		return f, fmt.Errorf("breaker config: trailing data after the JSON object")
	}
	return f, nil
}

// Registry builds a registry from f, validating every field once. Each
// circuit's settings apply over the defaults, so a setting that is present
// wins even when it is a zero value (COUNT_BASED, false).
// To change a running registry's settings from a file, use
// Registry.Reload.
func (f File) Registry() (*Registry, error) {
	defaults, configs, err := f.configs()
	if err != nil {
		return nil, err
	}
	r := newRegistry(defaults, configs)
	if f.Enabled != nil && !*f.Enabled {
		r.SetEnabled(false)
	}
	return r, nil
}

// configs validates f and returns its defaults and per-circuit
// configurations, defaulted.
func (f File) configs() (Config, map[string]Config, error) {
	defaults, err := f.Defaults.config(Config{}, "defaults.")
	if err != nil {
		return Config{}, nil, err
	}
	configs := map[string]Config{}
	for _, name := range sortedKeys(f.Circuits) {
		c, err := f.Circuits[name].config(defaults, "circuits."+name+".")
		if err != nil {
			return Config{}, nil, err
		}
		configs[name] = c.defaulted()
	}
	return defaults.defaulted(), configs, nil
}

// config applies s over c and validates the result, naming fields by their
// keys after prefix. A field s sets must be valid even when it is 0; the
// fields it inherits from c were validated where c came from.
func (s Settings) config(c Config, prefix string) (Config, error) {
	given := map[field]bool{}
	bad := func(f field, v any, reason string) error {
		return &ConfigError{Field: prefix + f.key, Value: v, Reason: reason}
	}
	set := func(f field, present bool) bool {
		given[f] = present
		return present
	}
	assign(given, fieldFailureRate, s.FailureRateThreshold, &c.FailureRateThreshold)
	assign(given, fieldSlowRate, s.SlowCallRateThreshold, &c.SlowCallRateThreshold)
	assign(given, fieldMinimumCalls, s.MinimumNumberOfCalls, &c.MinimumNumberOfCalls)
	assign(given, fieldWindowSize, s.SlidingWindowSize, &c.WindowSize)
	assign(given, fieldHalfOpenCalls, s.PermittedNumberOfCallsInHalfOpenState, &c.PermittedNumberOfCallsInHalfOpenState)
	assign(given, fieldRecordDuration, s.RecordCallDurations, &c.RecordCallDurations)
	assign(given, fieldAutoHalfOpen, s.AutomaticTransitionFromOpenToHalfOpenEnabled, &c.AutomaticTransitionFromOpenToHalfOpen)
	for _, d := range []struct {
		f   field
		p   *string
		dst *time.Duration
	}{
		{fieldSlowDuration, s.SlowCallDurationThreshold, &c.SlowCallDurationThreshold},
		{fieldOpenWait, s.WaitDurationInOpenState, &c.WaitDurationInOpenState},
		{fieldHalfOpenMax, s.MaxWaitDurationInHalfOpenState, &c.MaxWaitDurationInHalfOpenState},
		{fieldOpenUntilCap, s.OpenUntilCap, &c.OpenUntilCap},
	} {
		if !set(d.f, d.p != nil) {
			continue
		}
		v, err := time.ParseDuration(*d.p)
		if err != nil {
			return c, bad(d.f, *d.p, "is not a duration like 500ms or 15s")
		}
		*d.dst = v
	}
	if set(fieldWindowType, s.SlidingWindowType != nil) {
		switch strings.ToUpper(*s.SlidingWindowType) {
		case "TIME_BASED":
			c.WindowType = TimeBased
		case "COUNT_BASED":
			c.WindowType = CountBased
		default:
			return c, bad(fieldWindowType, *s.SlidingWindowType, "must be TIME_BASED or COUNT_BASED")
		}
	}
	keys := func(f field) string { return prefix + f.key }
	if err := c.validate(keys, func(f field) bool { return given[f] }); err != nil {
		return c, err
	}
	return s.applyBackoff(c, prefix)
}

// applyBackoff applies s's backoff settings over those c inherited and
// builds c's wait function from its own open wait.
func (s Settings) applyBackoff(c Config, prefix string) (Config, error) {
	fb := fileBackoff{multiplier: defaultBackoffMultiplier, factor: defaultRandomizedFactor}
	if c.backoff != nil {
		fb = *c.backoff
	} else if s.EnableExponentialBackoff == nil && s.EnableRandomizedWait == nil && s.ExponentialBackoffMultiplier == nil &&
		s.ExponentialMaxWaitDurationInOpenState == nil && s.RandomizedWaitFactor == nil {
		return c, nil // no backoff from a file: leave WaitIntervalFunction alone
	}
	bad := func(key string, v any, reason string) error {
		return &ConfigError{Field: prefix + key, Value: v, Reason: reason}
	}
	if s.EnableExponentialBackoff != nil {
		fb.exponential = *s.EnableExponentialBackoff
	}
	if s.EnableRandomizedWait != nil {
		fb.randomized = *s.EnableRandomizedWait
	}
	if m := s.ExponentialBackoffMultiplier; m != nil {
		if *m < 1 || math.IsInf(*m, 0) || *m != *m {
			return c, bad("exponentialBackoffMultiplier", *m, "must be at least 1")
		}
		fb.multiplier = *m
	}
	if f := s.RandomizedWaitFactor; f != nil {
		if *f < 0 || *f >= 1 || *f != *f {
			return c, bad("randomizedWaitFactor", *f, "must be in [0, 1)")
		}
		fb.factor = *f
	}
	if m := s.ExponentialMaxWaitDurationInOpenState; m != nil {
		d, err := time.ParseDuration(*m)
		if err != nil || d <= 0 {
			return c, bad("exponentialMaxWaitDurationInOpenState", *m, "must be a positive duration like 5m")
		}
		fb.max = d
	}
	wait := c.WaitDurationInOpenState
	if wait == 0 {
		wait = defaultWaitDurationInOpenState
	}
	if fb.max > 0 && fb.max < wait && fb.exponential {
		return c, bad("exponentialMaxWaitDurationInOpenState", fb.max, fmt.Sprintf("must not be shorter than waitDurationInOpenState (%v)", wait))
	}
	c.backoff = &fb
	c.WaitIntervalFunction = fb.interval(wait)
	return c, nil
}

// assign copies a setting that is present into dst and marks it given.
func assign[T any](given map[field]bool, f field, p *T, dst *T) {
	if p != nil {
		given[f] = true
		*dst = *p
	}
}

// ApplyEnv overrides f.Enabled and f.Defaults from environment variables
// named prefix + "_" + the upper-snake property name, for example
// CIRCUITBREAKER_ENABLED or CIRCUITBREAKER_FAILURE_RATE_THRESHOLD. lookup is
// os.LookupEnv in production. Variables are read in a fixed order, so the
// first bad one is always the one reported. A lookup function cannot list
// the variables that are set, so a misspelt name goes unnoticed here: use
// ApplyEnviron with os.Environ() to have it reported.
func (f *File) ApplyEnv(prefix string, lookup func(string) (string, bool)) error {
	e := env{prefix: prefix, lookup: lookup}
	for _, v := range f.envVars() {
		if err := v.apply(e); err != nil {
			return err
		}
	}
	return nil
}

// ApplyEnviron is ApplyEnv over environ, a list of "NAME=value" entries as
// os.Environ returns, and it also refuses every variable under prefix + "_"
// that is not one of the settings, naming it and the nearest known name (a
// typo such as CIRCUITBREAKER_FAILURE_RATE_TRESHOLD is not silently
// ignored). Give the breaker settings a prefix of their own.
func (f *File) ApplyEnviron(prefix string, environ []string) error {
	if prefix == "" {
		return errors.New("breaker config: ApplyEnviron needs a prefix (CIRCUITBREAKER): every variable would be under an empty one")
	}
	vals := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vals[k] = v
		}
	}
	known := map[string]string{}
	for _, v := range f.envVars() {
		known[prefix+"_"+v.prop] = ""
	}
	var errs []error
	for _, k := range sortedKeys(vals) {
		if _, ok := known[k]; !ok && strings.HasPrefix(k, prefix+"_") {
			msg := fmt.Sprintf("breaker config: unknown variable %s", k)
			if s := nearest(k, sortedKeys(known)); s != "" {
				msg += fmt.Sprintf("; did you mean %s?", s)
			}
			errs = append(errs, errors.New(msg))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return f.ApplyEnv(prefix, func(k string) (string, bool) { v, ok := vals[k]; return v, ok })
}

// envSetting is one environment variable: its property name and how it
// is applied.
type envSetting struct {
	prop  string
	apply func(env) error
}

// envVars lists the variables ApplyEnv reads, in the order it reads them.
func (f *File) envVars() []envSetting {
	d := &f.Defaults
	parseFloat := func(v string) (float64, error) { return strconv.ParseFloat(v, 64) }
	parseString := func(v string) (string, error) { return v, nil }
	return []envSetting{
		envVar("ENABLED", "a boolean", strconv.ParseBool, &f.Enabled),
		envVar("FAILURE_RATE_THRESHOLD", "a number", parseFloat, &d.FailureRateThreshold),
		envVar("SLOW_CALL_RATE_THRESHOLD", "a number", parseFloat, &d.SlowCallRateThreshold),
		envVar("SLOW_CALL_DURATION_THRESHOLD", "", parseString, &d.SlowCallDurationThreshold),
		envVar("RECORD_CALL_DURATIONS", "a boolean", strconv.ParseBool, &d.RecordCallDurations),
		envVar("MINIMUM_NUMBER_OF_CALLS", "an integer", strconv.Atoi, &d.MinimumNumberOfCalls),
		envVar("SLIDING_WINDOW_TYPE", "", parseString, &d.SlidingWindowType),
		envVar("SLIDING_WINDOW_SIZE", "an integer", strconv.Atoi, &d.SlidingWindowSize),
		envVar("WAIT_DURATION_IN_OPEN_STATE", "", parseString, &d.WaitDurationInOpenState),
		envVar("PERMITTED_NUMBER_OF_CALLS_IN_HALF_OPEN_STATE", "an integer", strconv.Atoi, &d.PermittedNumberOfCallsInHalfOpenState),
		envVar("MAX_WAIT_DURATION_IN_HALF_OPEN_STATE", "", parseString, &d.MaxWaitDurationInHalfOpenState),
		envVar("AUTOMATIC_TRANSITION_FROM_OPEN_TO_HALF_OPEN_ENABLED", "a boolean", strconv.ParseBool, &d.AutomaticTransitionFromOpenToHalfOpenEnabled),
		envVar("OPEN_UNTIL_CAP", "", parseString, &d.OpenUntilCap),
		envVar("ENABLE_EXPONENTIAL_BACKOFF", "a boolean", strconv.ParseBool, &d.EnableExponentialBackoff),
		envVar("EXPONENTIAL_BACKOFF_MULTIPLIER", "a number", parseFloat, &d.ExponentialBackoffMultiplier),
		envVar("EXPONENTIAL_MAX_WAIT_DURATION_IN_OPEN_STATE", "", parseString, &d.ExponentialMaxWaitDurationInOpenState),
		envVar("ENABLE_RANDOMIZED_WAIT", "a boolean", strconv.ParseBool, &d.EnableRandomizedWait),
		envVar("RANDOMIZED_WAIT_FACTOR", "a number", parseFloat, &d.RandomizedWaitFactor),
	}
}

type env struct {
	prefix string
	lookup func(string) (string, bool)
}

// envVar is the variable prefix_prop: when it is set, it sets *dst; what
// names the expected form for the error. Strings are validated later, with
// the rest of the settings.
func envVar[T any](prop, what string, parse func(string) (T, error), dst **T) envSetting {
	return envSetting{prop, func(e env) error {
		name := e.prefix + "_" + prop
		v, ok := e.lookup(name)
		if !ok {
			return nil
		}
		x, err := parse(v)
		if err != nil {
			return fmt.Errorf("breaker config: %s=%q is not %s", name, v, what)
		}
		*dst = &x
		return nil
	}}
}

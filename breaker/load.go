package breaker

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// ParseFile decodes a JSON File, rejecting unknown fields.
func ParseFile(data []byte) (File, error) {
	var f File
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

// Registry builds a registry from f, validating every field. Each circuit's
// settings apply over the defaults, so a setting that is present wins even
// when it is a zero value (COUNT_BASED, false).
func (f File) Registry() (*Registry, error) {
	defaults, err := f.Defaults.apply(Config{}, "defaults.")
	if err != nil {
		return nil, err
	}
	if _, err := defaults.withDefaults(); err != nil {
		return nil, qualify(err, "defaults.")
	}
	configs := map[string]Config{}
	for name, s := range f.Circuits {
		prefix := "circuits." + name + "."
		c, err := s.apply(defaults, prefix)
		if err != nil {
			return nil, err
		}
		if _, err := c.withDefaults(); err != nil {
			return nil, qualify(err, prefix)
		}
		configs[name] = c
	}
	r := newRegistry(defaults, configs)
	if f.Enabled != nil && !*f.Enabled {
		r.SetEnabled(false)
	}
	return r, nil
}

// apply sets c's fields from s; prefix qualifies field names in errors.
func (s Settings) apply(c Config, prefix string) (Config, error) {
	bad := func(field string, v any, reason string) error {
		return &ConfigError{Field: prefix + field, Value: v, Reason: reason}
	}
	rate := func(field string, p *float64, dst *float64) error {
		if p == nil {
			return nil
		}
		if *p <= 0 || *p > 100 {
			return bad(field, *p, "must be in (0, 100]")
		}
		*dst = *p
		return nil
	}
	positive := func(field string, p *int, dst *int, hi int) error {
		if p == nil {
			return nil
		}
		if *p < 1 || *p > hi {
			return bad(field, *p, fmt.Sprintf("must be in [1, %d]", hi))
		}
		*dst = *p
		return nil
	}
	duration := func(field string, p *string, dst *time.Duration, allowZero bool) error {
		if p == nil {
			return nil
		}
		d, err := time.ParseDuration(*p)
		if err != nil {
			return bad(field, *p, "is not a duration like 500ms or 15s")
		}
		if d < 0 || (d == 0 && !allowZero) {
			return bad(field, *p, "must be positive")
		}
		*dst = d
		return nil
	}
	for _, err := range []error{
		rate("failureRateThreshold", s.FailureRateThreshold, &c.FailureRateThreshold),
		rate("slowCallRateThreshold", s.SlowCallRateThreshold, &c.SlowCallRateThreshold),
		duration("slowCallDurationThreshold", s.SlowCallDurationThreshold, &c.SlowCallDurationThreshold, false),
		positive("minimumNumberOfCalls", s.MinimumNumberOfCalls, &c.MinimumNumberOfCalls, maxCount),
		positive("slidingWindowSize", s.SlidingWindowSize, &c.WindowSize, maxWindowSize),
		duration("waitDurationInOpenState", s.WaitDurationInOpenState, &c.WaitDurationInOpenState, false),
		positive("permittedNumberOfCallsInHalfOpenState", s.PermittedNumberOfCallsInHalfOpenState, &c.PermittedNumberOfCallsInHalfOpenState, maxCount),
		duration("maxWaitDurationInHalfOpenState", s.MaxWaitDurationInHalfOpenState, &c.MaxWaitDurationInHalfOpenState, true),
	} {
		if err != nil {
			return c, err
		}
	}
	if s.SlidingWindowType != nil {
		switch strings.ToUpper(*s.SlidingWindowType) {
		case "TIME_BASED":
			c.WindowType = TimeBased
		case "COUNT_BASED":
			c.WindowType = CountBased
		default:
			return c, bad("slidingWindowType", *s.SlidingWindowType, "must be TIME_BASED or COUNT_BASED")
		}
	}
	if s.RecordCallDurations != nil {
		c.RecordCallDurations = *s.RecordCallDurations
	}
	if s.AutomaticTransitionFromOpenToHalfOpenEnabled != nil {
		c.AutomaticTransitionFromOpenToHalfOpen = *s.AutomaticTransitionFromOpenToHalfOpenEnabled
	}
	return c, nil
}

// ApplyEnv overrides f.Enabled and f.Defaults from environment variables
// named prefix + "_" + the upper-snake property name, for example
// CIRCUITBREAKER_ENABLED or CIRCUITBREAKER_FAILURE_RATE_THRESHOLD. lookup is
// os.LookupEnv in production. Variables are read in a fixed order, so the
// first bad one is always the one reported.
func (f *File) ApplyEnv(prefix string, lookup func(string) (string, bool)) error {
	d := &f.Defaults
	e := env{prefix: prefix, lookup: lookup}
	parseFloat := func(v string) (float64, error) { return strconv.ParseFloat(v, 64) }
	parseString := func(v string) (string, error) { return v, nil }
	for _, err := range []error{
		envVar(e, "ENABLED", "a boolean", strconv.ParseBool, &f.Enabled),
		envVar(e, "FAILURE_RATE_THRESHOLD", "a number", parseFloat, &d.FailureRateThreshold),
		envVar(e, "SLOW_CALL_RATE_THRESHOLD", "a number", parseFloat, &d.SlowCallRateThreshold),
		envVar(e, "SLOW_CALL_DURATION_THRESHOLD", "", parseString, &d.SlowCallDurationThreshold),
		envVar(e, "RECORD_CALL_DURATIONS", "a boolean", strconv.ParseBool, &d.RecordCallDurations),
		envVar(e, "MINIMUM_NUMBER_OF_CALLS", "an integer", strconv.Atoi, &d.MinimumNumberOfCalls),
		envVar(e, "SLIDING_WINDOW_TYPE", "", parseString, &d.SlidingWindowType),
		envVar(e, "SLIDING_WINDOW_SIZE", "an integer", strconv.Atoi, &d.SlidingWindowSize),
		envVar(e, "WAIT_DURATION_IN_OPEN_STATE", "", parseString, &d.WaitDurationInOpenState),
		envVar(e, "PERMITTED_NUMBER_OF_CALLS_IN_HALF_OPEN_STATE", "an integer", strconv.Atoi, &d.PermittedNumberOfCallsInHalfOpenState),
		envVar(e, "MAX_WAIT_DURATION_IN_HALF_OPEN_STATE", "", parseString, &d.MaxWaitDurationInHalfOpenState),
		envVar(e, "AUTOMATIC_TRANSITION_FROM_OPEN_TO_HALF_OPEN_ENABLED", "a boolean", strconv.ParseBool, &d.AutomaticTransitionFromOpenToHalfOpenEnabled),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

type env struct {
	prefix string
	lookup func(string) (string, bool)
}

// envVar sets *dst from the variable prefix_prop when it is set; what names
// the expected form for the error. Strings are validated later, with the
// rest of the settings.
func envVar[T any](e env, prop, what string, parse func(string) (T, error), dst **T) error {
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
}

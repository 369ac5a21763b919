package breaker_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

func TestRegistryDefaultsOverridesAndKillSwitch(t *testing.T) {
	clk := newClock()
	r, err := breaker.NewRegistry(
		breaker.Config{WindowSize: 30, MinimumNumberOfCalls: 10, WaitDurationInOpenState: 15 * time.Second, PermittedNumberOfCallsInHalfOpenState: 3, Clock: clk},
		map[string]breaker.Override{"mail-send": func(c *breaker.Config) { c.FailureRateThreshold = 80 }},
	)
	if err != nil {
		t.Fatal(err)
	}
	access, read := r.Get("account-access"), r.Get("account-read")
	if access == read || r.Get("account-access") != access {
		t.Fatal("Get must return one breaker per name")
	}
	if c := r.Get("mail-send").Config(); c.FailureRateThreshold != 80 || c.WindowSize != 30 {
		t.Fatalf("override did not merge over defaults: %+v", c)
	}
	// One call site's outage does not open another's circuit.
	read.Open()
	if access.State() != breaker.Closed {
		t.Fatal("opening account-read opened account-access")
	}
	r.SetEnabled(false)
	for _, b := range append(r.All(), r.Get("notification")) {
		if b.State() != breaker.Disabled {
			t.Fatalf("%s is %s with the kill switch off", b.Name(), b.State())
		}
	}
	r.SetEnabled(true)
	var names []string
	for _, b := range r.All() {
		names = append(names, b.Name())
		if b.State() != breaker.Closed {
			t.Fatalf("%s is %s after re-enabling", b.Name(), b.State())
		}
	}
	if got := strings.Join(names, ","); got != "account-access,account-read,mail-send,notification" {
		t.Fatalf("All() = %s", got)
	}
	if _, err := breaker.NewRegistry(breaker.Config{}, map[string]breaker.Override{"bad": func(c *breaker.Config) { c.FailureRateThreshold = 101 }}); err == nil || !strings.Contains(err.Error(), "bad.FailureRateThreshold") {
		t.Fatalf("invalid override: %v", err)
	}
}

const seedJSON = `{
  "enabled": true,
  "defaults": {
    "slidingWindowType": "TIME_BASED",
    "slidingWindowSize": 30,
    "minimumNumberOfCalls": 10,
    "failureRateThreshold": 50,
    "waitDurationInOpenState": "15s",
    "permittedNumberOfCallsInHalfOpenState": 3,
    "maxWaitDurationInHalfOpenState": "60s"
  },
  "circuits": {"mail-send": {"failureRateThreshold": 80}}
}`

func TestLoadJSONAndEnv(t *testing.T) {
	f, err := breaker.ParseFile([]byte(seedJSON))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CIRCUITBREAKER_ENABLED": "false", "CIRCUITBREAKER_SLIDING_WINDOW_SIZE": "60"}
	if err := f.ApplyEnv("CIRCUITBREAKER", func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	r, err := f.Registry()
	if err != nil {
		t.Fatal(err)
	}
	c := r.Get("account-access").Config()
	if c.WindowType != breaker.TimeBased || c.WindowSize != 60 || c.MinimumNumberOfCalls != 10 || c.WaitDurationInOpenState != 15*time.Second || c.MaxWaitDurationInHalfOpenState != time.Minute {
		t.Fatalf("loaded config %+v", c)
	}
	if r.Enabled() || r.Get("account-access").State() != breaker.Disabled {
		t.Fatal("CIRCUITBREAKER_ENABLED=false did not disable the registry")
	}
	if r.Get("mail-send").Config().FailureRateThreshold != 80 {
		t.Fatal("per-circuit override lost")
	}
}

func TestLoadRejectsBadValuesNamingTheField(t *testing.T) {
	cases := map[string]string{
		`{"defaults":{"failureRateThreshold":101}}`:                "defaults.failureRateThreshold",
		`{"defaults":{"slidingWindowSize":0}}`:                     "defaults.slidingWindowSize",
		`{"defaults":{"waitDurationInOpenState":"-1s"}}`:           "defaults.waitDurationInOpenState",
		`{"defaults":{"waitDurationInOpenState":"soon"}}`:          "defaults.waitDurationInOpenState",
		`{"defaults":{"permittedNumberOfCallsInHalfOpenState":0}}`: "defaults.permittedNumberOfCallsInHalfOpenState",
		`{"circuits":{"mail":{"slidingWindowType":"SOMETIMES"}}}`:  "circuits.mail.slidingWindowType",
		`{"defaults":{"failureRate":50}}`:                          `defaults.failureRate=50: unknown key; did you mean "failureRateThreshold"?`,
	}
	for in, want := range cases {
		f, err := breaker.ParseFile([]byte(in))
		if err == nil {
			_, err = f.Registry()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming %s", in, err, want)
		}
	}
	var f breaker.File
	err := f.ApplyEnv("CIRCUITBREAKER", func(k string) (string, bool) { return "lots", k == "CIRCUITBREAKER_SLIDING_WINDOW_SIZE" })
	if err == nil || !strings.Contains(err.Error(), "CIRCUITBREAKER_SLIDING_WINDOW_SIZE") {
		t.Errorf("bad env value: %v", err)
	}
}

func FuzzParseFile(f *testing.F) {
	f.Add([]byte(`{"defaults":{"failureRateThreshold":50,"slidingWindowSize":10}}`))
	f.Add([]byte(`{"enabled":false,"circuits":{"a":{"waitDurationInOpenState":"1s"}}}`))
	f.Add([]byte(`{"defaults":{"slidingWindowType":"count_based","minimumNumberOfCalls":1e9}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := breaker.ParseFile(data)
		if err != nil {
			return
		}
		r, err := file.Registry()
		if err != nil {
			var ce *breaker.ConfigError
			if !errors.As(err, &ce) || ce.Field == "" {
				t.Fatalf("validation error without a field: %v", err)
			}
			return
		}
		c := r.Get("any").Config()
		if c.FailureRateThreshold <= 0 || c.FailureRateThreshold > 100 || c.WindowSize < 1 || c.PermittedNumberOfCallsInHalfOpenState < 1 || c.WaitDurationInOpenState <= 0 || c.MinimumNumberOfCalls < 1 {
			t.Fatalf("accepted an invalid config: %+v", c)
		}
	})
}

// One validator: a field set explicitly to 0 in a file is an error where the
// value must be positive, while a zero in a Config means its default; both
// errors name the field as the user wrote it.
func TestExplicitZeroInAFileIsAnErrorButNotInAConfig(t *testing.T) {
	for _, key := range []string{"failureRateThreshold", "slidingWindowSize", "minimumNumberOfCalls", "permittedNumberOfCallsInHalfOpenState"} {
		f, err := breaker.ParseFile(fmt.Appendf(nil, `{"circuits":{"mail":{%q:0}}}`, key))
		if err != nil {
			t.Fatal(err)
		}
		var ce *breaker.ConfigError
		if _, err := f.Registry(); !errors.As(err, &ce) || ce.Field != "circuits.mail."+key {
			t.Errorf("%s: 0 in a file: %v, want a ConfigError naming circuits.mail.%s", key, err, key)
		}
	}
	for _, key := range []string{"waitDurationInOpenState", "slowCallDurationThreshold"} {
		f, _ := breaker.ParseFile(fmt.Appendf(nil, `{"defaults":{%q:"0s"}}`, key))
		if _, err := f.Registry(); err == nil || !strings.Contains(err.Error(), "defaults."+key) {
			t.Errorf("%s: 0s in a file: %v", key, err)
		}
	}
	f, _ := breaker.ParseFile([]byte(`{"defaults":{"maxWaitDurationInHalfOpenState":"0s"}}`))
	if _, err := f.Registry(); err != nil {
		t.Errorf("maxWaitDurationInHalfOpenState 0s means wait for the trials: %v", err)
	}
	if _, err := breaker.New("x", breaker.Config{}); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}

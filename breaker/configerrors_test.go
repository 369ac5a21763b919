package breaker_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// TestConfigErrorsNameTheKeyAndSuggest: an error a user can act on names
// the key with its path, suggests the nearest key for a typo, and says what
// a value must be in the file's words, not Go's.
func TestConfigErrorsNameTheKeyAndSuggest(t *testing.T) {
	for _, tc := range []struct {
		in    string
		want  []string
		avoid []string
	}{
		{`{"defaults":{"failureRateTreshold":50}}`,
			[]string{"defaults.failureRateTreshold", `did you mean "failureRateThreshold"?`}, nil},
		{`{"circuits":{"mail-send":{"slidingWindowSise":10}}}`,
			[]string{"circuits.mail-send.slidingWindowSise", `did you mean "slidingWindowSize"?`}, nil},
		{`{"default":{"failureRateThreshold":50}}`,
			[]string{"default=", `did you mean "defaults"?`}, nil},
		{`{"defaults":{"colour":"blue"}}`,
			[]string{"defaults.colour", "unknown key"}, []string{"did you mean"}},
		{`{"defaults":{"waitDurationInOpenState":10}}`,
			[]string{"defaults.waitDurationInOpenState=10", `"15s"`, "bare number is refused"}, []string{"Go struct", "of type string"}},
		{`{"circuits":{"mail":{"slidingWindowSize":"10"}}}`,
			[]string{"circuits.mail.slidingWindowSize", "must be an integer"}, []string{"Go struct"}},
		{`{"circuits":{"mail":{"minimumNumberOfCalls":2.5}}}`,
			[]string{"circuits.mail.minimumNumberOfCalls", "must be an integer"}, nil},
		{`{"enabled":"no"}`, []string{"enabled", "must be true or false"}, nil},
		{`{"circuits":{"mail":50}}`, []string{"circuits.mail", "must be an object"}, nil},
	} {
		_, err := breaker.ParseFile([]byte(tc.in))
		if err == nil {
			t.Errorf("%s: accepted", tc.in)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.in, err, w)
			}
		}
		for _, a := range tc.avoid {
			if strings.Contains(err.Error(), a) {
				t.Errorf("%s: %q contains %q", tc.in, err, a)
			}
		}
		var ce *breaker.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: %T is not a *ConfigError", tc.in, err)
		}
	}
	// Every problem is reported at once.
	_, err := breaker.ParseFile([]byte(`{"defaults":{"failureRateTreshold":50,"waitDurationInOpenState":10}}`))
	if err == nil || !strings.Contains(err.Error(), "failureRateTreshold") || !strings.Contains(err.Error(), "waitDurationInOpenState") {
		t.Errorf("two problems: %v, want both", err)
	}
}

// TestUnknownEnvironmentVariablesAreReported: a misspelt variable under
// the prefix is an error naming the nearest one; other variables are not
// the package's business.
func TestUnknownEnvironmentVariablesAreReported(t *testing.T) {
	var f breaker.File
	err := f.ApplyEnviron("CIRCUITBREAKER", []string{"PATH=/bin", "CIRCUITBREAKER_FAILURE_RATE_TRESHOLD=80", "CIRCUITBREAKER_ENABLED=true"})
	if err == nil || !strings.Contains(err.Error(), "CIRCUITBREAKER_FAILURE_RATE_TRESHOLD") || !strings.Contains(err.Error(), "did you mean CIRCUITBREAKER_FAILURE_RATE_THRESHOLD?") {
		t.Fatalf("err = %v, want the unknown variable and a suggestion", err)
	}
	f = breaker.File{}
	if err := f.ApplyEnviron("CIRCUITBREAKER", []string{"PATH=/bin", "CIRCUITBREAKER_FAILURE_RATE_THRESHOLD=80", "CIRCUITBREAKER_SLIDING_WINDOW_TYPE=TIME_BASED", "OTHER_X=1"}); err != nil {
		t.Fatal(err)
	}
	if f.Defaults.FailureRateThreshold == nil || *f.Defaults.FailureRateThreshold != 80 || *f.Defaults.SlidingWindowType != "TIME_BASED" {
		t.Fatalf("settings %+v", f.Defaults)
	}
	if err := f.ApplyEnviron("", []string{"PATH=/bin"}); err == nil {
		t.Fatal("an empty prefix was accepted")
	}
}

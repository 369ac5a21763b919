package breaker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

func TestExponentialBackoff(t *testing.T) {
	f := breaker.ExponentialBackoff(10*time.Second, 2, time.Minute)
	for attempt, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 4: time.Minute, 100: time.Minute, 5000: time.Minute} {
		if got := f(attempt); got != want {
			t.Errorf("attempt %d: %v, want %v", attempt, got, want)
		}
	}
	if got := breaker.ExponentialBackoff(time.Second, 10, 0)(1000); got <= 0 {
		t.Errorf("unbounded, attempt 1000: %v, want the longest Duration, not an overflow", got)
	}
}

func TestExponentialRandomBackoffStaysInItsBounds(t *testing.T) {
	f := breaker.ExponentialRandomBackoff(10*time.Second, 2, 0.5, time.Minute)
	seen := map[time.Duration]bool{}
	for range 1000 {
		for attempt, d := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second} {
			got := f(attempt)
			if got < d/2 || got > min(d*3/2, time.Minute) {
				t.Fatalf("attempt %d: %v, want within ±50%% of %v and at most 1m", attempt, got, d)
			}
			seen[got] = true
		}
	}
	if len(seen) < 100 {
		t.Fatalf("%d distinct waits in 3000 draws: not randomized", len(seen))
	}
}

// TestBackoffFromAFile: Resilience4j's properties build the wait function
// from each circuit's own open wait, a circuit's settings applying over
// the defaults'.
func TestBackoffFromAFile(t *testing.T) {
	f, err := breaker.ParseFile([]byte(`{
	  "defaults": {"waitDurationInOpenState": "10s", "enableExponentialBackoff": true, "exponentialBackoffMultiplier": 2,
	               "exponentialMaxWaitDurationInOpenState": "1m"},
	  "circuits": {
	    "mail-send": {"waitDurationInOpenState": "20s"},
	    "notification": {"enableExponentialBackoff": false},
	    "account-read": {"enableRandomizedWait": true, "randomizedWaitFactor": 0.25}
	  }}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Registry()
	if err != nil {
		t.Fatal(err)
	}
	wait := func(name string, attempt int) time.Duration {
		fn := r.Get(name).Config().WaitIntervalFunction
		if fn == nil {
			return 0
		}
		return fn(attempt)
	}
	if a, b, c := wait("any", 1), wait("any", 2), wait("any", 4); a != 10*time.Second || b != 20*time.Second || c != time.Minute {
		t.Errorf("defaults: %v %v %v, want 10s 20s 1m", a, b, c)
	}
	if a, b := wait("mail-send", 1), wait("mail-send", 2); a != 20*time.Second || b != 40*time.Second {
		t.Errorf("mail-send starts from its own wait: %v %v, want 20s 40s", a, b)
	}
	if w := wait("notification", 3); w != 0 {
		t.Errorf("notification turned backoff off: %v", w)
	}
	if w := wait("account-read", 2); w < 15*time.Second || w > 25*time.Second {
		t.Errorf("account-read, randomized ±25%% around 20s: %v", w)
	}

	var e breaker.File
	if err := e.ApplyEnviron("CB", []string{"CB_ENABLE_EXPONENTIAL_BACKOFF=true", "CB_EXPONENTIAL_BACKOFF_MULTIPLIER=3", "CB_WAIT_DURATION_IN_OPEN_STATE=1s"}); err != nil {
		t.Fatal(err)
	}
	r, err = e.Registry()
	if err != nil {
		t.Fatal(err)
	}
	if w := r.Get("x").Config().WaitIntervalFunction(3); w != 9*time.Second {
		t.Errorf("from the environment: %v, want 9s", w)
	}
}

func TestBackoffSettingsAreValidated(t *testing.T) {
	for in, want := range map[string]string{
		`{"defaults":{"enableExponentialBackoff":true,"exponentialBackoffMultiplier":0.5}}`:            "defaults.exponentialBackoffMultiplier=0.5: must be at least 1",
		`{"circuits":{"m":{"enableRandomizedWait":true,"randomizedWaitFactor":1}}}`:                    "circuits.m.randomizedWaitFactor=1: must be in [0, 1)",
		`{"defaults":{"exponentialMaxWaitDurationInOpenState":"soon"}}`:                                "defaults.exponentialMaxWaitDurationInOpenState=soon",
		`{"defaults":{"enableExponentialBackoff":true,"exponentialMaxWaitDurationInOpenState":"10s"}}`: "must not be shorter than waitDurationInOpenState (1m0s)",
		`{"defaults":{"exponentialMaxWaitDurationInOpenState":60}}`:                                    "bare number is refused",
	} {
		f, err := breaker.ParseFile([]byte(in))
		if err == nil {
			_, err = f.Registry()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}

package breaker_test

import (
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// TestRegistryEventConsumerMayUseTheRegistry: with the kill switch off, a
// new breaker's CLOSED->DISABLED event reaches OnEvent outside the
// registry's lock, so a consumer that reads the registry does not deadlock
// Get (or any later Get).
func TestRegistryEventConsumerMayUseTheRegistry(t *testing.T) {
	var reg *breaker.Registry
	var seen []string
	cfg := breaker.Config{Clock: newClock(), OnEvent: func(e breaker.Event) {
		seen = append(seen, e.String())
		_ = reg.Enabled()
		_ = reg.All()
		_ = reg.Get("other")
	}}
	reg, err := breaker.NewRegistry(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg.SetEnabled(false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		reg.Get("account-read")
		reg.Get("mail-send")
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a deadlock, not a slow machine
		t.Fatal("Get deadlocked with an event consumer that reads the registry")
	}
	if got := reg.Get("account-read").State(); got != breaker.Disabled {
		t.Fatalf("state = %v, want DISABLED", got)
	}
	want := map[string]bool{"account-read: CLOSED -> DISABLED": true, "other: CLOSED -> DISABLED": true, "mail-send: CLOSED -> DISABLED": true}
	for _, s := range seen {
		delete(want, s)
	}
	if len(want) != 0 {
		t.Fatalf("events %q, missing %v", seen, want)
	}
}

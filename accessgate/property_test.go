package accessgate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/accessgate"
)

// TestPropertyNeverAllowsTheUnknown drives a gate over random sequences of
// lookup outcomes (allow, deny, 4xx, 5xx, timeout, refused) and clock
// advances, against a model of what the gate may know, and checks after
// every step: a request is allowed only when the latest decision for its
// key was an allow within the allow TTL (or was just made); a denial only
// when it was a deny within the deny TTL; a failure is answered
// unavailable and never cached (the next check asks again).
func TestPropertyNeverAllowsTheUnknown(t *testing.T) {
	type outcome int
	const (
		allow outcome = iota
		deny
		status4xx
		status5xx
		timeout
		refused
	)
	errs := map[outcome]error{
		status4xx: &accessgate.StatusError{Code: 403},
		status5xx: &accessgate.StatusError{Code: 503},
		timeout:   context.DeadlineExceeded,
		refused:   errors.New("dial tcp 127.0.0.1:1: connect: connection refused"),
	}
	type known struct {
		allowed bool
		at      time.Time
	}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		clk := newClock()
		var next outcome
		lookups := 0
		gate, err := accessgate.New(accessgate.Config{
			AllowTTL: 60 * time.Second, DenyTTL: 10 * time.Second, Clock: clk, Logger: discard(),
			Lookup: accessgate.LookupFunc(func(context.Context, string, string) (bool, error) {
				lookups++
				if e := errs[next]; e != nil {
					return false, e
				}
				return next == allow, nil
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		model := map[string]known{}
		for step := range 500 {
			clk.Advance(time.Duration(rng.IntN(15_000)) * time.Millisecond)
			subject := fmt.Sprint("s", rng.IntN(4))
			next = outcome(rng.IntN(6))
			before := lookups
			err := gate.Check(context.Background(), subject, "r")
			asked := lookups > before
			k, cached := model[subject]
			if cached {
				ttl := 10 * time.Second
				if k.allowed {
					ttl = 60 * time.Second
				}
				cached = clk.Now().Sub(k.at) < ttl
			}
			where := fmt.Sprintf("seed %d step %d subject %s (cached %v %+v, next %d, asked %v)", seed, step, subject, cached, k, next, asked)
			switch {
			case cached && asked:
				t.Fatalf("%s: asked although a decision was cached", where)
			case cached && k.allowed && err != nil, cached && !k.allowed && !errors.Is(err, accessgate.ErrDenied):
				t.Fatalf("%s: got %v, not the cached decision", where, err)
			case !cached && !asked:
				t.Fatalf("%s: answered %v without a decision: a failure or an expired entry was used", where, err)
			case !cached && errs[next] != nil && !errors.Is(err, accessgate.ErrUnavailable):
				t.Fatalf("%s: a failed lookup gave %v, want unavailable", where, err)
			case !cached && next == allow && err != nil, !cached && next == deny && !errors.Is(err, accessgate.ErrDenied):
				t.Fatalf("%s: got %v for a fresh decision", where, err)
			}
			if !cached && errs[next] == nil {
				model[subject] = known{allowed: next == allow, at: clk.Now()}
			}
		}
		gate.Close()
	}
}

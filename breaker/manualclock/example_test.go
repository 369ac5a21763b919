package manualclock_test

import (
	"fmt"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breaker/manualclock"
)

// A test moves an open circuit to HALF_OPEN without waiting a minute.
func ExampleClock() {
	clk := manualclock.New(time.Time{})
	b, _ := breaker.New("account", breaker.Config{Clock: clk, WaitDurationInOpenState: time.Minute})
	b.Open()
	_, err := b.Allow()
	fmt.Println(err != nil)
	clk.Advance(time.Minute)
	p, err := b.Allow()
	fmt.Println(err, b.State())
	p.Done(breaker.Success)
	// Output:
	// true
	// <nil> HALF_OPEN
}

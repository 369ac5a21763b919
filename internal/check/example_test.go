package check_test

import (
	"fmt"

	"github.com/tripswitch-dev/tripswitch/internal/check"
)

// A breaker's worst finding decides whether `tripswitch check` fails.
func ExampleBreaker_Worst() {
	b := check.Breaker{Name: "sidecar-injector", Findings: []check.Finding{
		{Check: check.CheckTarget, Result: check.OK, Message: "found"},
		{Check: check.CheckProbe, Result: check.Warning, Message: "no probe result yet"},
		{Check: check.CheckFailOpen, Result: check.Problem, Message: "already Ignore"},
	}}
	fmt.Println(b.Worst())
	// Output: problem
}

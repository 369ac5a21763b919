package preflight_test

import (
	"fmt"

	"github.com/tripswitch-dev/tripswitch/internal/preflight"
)

// A breaker's worst finding decides whether `tripswitch check` fails.
func ExampleBreaker_Worst() {
	b := preflight.Breaker{Name: "sidecar-injector", Findings: []preflight.Finding{
		{Check: preflight.CheckTarget, Result: preflight.OK, Message: "found"},
		{Check: preflight.CheckProbe, Result: preflight.Warning, Message: "no probe result yet"},
		{Check: preflight.CheckFailOpen, Result: preflight.Problem, Message: "already Ignore"},
	}}
	fmt.Println(b.Worst())
	// Output: problem
}

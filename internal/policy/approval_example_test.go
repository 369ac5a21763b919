package policy_test

import (
	"fmt"

	"github.com/tripswitch-dev/tripswitch/internal/policy"
)

// A misspelled configuration name, and the approved name it meant.
func ExampleNearestName() {
	fmt.Println(policy.NearestName("sidecar-injectr", []string{"policy-validator", "sidecar-injector"}))
	// Output: sidecar-injector
}

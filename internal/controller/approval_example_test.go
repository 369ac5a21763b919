package controller_test

import (
	"fmt"

	"github.com/tripswitch-dev/tripswitch/internal/controller"
)

// A misspelled configuration name, and the approved name it meant.
func ExampleNearestName() {
	fmt.Println(controller.NearestName("sidecar-injectr", []string{"policy-validator", "sidecar-injector"}))
	// Output: sidecar-injector
}

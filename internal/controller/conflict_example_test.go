package controller_test

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
)

// Two breakers name one webhook: the older owns it, whatever the names.
func ExampleWinner() {
	created := func(name string, at int) v1alpha1.WebhookCircuitBreaker {
		return v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: name,
			CreationTimestamp: metav1.NewTime(time.Date(2026, 12, 1, 9, 0, at, 0, time.UTC))}}
	}
	orig, copied := created("sidecar-injector", 0), created("a-sidecar-injector-copy", 30)
	fmt.Printf("%q\n", controller.Winner(&copied, []v1alpha1.WebhookCircuitBreaker{orig}))
	fmt.Printf("%q\n", controller.Winner(&orig, []v1alpha1.WebhookCircuitBreaker{copied}))
	// Output:
	// "sidecar-injector"
	// ""
}

// A misspelled configuration name, and the approved name it meant.
func ExampleNearestName() {
	fmt.Println(controller.NearestName("sidecar-injectr", []string{"policy-validator", "sidecar-injector"}))
	// Output: sidecar-injector
}

package breakerprom_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerprom"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// Export a registry's circuits under Resilience4j's names. Serve them with
// promhttp as usual; an existing Resilience4j dashboard then shows
// the tripswitch circuits.
func ExampleNewCollector() {
	circuits, _ := breaker.NewRegistry(breaker.Config{MinimumNumberOfCalls: 2}, nil)
	metrics := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	metrics.MustRegister(breakerprom.NewCollector(circuits))

	access := circuits.Get("account-access")
	for range 2 {
		p, _ := access.Allow()
		p.Done(breaker.Failure) // opens
	}
	_, _ = access.Allow() // rejected

	out, _ := testutil.GatherAndFormat(metrics, expfmt.TypeTextPlain,
		"resilience4j_circuitbreaker_state", "resilience4j_circuitbreaker_not_permitted_calls_total")
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasSuffix(line, " 1") {
			fmt.Println(line)
		}
	}
	// Output:
	// resilience4j_circuitbreaker_not_permitted_calls_total{kind="not_permitted",name="account-access"} 1
	// resilience4j_circuitbreaker_state{name="account-access",state="open"} 1
}

// Export concurrency limits under Resilience4j's bulkhead names; an
// adaptive limit's max_allowed_concurrent_calls is its current limit.
func ExampleNewLimitCollector() {
	bulkhead, _ := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 50})
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(breakerprom.NewLimitCollector(bulkhead))

	pm, _ := bulkhead.Acquire(context.Background())
	defer pm.Release()
	out, _ := testutil.GatherAndFormat(metrics, expfmt.TypeTextPlain, "resilience4j_bulkhead_available_concurrent_calls")
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "resilience4j") {
			fmt.Println(line)
		}
	}
	// Output:
	// resilience4j_bulkhead_available_concurrent_calls{name="account-read"} 49
}

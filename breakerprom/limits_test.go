package breakerprom_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tripswitch-dev/tripswitch/breakerprom"
	"github.com/tripswitch-dev/tripswitch/limit"
)

// TestLimitSeries: a bulkhead and an adaptive limit under Resilience4j's
// bulkhead names, read at scrape time, with the rejections counted.
func TestLimitSeries(t *testing.T) {
	b, err := limit.NewBulkhead("account-read", limit.BulkheadConfig{MaxConcurrentCalls: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, err := limit.NewAdaptive("account-access", limit.AdaptiveConfig{InitialLimit: 30})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(breakerprom.NewLimitCollector(b, a))
	held, _ := b.Acquire(context.Background())
	defer held.Release()
	other, _ := b.Acquire(context.Background())
	defer other.Release()
	_, _ = b.Acquire(context.Background()) // rejected
	inside, _ := a.Acquire(context.Background())
	defer inside.Release()

	want := `
# HELP resilience4j_bulkhead_available_concurrent_calls The number of available permissions
# TYPE resilience4j_bulkhead_available_concurrent_calls gauge
resilience4j_bulkhead_available_concurrent_calls{name="account-access"} 29
resilience4j_bulkhead_available_concurrent_calls{name="account-read"} 0
# HELP resilience4j_bulkhead_max_allowed_concurrent_calls The maximum number of available permissions
# TYPE resilience4j_bulkhead_max_allowed_concurrent_calls gauge
resilience4j_bulkhead_max_allowed_concurrent_calls{name="account-access"} 30
resilience4j_bulkhead_max_allowed_concurrent_calls{name="account-read"} 2
# HELP resilience4j_bulkhead_queued_calls The number of calls waiting for a permission
# TYPE resilience4j_bulkhead_queued_calls gauge
resilience4j_bulkhead_queued_calls{name="account-access"} 0
resilience4j_bulkhead_queued_calls{name="account-read"} 0
# HELP tripswitch_limit_rejected_calls_total Total number of calls the limit rejected
# TYPE tripswitch_limit_rejected_calls_total counter
tripswitch_limit_rejected_calls_total{name="account-access"} 0
tripswitch_limit_rejected_calls_total{name="account-read"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

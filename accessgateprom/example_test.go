package accessgateprom_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/tripswitch-dev/tripswitch/accessgate"
	"github.com/tripswitch-dev/tripswitch/accessgateprom"
)

// Export a gate's decisions next to its circuit's metrics (breakerprom).
// Serve the registry with promhttp as usual.
func ExampleNewCollector() {
	gate, _ := accessgate.New(accessgate.Config{
		Name: "orders",
		Lookup: accessgate.LookupFunc(func(_ context.Context, subject, _ string) (bool, error) {
			return subject == "alice", nil
		}),
	})
	defer gate.Close()
	metrics := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	metrics.MustRegister(accessgateprom.NewCollector(gate))

	ctx := context.Background()
	_ = gate.Check(ctx, "alice", "orders")
	_ = gate.Check(ctx, "alice", "orders")
	_ = gate.Check(ctx, "bob", "orders")

	out, _ := testutil.GatherAndFormat(metrics, expfmt.TypeTextPlain, "accessgate_decisions_total")
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "accessgate_") && !strings.HasSuffix(line, " 0") {
			fmt.Println(line)
		}
	}
	// Output:
	// accessgate_decisions_total{gate="orders",outcome="allowed"} 2
	// accessgate_decisions_total{gate="orders",outcome="denied"} 1
}

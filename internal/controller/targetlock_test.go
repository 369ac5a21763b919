package controller_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/metrics"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestBreakersOfOneConfigurationDoNotRefuseEachOther: two breakers on two
// webhooks of one configuration, both unhealthy, reconciled at the same time
// over and over, as an outage of both makes the controller do. Each write
// waits for the configuration's lock and decides on a fresh read, so no
// patch is refused as stale, and both circuits open and close.
func TestBreakersOfOneConfigurationDoNotRefuseEachOther(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	first := b.createBreaker(b.cfg+"-a", nil)
	second := b.createBreaker(b.cfg+"-b", func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.Target.WebhookName = other })
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := b.reconciler(b.c)
	r.Metrics = m
	both := func(st probe.Status, done func() bool) {
		b.health.set(first.Name, st)
		b.health.set(second.Name, st)
		for round := 0; !done(); round++ {
			if round == 50 {
				t.Fatalf("not settled after 50 rounds of concurrent reconciles")
			}
			var wg sync.WaitGroup
			for _, name := range []string{first.Name, second.Name} {
				wg.Go(func() {
					_, _ = r.Reconcile(b.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
				})
			}
			wg.Wait()
		}
	}
	records := func() int {
		n := 0
		for k := range b.getConfig().Annotations {
			if strings.HasPrefix(k, "tripswitch.dev/circuit.") {
				n++
			}
		}
		return n
	}
	both(probe.Unhealthy, func() bool { return records() == 2 })
	both(probe.Healthy, func() bool { return records() == 0 })
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	stale := 0.0
	for _, f := range families {
		if f.GetName() == "tripswitch_patch_conflicts_total" {
			for _, c := range f.GetMetric() {
				stale += c.GetCounter().GetValue()
			}
		}
	}
	if stale != 0 {
		t.Errorf("%v patches refused as stale between breakers of one configuration, want 0", stale)
	}
}

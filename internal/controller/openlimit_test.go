package controller_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/clusterlimit"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/metrics"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// limitedBeds starts a control plane of the test's own (the limit counts
// every circuit in the cluster) with n configurations and their breakers,
// healthy, and a reconciler under --max-open-circuits limit.
func limitedBeds(t *testing.T, n, limit int) (base *bed, r *controller.Reconciler, beds []*bed, names []string) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	base = newBed(t)
	base.c = env.Client
	r = base.reconciler(env.Client)
	r.Limit = &clusterlimit.Gate{Max: limit, Reader: env.Client}
	beds, names = make([]*bed, n), make([]string, n)
	for i := range beds {
		b := *base
		b.cfg = fmt.Sprintf("%s-%d", base.cfg, i)
		beds[i] = &b
		b.createConfig(nil)
		names[i] = b.createBreaker(b.cfg, nil).Name
		b.drive(r, names[i], probe.Healthy)
	}
	return base, r, beds, names
}

// TestMaxOpenCircuits: with --max-open-circuits 2 and five webhooks failing,
// exactly the first two open; the other three report OpenRefused/ClusterLimit
// and their place in line (first to reach its threshold first, whatever
// order they are reconciled in); as circuits close, opening resumes in that
// order. Its own control plane: the limit counts every circuit in the
// cluster.
func TestMaxOpenCircuits(t *testing.T) {
	base, r, beds, names := limitedBeds(t, 5, 2)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	r.Metrics = m
	open := func() (out []int) {
		for i, b := range beds {
			if b.getBreaker(names[i]).Status.State == v1alpha1.StateOpen && hasRecord(b.getConfig()) {
				out = append(out, i)
			}
		}
		return out
	}
	refusal := func(i int) string {
		c := meta.FindStatusCondition(beds[i].getBreaker(names[i]).Status.Conditions, v1alpha1.ConditionOpenRefused)
		if c == nil || c.Status != "True" || c.Reason != v1alpha1.ReasonClusterLimit {
			return ""
		}
		return c.Message
	}
	// They fail one second apart, 0 first.
	for i, b := range beds {
		b.drive(r, names[i], probe.Unhealthy)
		base.clock.Step(time.Second)
	}
	if got := fmt.Sprint(open()); got != "[0 1]" {
		t.Fatalf("open %s, want [0 1]", got)
	}
	for i, want := range map[int]string{2: "number 1 in line", 3: "number 2 in line", 4: "number 3 in line"} {
		if msg := refusal(i); !strings.Contains(msg, want) || !strings.Contains(msg, "2 of at most 2") {
			t.Fatalf("breaker %d: OpenRefused %q, want %q", i, msg, want)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP tripswitch_circuit_open_refused 1 while --max-open-circuits keeps the breaker's circuit from opening (condition OpenRefused, reason ClusterLimit), else 0.
# TYPE tripswitch_circuit_open_refused gauge
tripswitch_circuit_open_refused{breaker="`+names[0]+`"} 0
tripswitch_circuit_open_refused{breaker="`+names[1]+`"} 0
tripswitch_circuit_open_refused{breaker="`+names[2]+`"} 1
tripswitch_circuit_open_refused{breaker="`+names[3]+`"} 1
tripswitch_circuit_open_refused{breaker="`+names[4]+`"} 1
`), "tripswitch_circuit_open_refused"); err != nil {
		t.Fatal(err)
	}

	// 0 recovers: the next in line opens, though 4 and 3 look first.
	beds[0].drive(r, names[0], probe.Healthy)
	for _, i := range []int{4, 3, 2} {
		beds[i].settle(r, names[i])
	}
	if got := fmt.Sprint(open()); got != "[1 2]" {
		t.Fatalf("after 0 closed: open %s, want [1 2]", got)
	}
	if msg := refusal(4); !strings.Contains(msg, "number 2 in line") {
		t.Fatalf("breaker 4: %q", msg)
	}
	// 1 recovers: 3, then (2 recovering) 4.
	beds[1].drive(r, names[1], probe.Healthy)
	for _, i := range []int{4, 3} {
		beds[i].settle(r, names[i])
	}
	if got := fmt.Sprint(open()); got != "[2 3]" {
		t.Fatalf("after 1 closed: open %s, want [2 3]", got)
	}
	beds[2].drive(r, names[2], probe.Healthy)
	beds[4].settle(r, names[4])
	if got := fmt.Sprint(open()); got != "[3 4]" || refusal(4) != "" {
		t.Fatalf("after 2 closed: open %s, want [3 4]", got)
	}
}

// TestMaxOpenCircuitsUnderConcurrentReconciles: five breakers failing at
// once, reconciled in parallel by one reconciler (as the manager's workers
// do), twenty rounds: never more than two circuits open, on the records
// (two reconciles that both see one open cannot both take the last place),
// and in the end exactly two open and three refused.
func TestMaxOpenCircuitsUnderConcurrentReconciles(t *testing.T) {
	base, r, beds, names := limitedBeds(t, 5, 2)
	records := func() (n int) {
		for _, b := range beds {
			if hasRecord(b.getConfig()) {
				n++
			}
		}
		return n
	}
	for i := range beds {
		base.health.set(names[i], probe.Unhealthy)
	}
	for round := range 20 {
		var wg sync.WaitGroup
		for i := range beds {
			wg.Go(func() {
				_, _ = r.Reconcile(base.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: names[i]}})
			})
		}
		wg.Wait()
		if n := records(); n > 2 {
			t.Fatalf("round %d: %d circuits open, the limit is 2", round, n)
		}
	}
	refused := 0
	for i, b := range beds {
		b.settle(r, names[i])
		if c := meta.FindStatusCondition(b.getBreaker(names[i]).Status.Conditions, v1alpha1.ConditionOpenRefused); c != nil && c.Status == "True" {
			refused++
		}
	}
	if n := records(); n != 2 || refused != 3 {
		t.Fatalf("settled: %d open, %d refused; want 2 and 3", n, refused)
	}
}

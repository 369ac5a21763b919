package controller_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/metrics"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/schedule"
)

// keepers is a probe monitor, an API server signal and a target source in
// one fake, each keeping the set of breakers it holds something of.
type keepers struct {
	*scriptedHealth
	mu                     sync.Mutex
	probed, signalled, fed map[string]bool
}

func (k *keepers) Ensure(key string, _ probe.Settings) { k.set(k.probed, key, true) }
func (k *keepers) Stop(key string)                     { k.set(k.probed, key, false) }

func (k *keepers) set(m map[string]bool, key string, on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if on {
		m[key] = true
	} else {
		delete(m, key)
	}
}

// held lists the stores that hold breaker.
func (k *keepers) held(breaker string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for name, m := range map[string]map[string]bool{"probes": k.probed, "signal": k.signalled, "target watch": k.fed} {
		if m[breaker] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

type keptSignal struct{ *keepers }

func (s keptSignal) Ensure(key string, _ apisignal.Settings) error {
	s.set(s.signalled, key, true)
	return nil
}
func (s keptSignal) Stop(key string)                         { s.set(s.signalled, key, false) }
func (s keptSignal) Observe(string) (apisignal.Status, bool) { return apisignal.Status{}, false }
func (s keptSignal) Current(string) (apisignal.Status, bool) { return apisignal.Status{}, false }
func (s keptSignal) Forget(string, time.Time)                {}

type keptTargets struct{ *keepers }

func (t keptTargets) Get(breaker string, _ v1alpha1.TargetKind, _ string) (client.Object, bool, bool) {
	t.set(t.fed, breaker, true)
	return nil, false, false
}
func (t keptTargets) Forget(breaker string)                      { t.set(t.fed, breaker, false) }
func (t keptTargets) Users(v1alpha1.TargetKind, string) []string { return nil }
func (t keptTargets) Listing(v1alpha1.TargetKind, string) bool   { return false }
func (t keptTargets) Generation() uint64                         { return 0 }
func (t keptTargets) Each(func(client.Object))                   {}

// TestDeletedBreakerLeavesNothingInMemory: a breaker that opened and closed
// its circuit, with every collaborator keeping something of it, is deleted;
// once its finalizer is released and it is gone, nothing of it is left.
func TestDeletedBreakerLeavesNothingInMemory(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	name := b.cfg
	b.createBreaker(name, func(wcb *v1alpha1.WebhookCircuitBreaker) {
		wcb.Spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true, Window: &metav1.Duration{Duration: 30 * time.Second}, MinimumCalls: 10, FailureRateThreshold: 50}
	})
	k := &keepers{scriptedHealth: b.health, probed: map[string]bool{}, signalled: map[string]bool{}, fed: map[string]bool{}}
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := b.reconciler(b.c)
	r.Health, r.Signals, r.Targets, r.Metrics, r.Decisions = k, keptSignal{k}, keptTargets{k}, m, &schedule.Decisions{}
	m.ObserveProbe(name, probe.Result{Status: probe.Unhealthy})
	b.drive(r, name, probe.Unhealthy)
	if !hasRecord(b.getConfig()) {
		t.Fatal("the circuit did not open")
	}
	r.Decisions.Record(name, false) // a healthy verdict, queued: the circuit is open
	if kept := append(controller.Remembers(r, name), k.held(name)...); len(kept) < 5 {
		t.Fatalf("before the delete, only %v keep the breaker: the test would prove nothing", kept)
	}

	if err := b.c.Delete(b.ctx, b.getBreaker(name)); err != nil {
		t.Fatal(err)
	}
	b.settle(r, name)
	if hasRecord(b.getConfig()) {
		t.Fatal("the deleted breaker's circuit was not restored")
	}
	if kept := append(controller.Remembers(r, name), k.held(name)...); len(kept) != 0 {
		t.Errorf("after the delete, %v still keep the breaker", kept)
	}
}

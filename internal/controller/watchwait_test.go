package controller_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/targetwatch"
)

// configReads counts the reads of webhook configurations that reach the
// API server.
type configReads struct {
	client.Reader
	n atomic.Int32
}

func (c *configReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
		c.n.Add(1)
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestNewBreakerWaitsForItsConfigurationsWatch: a new breaker's first
// reconcile starts its configuration's watch and, rather than read the
// configuration from the API server, waits for the watch's first list,
// which wakes it; then it is decided from the watch, and opening and
// closing its circuit read the configuration from the API server only when
// the watch lags behind a write.
func TestNewBreakerWaitsForItsConfigurationsWatch(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	name := b.cfg
	b.createBreaker(name, nil)
	reads := &configReads{Reader: b.c}
	r := b.reconciler(b.c)
	r.APIReader = reads
	cs, err := kubernetes.NewForConfig(controlPlane(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	woken := make(chan string, 10)
	watches := targetwatch.New(cs, func(breaker string) { woken <- breaker })
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { _ = watches.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	r.Targets = watches
	// Start runs asynchronously: wait until it runs watches.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, _, cached := watches.Get("probe-"+name, v1alpha1.MutatingWebhookConfiguration, "nothing-"+name)
		if cached || watches.Listing(v1alpha1.MutatingWebhookConfiguration, "nothing-"+name) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watches never started")
		}
	}
	watches.Forget("probe-" + name)

	res, err := r.Reconcile(b.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, cached := watches.Get(name, v1alpha1.MutatingWebhookConfiguration, b.cfg); !cached && res.RequeueAfter <= 0 {
		t.Fatalf("a breaker whose watch had not listed neither waited nor was served: %+v", res)
	}
	for got := ""; got != name; {
		select {
		case got = <-woken:
			if got != name && got != "probe-"+name {
				t.Fatalf("woke %s, want %s", got, name)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the watch's first list never woke the breaker")
		}
	}
	b.drive(r, name, probe.Healthy)
	if n := reads.n.Load(); n != 0 {
		t.Fatalf("%d reads of the configuration from the API server before the watch served it", n)
	}
	b.drive(r, name, probe.Unhealthy)
	if !hasRecord(b.getConfig()) {
		t.Fatal("the circuit did not open")
	}
	opened := reads.n.Load()
	b.drive(r, name, probe.Healthy)
	if hasRecord(b.getConfig()) {
		t.Fatal("the circuit did not close")
	}
	// The open and the close: at most one each, when the watch had not yet
	// shown the write before.
	if n := reads.n.Load(); opened > 1 || n > 2 {
		t.Fatalf("%d reads of the configuration before the close, %d in all; want at most 1 and 2", opened, n)
	}
}

// frozenTargets serves b's configuration as its watch had it when frozen:
// a watch that lags behind this process's writes (its connection cut, its
// API server slow) for as long as the test says.
type frozenTargets struct {
	controller.TargetSource
	mu     sync.Mutex
	frozen client.Object
}

func (f *frozenTargets) freeze(obj client.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen = obj
}

func (f *frozenTargets) Get(breaker string, kind v1alpha1.TargetKind, name string) (client.Object, bool, bool) {
	f.mu.Lock()
	frozen := f.frozen
	f.mu.Unlock()
	if frozen != nil {
		return frozen.DeepCopyObject().(client.Object), true, true
	}
	return f.TargetSource.Get(breaker, kind, name)
}

// TestALaggingWatchNeverTakesBackAnOpen: reconciles after this process
// opened a circuit, on a watch that has not yet shown that write, decide on
// the configuration as the API server has it. On the watch's version the
// record this process wrote is missing, which reads as someone having
// undone it: the status would say Closed, ClosedExternally and Disarmed
// while the circuit is open.
func TestALaggingWatchNeverTakesBackAnOpen(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	name := b.cfg
	b.createBreaker(name, nil)
	watches := startWatches(t, b)
	targets := &frozenTargets{TargetSource: watches}
	r := b.reconciler(b.c)
	r.Targets = targets
	b.drive(r, name, probe.Healthy)
	var before client.Object
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		obj, found, cached := watches.Get(name, v1alpha1.MutatingWebhookConfiguration, b.cfg)
		if cached && found {
			before = obj
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the configuration's watch never served it")
		}
	}
	targets.freeze(before)

	b.health.set(name, probe.Unhealthy)
	for i := range 4 {
		if _, err := r.Reconcile(b.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}}); err != nil {
			t.Fatal(err)
		}
		if !hasRecord(b.getConfig()) {
			t.Fatalf("reconcile %d: the circuit is not open", i+1)
		}
		s := b.getBreaker(name).Status
		if i == 0 {
			continue // the open's own status may wait for the next
		}
		if s.State != v1alpha1.StateOpen || len(s.History) != 1 || s.History[0].ClosedAt != nil || s.DisarmedReason != "" {
			t.Fatalf("reconcile %d on a watch that has not shown the open: state %s, disarmed %q, history %+v; want Open, one open window, not disarmed",
				i+1, s.State, s.DisarmedReason, s.History)
		}
	}

	targets.freeze(nil)
	b.drive(r, name, probe.Healthy)
	s := b.getBreaker(name).Status
	if hasRecord(b.getConfig()) || s.State != v1alpha1.StateClosed || len(s.History) != 1 || s.History[0].CloseReason == policy.ReasonClosedExternally {
		t.Fatalf("after recovery: state %s, history %+v; want Closed, one window closed by the recovery", s.State, s.History)
	}
}

package controller_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
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

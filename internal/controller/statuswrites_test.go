package controller_test

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestFirstStatusComesWithTheVerdict, on the real API server: a new
// breaker whose probes have not decided yet gets its finalizer and no
// status; its status is written once, when the probes decide, with the
// verdict. One whose probes never decide is written at the deadline
// ((max threshold + 2) intervals after the controller first saw it), and
// one with something to say (its target missing) at once.
func TestFirstStatusComesWithTheVerdict(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	r := b.reconciler(b.c)
	reconcile := func(name string) ctrl.Result {
		t.Helper()
		res, err := r.Reconcile(b.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	pending := func(name string) {
		b.health.mu.Lock()
		b.health.obs[name] = probe.Observation{Verdict: probe.VerdictPending, ConsecutiveSuccesses: 2, Last: probe.Result{Status: probe.Healthy, Reason: "HTTP 200"}}
		b.health.mu.Unlock()
	}
	interval := func(wcb *v1alpha1.WebhookCircuitBreaker) {
		wcb.Spec.Probe = v1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: time.Second}, FailureThreshold: 3, SuccessThreshold: 5}
	}

	decides := b.cfg + "-decides"
	b.createBreaker(decides, interval)
	pending(decides)
	reconcile(decides) // the finalizer
	for range 3 {
		res := reconcile(decides)
		if got := b.getBreaker(decides); got.Status.State != "" {
			t.Fatalf("status written before the probes decided: %+v", got.Status)
		}
		if res.RequeueAfter <= 0 || res.RequeueAfter > 7*time.Second+20*time.Millisecond {
			t.Fatalf("requeued after %v, want within the 7 s deadline", res.RequeueAfter)
		}
		b.clock.Step(time.Second)
	}
	before := b.getBreaker(decides).ResourceVersion
	b.health.set(decides, probe.Healthy)
	reconcile(decides)
	got := b.getBreaker(decides)
	ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	if got.Status.State != v1alpha1.StateClosed || ready == nil || ready.Status != metav1.ConditionTrue || got.Status.Probe.ConsecutiveSuccesses == 0 {
		t.Fatalf("after the verdict: state %q, Ready %+v, probe %+v; want Closed, Ready and the verdict's counts", got.Status.State, ready, got.Status.Probe)
	}
	reconcile(decides)
	if after := b.getBreaker(decides).ResourceVersion; after == before || b.getBreaker(decides).ResourceVersion != got.ResourceVersion {
		t.Fatal("the verdict's status was not written once")
	}

	undecided := b.cfg + "-undecided"
	b.createBreaker(undecided, func(wcb *v1alpha1.WebhookCircuitBreaker) {
		interval(wcb)
		wcb.Spec.Target.WebhookName = other // one webhook, one breaker
	})
	pending(undecided)
	reconcile(undecided) // the finalizer; first seen now
	reconcile(undecided)
	if got := b.getBreaker(undecided); got.Status.State != "" {
		t.Fatalf("status written before the deadline: %+v", got.Status)
	}
	b.clock.Step(7 * time.Second)
	reconcile(undecided)
	if got := b.getBreaker(undecided); got.Status.State != v1alpha1.StateClosed || got.Status.Probe.ConsecutiveSuccesses != 2 {
		t.Fatalf("at the deadline: state %q, probe %+v; want Closed with the counts so far", got.Status.State, got.Status.Probe)
	}

	missing := b.cfg + "-missing"
	b.createBreaker(missing, func(wcb *v1alpha1.WebhookCircuitBreaker) { wcb.Spec.Target.ConfigurationName = "no-such-configuration" })
	reconcile(missing) // the finalizer
	reconcile(missing)
	if c := meta.FindStatusCondition(b.getBreaker(missing).Status.Conditions, v1alpha1.ConditionTargetFound); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("a breaker whose target is missing: TargetFound %+v, want False at once", c)
	}
}

// TestDetailWaitsForAChange, on the real API server: once a breaker's
// status is written, a change of detail alone (the probe's counts and last
// reason under the same verdict) is not written, until 10 minutes have
// passed since the last write; a change a reader acts on is written at
// once, carrying the detail with it.
func TestDetailWaitsForAChange(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	name := b.cfg
	b.createBreaker(name, nil)
	r := b.reconciler(b.c)
	b.drive(r, name, probe.Healthy)
	written := b.getBreaker(name).ResourceVersion
	detail := func(reason string) {
		b.health.mu.Lock()
		o := b.health.obs[name]
		o.Last.Reason = reason
		b.health.obs[name] = o
		b.health.mu.Unlock()
	}
	detail("HTTP 204")
	b.settle(r, name)
	if got := b.getBreaker(name); got.ResourceVersion != written || got.Status.Probe.LastReason == "HTTP 204" {
		t.Fatalf("a change of detail alone was written at once (last reason %q)", got.Status.Probe.LastReason)
	}
	b.clock.Step(10*time.Minute + time.Second)
	b.settle(r, name)
	if got := b.getBreaker(name); got.Status.Probe.LastReason != "HTTP 204" {
		t.Fatalf("10 minutes on, the detail is still not written (last reason %q)", got.Status.Probe.LastReason)
	}
	detail("HTTP 202")
	b.drive(r, name, probe.Unhealthy) // a verdict: written at once, with everything else
	if got := b.getBreaker(name); got.Status.State != v1alpha1.StateOpen || got.Status.Probe.LastReason != "scripted Unhealthy" {
		t.Fatalf("after an Unhealthy verdict: state %s, last reason %q", got.Status.State, got.Status.Probe.LastReason)
	}
}

// TestOwnStatusWritesDoNotQueueTheBreaker: the breakers' watch passes what
// a reconcile acts on (spec, annotations, labels, finalizers, deletion),
// and a status someone else wrote, not this controller's own write of the
// status alone, unless a reconcile waits for it.
func TestOwnStatusWritesDoNotQueueTheBreaker(t *testing.T) {
	r := &controller.Reconciler{}
	pred := r.BreakerEvents()
	r.Wrote("b", "2") // this controller's write left it at 2
	base := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1,
		Annotations: map[string]string{"a": "1"}, Labels: map[string]string{"l": "1"}, Finalizers: []string{controller.Finalizer}}}
	for _, c := range []struct {
		name   string
		change func(*v1alpha1.WebhookCircuitBreaker)
		want   bool
	}{
		{"the status alone, by this controller", func(w *v1alpha1.WebhookCircuitBreaker) { w.Status.State = v1alpha1.StateOpen; w.ResourceVersion = "2" }, false},
		{"the status alone, by someone else", func(w *v1alpha1.WebhookCircuitBreaker) {
			w.Status.State = v1alpha1.StateClosed
			w.ResourceVersion = "3"
		}, true},
		{"the spec", func(w *v1alpha1.WebhookCircuitBreaker) { w.Generation = 2 }, true},
		{"an annotation (re-arm)", func(w *v1alpha1.WebhookCircuitBreaker) { w.Annotations = map[string]string{"a": "2"} }, true},
		{"a label", func(w *v1alpha1.WebhookCircuitBreaker) { w.Labels = nil }, true},
		{"the finalizers", func(w *v1alpha1.WebhookCircuitBreaker) { w.Finalizers = nil }, true},
		{"deletion", func(w *v1alpha1.WebhookCircuitBreaker) { w.DeletionTimestamp = &metav1.Time{Time: time.Now()} }, true},
	} {
		next := base.DeepCopy()
		c.change(next)
		if got := pred.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: next}); got != c.want {
			t.Errorf("an update of %s: passed %v, want %v", c.name, got, c.want)
		}
	}
	next := base.DeepCopy()
	next.Status.State, next.ResourceVersion = v1alpha1.StateOpen, "2"
	r.AwaitEvent("b")
	if !pred.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: next}) {
		t.Error("the status write a reconcile waits for was not passed")
	}
	if !pred.Create(event.CreateEvent{Object: base}) || !pred.Delete(event.DeleteEvent{Object: base}) {
		t.Error("creation or deletion not passed")
	}
}

package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// Two breakers name one webhook: a carefully tuned original and a newer copy
// whose name sorts first. The copy is flagged at once, before any outage;
// in the outage the original opens the circuit and the copy does not touch
// it; once the original is deleted the copy takes over.
func TestTwoBreakersOnOneWebhookTheOldestWins(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	orig := b.createBreaker(b.cfg+"-z-orig", func(w *v1alpha1.WebhookCircuitBreaker) {
		w.Spec.Probe.FailureThreshold = 7 // tuned
	})
	// creationTimestamp has a resolution of one second: make the copy newer.
	for b.getBreaker(orig.Name).CreationTimestamp.Add(time.Second).After(time.Now()) {
		time.Sleep(100 * time.Millisecond)
	}
	dup := b.createBreaker(b.cfg+"-a-copy", nil)
	if !dup.CreationTimestamp.After(orig.CreationTimestamp.Time) {
		t.Fatalf("copy created at %v, not after the original's %v", dup.CreationTimestamp, orig.CreationTimestamp)
	}
	r := b.reconciler(b.c)
	rec := events.NewFakeRecorder(100)
	r.Recorder = rec
	b.health.set(orig.Name, probe.Healthy)
	b.health.set(dup.Name, probe.Healthy)
	b.settle(r, dup.Name)
	b.settle(r, orig.Name)

	ready := func(name string) *metav1.Condition {
		t.Helper()
		c := meta.FindStatusCondition(b.getBreaker(name).Status.Conditions, v1alpha1.ConditionReady)
		if c == nil {
			t.Fatalf("breaker %s has no Ready condition", name)
		}
		return c
	}
	if c := ready(dup.Name); c.Status != metav1.ConditionFalse || c.Reason != policy.ReasonConflicted || !strings.Contains(c.Message, orig.Name) {
		t.Fatalf("copy's Ready = %s/%s %q, want False/Conflicted naming %s", c.Status, c.Reason, c.Message, orig.Name)
	}
	if c := ready(orig.Name); c.Status != metav1.ConditionTrue || c.Reason != policy.ReasonArmed {
		t.Fatalf("original's Ready = %s/%s %q, want True/Armed", c.Status, c.Reason, c.Message)
	}
	var seen []string
	for len(rec.Events) > 0 {
		seen = append(seen, <-rec.Events)
	}
	if !slices.ContainsFunc(seen, func(e string) bool {
		return strings.HasPrefix(e, "Warning "+policy.ReasonConflicted) && strings.Contains(e, orig.Name)
	}) {
		t.Errorf("no Warning %s event naming %s among %q", policy.ReasonConflicted, orig.Name, seen)
	}

	// The outage: the copy, reconciled first, does not open; the original does.
	b.drive(r, dup.Name, probe.Unhealthy)
	if hasRecord(b.getConfig()) {
		t.Fatal("the conflicted copy opened the circuit")
	}
	b.drive(r, orig.Name, probe.Unhealthy)
	got, err := circuit.ReadRecord(b.getConfig().Annotations, target)
	if err != nil || got == nil || got.Breaker != orig.Name {
		t.Fatalf("record %+v (%v), want the original's", got, err)
	}
	b.settle(r, dup.Name)
	if c := ready(dup.Name); c.Reason != policy.ReasonConflicted {
		t.Fatalf("copy's Ready reason in the outage = %s, want Conflicted", c.Reason)
	}

	// The original is deleted: it restores the webhook; the copy takes over.
	if err := b.c.Delete(b.ctx, b.getBreaker(orig.Name)); err != nil {
		t.Fatal(err)
	}
	_ = b.trySettle(r, orig.Name)
	if hasRecord(b.getConfig()) {
		t.Fatal("the deleted original did not restore the webhook")
	}
	b.settle(r, dup.Name)
	if !hasRecord(b.getConfig()) {
		t.Fatalf("the copy did not take over: Ready %+v", ready(dup.Name))
	}
	if got, _ := circuit.ReadRecord(b.getConfig().Annotations, target); got == nil || got.Breaker != dup.Name {
		t.Fatalf("record %+v, want the copy's", got)
	}
}

// With the manager running: a copy created next to a working breaker is
// flagged at once, and takes over as soon as the original is deleted, with
// no other event (the copy's resync is a minute away, its probes steady).
func TestConflictedBreakerTakesOverWhenTheWinnerIsDeleted(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	label := func(w *v1alpha1.WebhookCircuitBreaker) {
		w.Labels = map[string]string{"tripswitch.test/bed": b.cfg}
		fastBreaker(w)
	}
	orig := b.createBreaker(b.cfg+"-orig", label)
	runLabelledManager(t, b.cfg, &switchable{})
	readyReason := func(name string) string {
		var w v1alpha1.WebhookCircuitBreaker
		if err := b.c.Get(b.ctx, client.ObjectKey{Name: name}, &w); err != nil {
			return err.Error()
		}
		if c := meta.FindStatusCondition(w.Status.Conditions, v1alpha1.ConditionReady); c != nil {
			return c.Reason
		}
		return ""
	}
	eventually(t, "the original is Armed", func() bool { return readyReason(orig.Name) == policy.ReasonArmed })
	for b.getBreaker(orig.Name).CreationTimestamp.Add(time.Second).After(time.Now()) {
		time.Sleep(100 * time.Millisecond)
	}
	dup := b.createBreaker(b.cfg+"-copy", label)
	eventually(t, "the copy is Conflicted", func() bool { return readyReason(dup.Name) == policy.ReasonConflicted })
	if r := readyReason(orig.Name); r != policy.ReasonArmed {
		t.Fatalf("original's Ready reason = %s, want Armed", r)
	}
	if err := b.c.Delete(b.ctx, b.getBreaker(orig.Name)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the copy takes over", func() bool { return readyReason(dup.Name) == policy.ReasonArmed })
}

// runLabelledManager runs a manager that sees only the breakers labelled
// tripswitch.test/bed=bed, until the test ends.
func runLabelledManager(t *testing.T, bed string, p probe.Prober) {
	t.Helper()
	cp := controlPlane(t)
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme:     cp.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&v1alpha1.WebhookCircuitBreaker{}: {Label: labels.SelectorFromSet(labels.Set{"tripswitch.test/bed": bed})},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controller.Setup(mgr, controller.Options{Prober: p}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// A conflicted breaker is not opened in another breaker's patch either: an
// outage of two webhooks of one configuration opens the one whose breaker
// owns it, not the conflicted copy's.
func TestConflictedBreakerIsNoCompanion(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	watches := startWatches(t, b)
	r := b.reconciler(b.c)
	r.Targets = watches

	opener := b.createBreaker(b.cfg+"-other", func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.Target.WebhookName = other })
	orig := b.createBreaker(b.cfg+"-orig", nil)
	for b.getBreaker(orig.Name).CreationTimestamp.Add(time.Second).After(time.Now()) {
		time.Sleep(100 * time.Millisecond)
	}
	dup := b.createBreaker(b.cfg+"-copy", nil)
	for _, n := range []string{opener.Name, orig.Name, dup.Name} {
		b.drive(r, n, probe.Healthy)
	}
	// other's and the copy's webhooks look down; the original's does not.
	b.health.set(opener.Name, probe.Unhealthy)
	b.health.set(dup.Name, probe.Unhealthy)
	b.settle(r, opener.Name)
	cfg := b.getConfig()
	if _, ok := cfg.Annotations[circuit.AnnotationKey(other)]; !ok {
		t.Fatal("the opener's circuit did not open")
	}
	if hasRecord(cfg) {
		rec, _ := circuit.ReadRecord(cfg.Annotations, target)
		t.Fatalf("the conflicted copy's webhook was opened in the opener's patch: %+v", rec)
	}
}

package controller_test

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/schedule"
)

// TestStatusWaitsForQueuedDecisions: while another breaker is queued for a
// decision, a breaker's reconcile opens its circuit on the configuration at
// once but leaves its status write for later, queued behind decisions; the
// status then shows the open from the record (opened at the record's time,
// not the write's). The close is the same: the webhook is restored at
// once, and the status written later closes the window with the recovery's
// reason and the time of the close. A status is deferred at most 30s, and
// a decision that must be remembered in the status (a disarm) never is.
func TestStatusWaitsForQueuedDecisions(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	name := b.cfg
	b.createBreaker(name, nil)
	decisions := &schedule.Decisions{}
	r := b.reconciler(b.c)
	r.Decisions = decisions
	b.drive(r, name, probe.Healthy)

	reconcile := func() ctrl.Result {
		t.Helper()
		res, err := r.Reconcile(b.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// The queued decision belongs to a breaker that does not exist: its
	// reconcile (a NotFound) takes it off the queue.
	const queued = "queued-elsewhere"
	runQueued := func() {
		t.Helper()
		if _, err := r.Reconcile(b.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: queued}}); err != nil {
			t.Fatal(err)
		}
		if n := decisions.Waiting(); n != 0 {
			t.Fatalf("%d decisions still waiting after their reconcile", n)
		}
	}

	if decisions.Record(name, false) {
		t.Fatal("a healthy verdict on a closed circuit was queued as a decision: it writes nothing but a status")
	}
	decisions.Record(queued, true)
	b.health.set(name, probe.Unhealthy)
	openedAt := b.clock.Now().Truncate(time.Second)
	res := reconcile()
	if !hasRecord(b.getConfig()) {
		t.Fatal("the circuit did not open while a decision was queued")
	}
	if res.RequeueAfter <= 0 || res.Priority == nil || *res.Priority >= 0 {
		t.Fatalf("a deferred status write must come back later at a low priority: %+v", res)
	}
	if got := b.getBreaker(name); got.Status.State != v1alpha1.StateClosed {
		t.Fatalf("status written while a decision was queued: %s", got.Status.State)
	}
	b.clock.Step(3 * time.Second)
	reconcile() // still queued: still deferred, nothing written twice
	if got := b.getBreaker(name); got.Status.State != v1alpha1.StateClosed {
		t.Fatalf("status written while a decision was queued: %s", got.Status.State)
	}
	runQueued()
	reconcile()
	got := b.getBreaker(name)
	if got.Status.State != v1alpha1.StateOpen || got.Status.Record == nil || len(got.Status.History) != 1 {
		t.Fatalf("status after the queue emptied: %s, record %+v, history %+v", got.Status.State, got.Status.Record, got.Status.History)
	}
	if at := got.Status.LastTransitionTime; at == nil || !at.Time.Equal(openedAt) {
		t.Errorf("Open since %v, want the record's time %v", at, openedAt)
	}

	if !decisions.Record(name, false) {
		t.Fatal("a healthy verdict on an open circuit was not queued as a decision: it may close it")
	}
	decisions.Record(queued, true)
	b.health.set(name, probe.Healthy)
	closedAt := b.clock.Now().Truncate(time.Second)
	reconcile()
	if hasRecord(b.getConfig()) {
		t.Fatal("the circuit did not close while a decision was queued")
	}
	if got := b.getBreaker(name); got.Status.State != v1alpha1.StateOpen {
		t.Fatalf("status written while a decision was queued: %s", got.Status.State)
	}
	b.clock.Step(5 * time.Second)
	runQueued()
	reconcile()
	got = b.getBreaker(name)
	if got.Status.State != v1alpha1.StateClosed || got.Status.Record != nil || len(got.Status.History) != 1 {
		t.Fatalf("status after the queue emptied: %s, record %+v, history %+v", got.Status.State, got.Status.Record, got.Status.History)
	}
	w := got.Status.History[0]
	if w.CloseReason != policy.ReasonWebhookRecovered || w.ClosedAt == nil || !w.ClosedAt.Time.Equal(closedAt) {
		t.Errorf("window closed %v for %q, want %v for %q", w.ClosedAt, w.CloseReason, closedAt, policy.ReasonWebhookRecovered)
	}
	if at := got.Status.LastTransitionTime; at == nil || !at.Time.Equal(closedAt) {
		t.Errorf("Closed since %v, want the close's time %v", at, closedAt)
	}

	// Bounded: a decision queued for ever delays a status at most 30s.
	decisions.Record(queued, true)
	b.health.set(name, probe.Unhealthy)
	reconcile()
	if got := b.getBreaker(name); got.Status.State != v1alpha1.StateClosed || !hasRecord(b.getConfig()) {
		t.Fatalf("want the circuit open and the status deferred, got status %s", got.Status.State)
	}
	b.clock.Step(31 * time.Second)
	reconcile()
	if got := b.getBreaker(name); got.Status.State != v1alpha1.StateOpen {
		t.Fatalf("status still deferred after 31s: %s", got.Status.State)
	}

	// A disarm lives only in the status: never deferred. The operator
	// forces the circuit closed during the outage, which disarms the
	// breaker; back in Auto, still during the outage, it must not reopen.
	setMode := func(m v1alpha1.Mode) {
		t.Helper()
		wcb := b.getBreaker(name)
		wcb.Spec.Mode = m
		if err := b.c.Update(b.ctx, wcb); err != nil {
			t.Fatal(err)
		}
	}
	setMode(v1alpha1.ModeForceClosed)
	reconcile()
	if hasRecord(b.getConfig()) {
		t.Fatal("ForceClosed did not close the circuit")
	}
	setMode(v1alpha1.ModeAuto)
	b.settle(r, name)
	if got := b.getBreaker(name); got.Status.State != v1alpha1.StateDisarmed || got.Status.DisarmedReason == "" || hasRecord(b.getConfig()) {
		t.Fatalf("back in Auto during the outage: %s (disarmed %q, record %v), want Disarmed and closed", got.Status.State, got.Status.DisarmedReason, hasRecord(b.getConfig()))
	}
	if n := decisions.Waiting(); n != 1 {
		t.Fatalf("the queued decision is gone (%d waiting): the test proved nothing", n)
	}
}

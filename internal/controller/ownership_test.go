package controller_test

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

func (b *bed) setPolicy(p admissionregistrationv1.FailurePolicyType) {
	b.t.Helper()
	cfg := b.getConfig()
	for i := range cfg.Webhooks {
		if cfg.Webhooks[i].Name == target {
			cfg.Webhooks[i].FailurePolicy = ptr.To(p)
		}
	}
	if err := b.c.Update(b.ctx, cfg); err != nil {
		b.t.Fatalf("administrator update: %v", err)
	}
}

func condition(wcb *v1alpha1.WebhookCircuitBreaker, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(wcb.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// An administrator sets Fail while the circuit is open and the webhook is
// still down: tripswitch lets go, does not reopen, and says so; it re-arms
// after the webhook recovers, or when an operator re-arms it.
func TestAdministratorFailWhileOpenIsNeverOverwritten(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	wcb := b.createBreaker(b.cfg, nil)
	r := b.reconciler(b.c)
	rec := events.NewFakeRecorder(100)
	r.Recorder = rec
	b.drive(r, wcb.Name, probe.Unhealthy)
	if !hasRecord(b.getConfig()) {
		t.Fatal("circuit did not open")
	}

	b.setPolicy(admissionregistrationv1.Fail)
	b.settle(r, wcb.Name)
	var seen []string
	for len(rec.Events) > 0 {
		seen = append(seen, <-rec.Events)
	}
	for _, want := range []string{"Warning CircuitOpened", "Warning " + policy.ReasonExternalChange, "Warning " + policy.ReasonDisarmed} {
		if !slices.ContainsFunc(seen, func(e string) bool { return strings.HasPrefix(e, want) }) {
			t.Errorf("no %q event among %q", want, seen)
		}
	}
	disarmed := 0
	for _, e := range seen {
		if strings.HasPrefix(e, "Warning "+policy.ReasonDisarmed+" ") {
			disarmed++
		}
	}
	if disarmed != 1 {
		t.Errorf("%d Disarmed events for one disarm, want 1: %q", disarmed, seen)
	}
	cfg := b.getConfig()
	if *hookOf(t, cfg, target).FailurePolicy != admissionregistrationv1.Fail || hasRecord(cfg) {
		t.Fatalf("after the administrator's Fail: policy %s, record %v", *hookOf(t, cfg, target).FailurePolicy, hasRecord(cfg))
	}
	got := b.getBreaker(wcb.Name)
	if c := condition(got, v1alpha1.ConditionExternalChange); c.Status != metav1.ConditionTrue {
		t.Fatalf("ExternalChange condition = %+v", c)
	}
	if ready := condition(got, v1alpha1.ConditionReady); got.Status.DisarmedReason == "" || got.Status.State != v1alpha1.StateDisarmed || ready.Status != metav1.ConditionFalse || ready.Reason != policy.ReasonDisarmed {
		t.Fatalf("breaker not disarmed (State Disarmed, Ready False) after an external change: %+v", got.Status)
	}
	// Still down, many reconciles later: no re-open.
	b.settle(r, wcb.Name)
	if *hookOf(t, b.getConfig(), target).FailurePolicy != admissionregistrationv1.Fail {
		t.Fatal("tripswitch re-opened a webhook an administrator had just closed")
	}

	// An operator re-arms: the next failure opens again.
	got.Annotations = map[string]string{policy.RearmAnnotation: "1"}
	if err := b.c.Update(b.ctx, got); err != nil {
		t.Fatal(err)
	}
	b.settle(r, wcb.Name)
	if !hasRecord(b.getConfig()) || b.getBreaker(wcb.Name).Status.ObservedRearm != "1" {
		t.Fatal("re-arming did not let the circuit open again")
	}

	// Or recovery re-arms: close, then a new outage opens.
	b.setPolicy(admissionregistrationv1.Fail) // disarm again
	b.settle(r, wcb.Name)
	b.drive(r, wcb.Name, probe.Healthy)
	if b.getBreaker(wcb.Name).Status.DisarmedReason != "" {
		t.Fatal("a healthy webhook did not re-arm the breaker")
	}
	b.drive(r, wcb.Name, probe.Unhealthy)
	if !hasRecord(b.getConfig()) {
		t.Fatal("a new outage after recovery did not open the circuit")
	}
}

// An Ignore that tripswitch did not set is never taken over or restored.
func TestAdministratorIgnoreIsNeverRestored(t *testing.T) {
	b := newBed(t)
	b.createConfig(func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
		c.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	})
	wcb := b.createBreaker(b.cfg, nil)
	r := b.reconciler(b.c)
	rec := events.NewFakeRecorder(100)
	r.Recorder = rec
	for _, st := range []probe.Status{probe.Unhealthy, probe.Healthy, probe.Unhealthy, probe.Healthy} {
		b.drive(r, wcb.Name, st)
		cfg := b.getConfig()
		if *hookOf(t, cfg, target).FailurePolicy != admissionregistrationv1.Ignore || hasRecord(cfg) {
			t.Fatalf("%s: tripswitch touched an administrator's Ignore: %s", st, webhookJSON(t, cfg, target))
		}
	}
	var refusals int
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, policy.ReasonAlreadyFailOpen) {
			refusals++
		}
	}
	if refusals != 1 { // once, when it is first seen (before any outage), not once per reconcile
		t.Fatalf("%d %s events, want one", refusals, policy.ReasonAlreadyFailOpen)
	}
}

// A configuration deleted and recreated under the same name carries no
// record. Recreated while its circuit is open and the webhook still fails,
// that undid the open: the breaker writes nothing to the new configuration,
// disarms, and says so. Once the webhook is seen healthy it starts fresh,
// and a new outage opens the new configuration.
func TestRecreatedConfigurationStartsFreshOnceHealthy(t *testing.T) {
	b := newBed(t)
	b.createConfig(nil)
	wcb := b.createBreaker(b.cfg, nil)
	r := b.reconciler(b.c)
	b.drive(r, wcb.Name, probe.Unhealthy)
	before := b.getBreaker(wcb.Name)
	if before.Status.Record == nil {
		t.Fatal("circuit did not open")
	}
	if err := b.c.Delete(b.ctx, b.getConfig()); err != nil {
		t.Fatal(err)
	}
	b.settle(r, wcb.Name) // gone: nothing to write, the window stays
	b.createConfig(nil)
	b.settle(r, wcb.Name)
	after := b.getBreaker(wcb.Name)
	if after.Status.TargetUID == before.Status.TargetUID || after.Status.Record != nil || after.Status.State != v1alpha1.StateDisarmed ||
		!strings.Contains(after.Status.DisarmedReason, "deleted and created again") {
		t.Fatalf("recreated while the webhook still fails: status %+v", after.Status)
	}
	if c := condition(after, v1alpha1.ConditionExternalChange); c.Status != metav1.ConditionTrue {
		t.Fatalf("ExternalChange = %+v", c)
	}
	if h := after.Status.History; len(h) != 1 || h[0].ClosedAt == nil {
		t.Fatalf("history does not close the window of the deleted configuration: %+v", h)
	}
	if hasRecord(b.getConfig()) {
		t.Fatal("tripswitch opened the recreated configuration during the outage its deletion undid")
	}
	b.drive(r, wcb.Name, probe.Healthy)
	if got := b.getBreaker(wcb.Name); got.Status.State != v1alpha1.StateClosed || got.Status.DisarmedReason != "" || got.Status.Outage != nil {
		t.Fatalf("healthy again: status %+v, want Closed, re-armed, no outage window", got.Status)
	}
	b.drive(r, wcb.Name, probe.Unhealthy)
	if !hasRecord(b.getConfig()) {
		t.Fatal("recreated configuration did not open on a new outage")
	}
}

// Missing targets and corrupt records are reported; nothing is written.
func TestUnusableTargetsAreReportedNotWritten(t *testing.T) {
	t.Run("configuration missing", func(t *testing.T) {
		b := newBed(t)
		wcb := b.createBreaker(b.cfg, nil)
		b.health.set(wcb.Name, probe.Unhealthy)
		b.settle(b.reconciler(b.c), wcb.Name)
		got := b.getBreaker(wcb.Name)
		if c := condition(got, v1alpha1.ConditionTargetFound); c.Status != metav1.ConditionFalse || got.Status.State != v1alpha1.StateUnknown {
			t.Fatalf("TargetFound = %+v, state %s", c, got.Status.State)
		}
	})
	t.Run("webhook missing", func(t *testing.T) {
		b := newBed(t)
		b.createConfig(func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Webhooks = c.Webhooks[:1] })
		wcb := b.createBreaker(b.cfg, nil)
		b.health.set(wcb.Name, probe.Unhealthy)
		b.settle(b.reconciler(b.c), wcb.Name)
		got := b.getBreaker(wcb.Name)
		if c := condition(got, v1alpha1.ConditionTargetFound); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "webhook "+target) {
			t.Fatalf("TargetFound = %+v", c)
		}
		if len(b.getConfig().Annotations) != 0 {
			t.Fatal("wrote to a configuration that lacks the target webhook")
		}
	})
	t.Run("corrupt record", func(t *testing.T) {
		b := newBed(t)
		b.createConfig(func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
			c.Annotations = map[string]string{circuit.AnnotationKey(target): `{"webhook":"` + target + `","action":"Ignore"`}
			c.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		})
		wcb := b.createBreaker(b.cfg, nil)
		r := b.reconciler(b.c)
		for _, st := range []probe.Status{probe.Unhealthy, probe.Healthy} {
			b.drive(r, wcb.Name, st)
			cfg := b.getConfig()
			if *hookOf(t, cfg, target).FailurePolicy != admissionregistrationv1.Ignore || !hasRecord(cfg) {
				t.Fatalf("%s: tripswitch acted on a corrupt record: %s", st, webhookJSON(t, cfg, target))
			}
			if c := condition(b.getBreaker(wcb.Name), v1alpha1.ConditionReady); c.Reason != policy.ReasonCorruptRecord {
				t.Fatalf("Ready = %+v, want reason %s", c, policy.ReasonCorruptRecord)
			}
		}
	})
}

// Deleting a breaker restores the webhook before the finalizer goes.
func TestDeletingAnOpenBreakerRestoresTheWebhook(t *testing.T) {
	b := newBed(t)
	orig := b.createConfig(nil)
	wcb := b.createBreaker(b.cfg, func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.OpenAction = v1alpha1.OpenActionBypass })
	r := b.reconciler(b.c)
	b.drive(r, wcb.Name, probe.Unhealthy)
	if !hasRecord(b.getConfig()) {
		t.Fatal("circuit did not open")
	}
	if err := b.c.Delete(b.ctx, b.getBreaker(wcb.Name)); err != nil {
		t.Fatal(err)
	}
	_ = b.trySettle(r, wcb.Name) // ends when the breaker is gone
	cfg := b.getConfig()
	if webhookJSON(t, cfg, target) != webhookJSON(t, orig, target) || hasRecord(cfg) {
		t.Fatalf("deleting the breaker left the webhook changed: %s", webhookJSON(t, cfg, target))
	}
	var gone v1alpha1.WebhookCircuitBreaker
	if err := b.c.Get(b.ctx, types.NamespacedName{Name: wcb.Name}, &gone); !apierrors.IsNotFound(err) {
		t.Fatalf("breaker still exists after restore: %v (finalizers %v)", err, gone.Finalizers)
	}
}

package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/metrics"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

func tooLongGauge(t *testing.T, reg *prometheus.Registry, breaker string, want int) {
	t.Helper()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP tripswitch_circuit_open_too_long 1 while the breaker's circuit has been open for its spec.maxOpenDuration (condition OpenTooLong), else 0.
# TYPE tripswitch_circuit_open_too_long gauge
tripswitch_circuit_open_too_long{breaker="`+breaker+`"} `+string(rune('0'+want))+`
`), "tripswitch_circuit_open_too_long"); err != nil {
		t.Fatal(err)
	}
}

// TestMaxOpenDuration: a breaker open for spec.maxOpenDuration raises
// OpenTooLong (condition, event reason, metric). With onMaxOpen Close the
// reconcile is requeued for the deadline and, at it, the webhook's original
// failurePolicy is back although the webhook still fails; it does not open
// again for this outage, and opens again once it has recovered and fails
// anew. With Stay it stays open.
func TestMaxOpenDuration(t *testing.T) {
	for _, on := range []v1alpha1.OnMaxOpen{v1alpha1.OnMaxOpenClose, v1alpha1.OnMaxOpenStay} {
		t.Run(string(on), func(t *testing.T) {
			b := newBed(t)
			orig := b.createConfig(nil)
			wcb := b.createBreaker(b.cfg, func(w *v1alpha1.WebhookCircuitBreaker) {
				w.Spec.MaxOpenDuration = &metav1.Duration{Duration: 5 * time.Minute}
				w.Spec.OnMaxOpen = on
			})
			reg := prometheus.NewRegistry()
			m, err := metrics.New(reg)
			if err != nil {
				t.Fatal(err)
			}
			r := b.reconciler(b.c)
			r.Metrics = m
			b.drive(r, wcb.Name, probe.Healthy)
			b.drive(r, wcb.Name, probe.Unhealthy)
			got := b.getBreaker(wcb.Name)
			if got.Status.State != v1alpha1.StateOpen {
				t.Fatalf("not open: %s", got.Status.State)
			}
			deadline := got.Status.Record.OpenedAt.Add(5 * time.Minute)
			tooLongGauge(t, reg, wcb.Name, 0)

			// 30 s before the deadline: within it, and looked at again at it.
			b.clock.SetTime(deadline.Add(-30 * time.Second))
			res, err := r.Reconcile(b.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: wcb.Name}})
			if err != nil || res.RequeueAfter < 30*time.Second || res.RequeueAfter > 30*time.Second+50*time.Millisecond {
				t.Fatalf("requeue %v (%v), want 30s (the time left)", res.RequeueAfter, err)
			}
			if c := meta.FindStatusCondition(b.getBreaker(wcb.Name).Status.Conditions, v1alpha1.ConditionOpenTooLong); c == nil || c.Status != metav1.ConditionFalse {
				t.Fatalf("before the deadline: %+v", c)
			}
			b.clock.Step(res.RequeueAfter)
			b.settle(r, wcb.Name)
			got = b.getBreaker(wcb.Name)
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionOpenTooLong)
			w := hookOf(t, b.getConfig(), target)
			switch on {
			case v1alpha1.OnMaxOpenClose:
				if got.Status.State == v1alpha1.StateOpen || got.Status.Record != nil || w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail ||
					webhookJSON(t, b.getConfig(), target) != webhookJSON(t, orig, target) {
					t.Fatalf("at the deadline: state %s, failurePolicy %v", got.Status.State, w.FailurePolicy)
				}
				if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonMaxOpenClosed || got.Status.DisarmedReason == "" {
					t.Fatalf("at the deadline: OpenTooLong %+v disarmed %q", c, got.Status.DisarmedReason)
				}
				tooLongGauge(t, reg, wcb.Name, 1) // the alert's series
				// Still failing: it stays closed for this outage.
				b.clock.Step(time.Minute)
				b.settle(r, wcb.Name)
				if got := b.getBreaker(wcb.Name); got.Status.Record != nil {
					t.Fatal("opened again during the same outage")
				}
				tooLongGauge(t, reg, wcb.Name, 1)
				b.drive(r, wcb.Name, probe.Healthy)
				tooLongGauge(t, reg, wcb.Name, 0) // re-armed
				b.drive(r, wcb.Name, probe.Unhealthy)
				if got := b.getBreaker(wcb.Name); got.Status.State != v1alpha1.StateOpen {
					t.Fatalf("a new outage after recovery did not open: %s", got.Status.State)
				}
			case v1alpha1.OnMaxOpenStay:
				if got.Status.State != v1alpha1.StateOpen || c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonMaxOpenDuration {
					t.Fatalf("at the deadline: state %s OpenTooLong %+v", got.Status.State, c)
				}
				tooLongGauge(t, reg, wcb.Name, 1)
			}
		})
	}
}

package controller_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/tools/events"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/breakglass"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// A circuit restored while the controller is away: with `tripswitch
// restore`, the breaker's window closes when and because the operator
// restored it; by hand (the record and the change removed together), the
// returning controller closes it as ClosedExternally. Either way the
// returning controller reports no RecordRemovedExternally (nothing fails
// open without a record) and decides afresh: a webhook still down opens a
// new window, a healthy one stays closed.
func TestRestoreWhileTheControllerIsAway(t *testing.T) {
	for _, tc := range []struct {
		name       string
		restore    func(b *bed)
		probe      probe.Status
		wantReason string
	}{
		{"breakglass/still down", breakGlass, probe.Unhealthy, breakglass.CloseReason},
		{"breakglass/recovered", breakGlass, probe.Healthy, breakglass.CloseReason},
		{"by hand/recovered", byHand, probe.Healthy, policy.ReasonClosedExternally},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t)
			b.createConfig(nil)
			wcb := b.createBreaker(b.cfg, nil)
			b.drive(b.reconciler(b.c), wcb.Name, probe.Unhealthy)
			if !hasRecord(b.getConfig()) {
				t.Fatal("circuit did not open")
			}
			// The controller goes away; the operator restores.
			restoredAfter := time.Now().Add(-time.Second)
			tc.restore(b)
			b.clock.Step(20 * time.Minute)

			r := b.reconciler(b.c)
			rec := events.NewFakeRecorder(100)
			r.Recorder = rec
			b.drive(r, wcb.Name, tc.probe)
			var seen []string
			for len(rec.Events) > 0 {
				seen = append(seen, <-rec.Events)
			}
			if slices.ContainsFunc(seen, func(e string) bool { return strings.Contains(e, policy.ReasonRecordRemoved) }) {
				t.Errorf("a spurious %s after a restore: %q", policy.ReasonRecordRemoved, seen)
			}
			h := b.getBreaker(wcb.Name).Status.History
			if len(h) == 0 || h[0].ClosedAt == nil || h[0].CloseReason != tc.wantReason {
				t.Fatalf("first window %+v, want closed with %s", h, tc.wantReason)
			}
			if tc.wantReason == breakglass.CloseReason && (h[0].ClosedAt.Time.Before(restoredAfter) || h[0].ClosedAt.Time.After(time.Now())) {
				t.Errorf("window closed at %v, want the time of the restore (after %v)", h[0].ClosedAt, restoredAfter)
			}
			reopened := tc.probe == probe.Unhealthy
			if got := len(h) == 2 && h[1].ClosedAt == nil; got != reopened || hasRecord(b.getConfig()) != reopened {
				t.Errorf("webhook %s after the restore: history %+v, record %v; want reopened %v", tc.probe, h, hasRecord(b.getConfig()), reopened)
			}
		})
	}
}

func breakGlass(b *bed) {
	b.t.Helper()
	if err := breakglass.Restore(b.ctx, b.c, v1alpha1.MutatingWebhookConfiguration, b.cfg, target); err != nil {
		b.t.Fatal(err)
	}
}

// byHand removes the record and puts Fail back in one update, as an
// operator following the README without the CLI would.
func byHand(b *bed) {
	b.t.Helper()
	cfg := b.getConfig()
	delete(cfg.Annotations, circuit.AnnotationKey(target))
	for i := range cfg.Webhooks {
		if cfg.Webhooks[i].Name == target {
			fail := admissionregistrationv1.Fail
			cfg.Webhooks[i].FailurePolicy = &fail
		}
	}
	if err := b.c.Update(b.ctx, cfg); err != nil {
		b.t.Fatal(err)
	}
}

package controller_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// TestAPIServerRejectsBadBreakers pins the CRD's validation on the real API
// server: each bad breaker is refused with a message that names the problem.
func TestAPIServerRejectsBadBreakers(t *testing.T) {
	b := newBed(t)
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	cases := []struct {
		name    string
		mutate  func(*v1alpha1.WebhookCircuitBreaker)
		wantMsg string
	}{
		{"mutating target without approval", func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.AllowAdmissionWithoutMutation = false }, "allowAdmissionWithoutMutation must be true"},
		{"validating target with only the mutation approval", func(w *v1alpha1.WebhookCircuitBreaker) {
			w.Spec.Target.Kind = v1alpha1.ValidatingWebhookConfiguration
		}, "allowAdmissionWithoutValidation must be true"},
		{"unknown kind", func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.Target.Kind = "Deployment" }, `spec.target.kind: Unsupported value: "Deployment"`},
		{"unknown action", func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.OpenAction = "Delete" }, "spec.openAction"},
		{"unknown mode", func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.Mode = "Sometimes" }, "spec.mode"},
		{"zero failure threshold", func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.Probe.FailureThreshold = -1 }, "spec.probe.failureThreshold"},
		{"huge success threshold", func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.Probe.SuccessThreshold = 1000 }, "spec.probe.successThreshold"},
		{"interval too short", func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.Probe.Interval = dur(time.Millisecond) }, "probe.interval must be between 100ms and 1h"},
		{"timeout longer than interval", func(w *v1alpha1.WebhookCircuitBreaker) {
			w.Spec.Probe.Interval, w.Spec.Probe.Timeout = dur(time.Second), dur(2*time.Second)
		}, "probe.timeout (2s) must not exceed probe.interval (1s)"},
		{"short interval with the default timeout", func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.Probe.Interval = dur(100 * time.Millisecond) },
			"probe.timeout (250ms) must not exceed probe.interval (100ms); the timeout defaults to 250ms, so an interval under 250ms needs a timeout of its own, for example timeout: 100ms"},
		{"halfOpen without the API server signal", func(w *v1alpha1.WebhookCircuitBreaker) {
			w.Spec.OpenAction = v1alpha1.OpenActionBypass
			w.Spec.HalfOpen = &v1alpha1.HalfOpenSpec{}
		}, "halfOpen needs openAction Bypass and apiServerSignal.enabled"},
		{"halfOpen with Ignore", func(w *v1alpha1.WebhookCircuitBreaker) {
			w.Spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true}
			w.Spec.HalfOpen = &v1alpha1.HalfOpenSpec{}
		}, "halfOpen needs openAction Bypass"},
		{"sample rate over 100", func(w *v1alpha1.WebhookCircuitBreaker) {
			w.Spec.OpenAction = v1alpha1.OpenActionBypass
			w.Spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true}
			w.Spec.HalfOpen = &v1alpha1.HalfOpenSpec{SamplePercent: 101}
		}, "spec.halfOpen.samplePercent"},
		{"trial window too short", func(w *v1alpha1.WebhookCircuitBreaker) {
			w.Spec.OpenAction = v1alpha1.OpenActionBypass
			w.Spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true}
			w.Spec.HalfOpen = &v1alpha1.HalfOpenSpec{Window: dur(time.Second)}
		}, "halfOpen.window must be a duration from 10s to 10m"},
		{"relative health path", func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.Probe.HealthPath = "healthz" }, "spec.probe.healthPath"},
		{"empty webhook name", func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.Target.WebhookName = "" }, "spec.target.webhookName"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wcb := &v1alpha1.WebhookCircuitBreaker{
				ObjectMeta: metav1.ObjectMeta{Name: b.cfg + "-" + string(rune('a'+i))},
				Spec: v1alpha1.WebhookCircuitBreakerSpec{
					Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "c", WebhookName: target},
					AllowAdmissionWithoutMutation: true,
				},
			}
			tc.mutate(wcb)
			err := b.c.Create(b.ctx, wcb)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("create: %v\nwant an Invalid error containing %q", err, tc.wantMsg)
			}
			// One message a person can act on: no CEL internals, no second
			// complaint that follows from the first.
			for _, noise := range []string{"no such key", "evaluating rule", "type conversion error", "google.protobuf"} {
				if strings.Contains(err.Error(), noise) {
					t.Fatalf("create: %v\nthe message leaks %q", err, noise)
				}
			}
			if tc.name == "interval too short" && strings.Contains(err.Error(), "timeout must not exceed") {
				t.Fatalf("a short interval also reported the default timeout: %v", err)
			}
		})
	}
}

// TestAPIServerExplainsMalformedDurations: a duration that does not parse
// gets a message naming the field and the expected form.
func TestAPIServerExplainsMalformedDurations(t *testing.T) {
	b := newBed(t)
	for field, want := range map[string]string{"interval": "probe.interval must be a duration such as 500ms, 2s or 1m", "timeout": "probe.timeout must be a duration such as 250ms or 2s"} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "tripswitch.dev/v1alpha1", "kind": "WebhookCircuitBreaker",
			"metadata": map[string]any{"name": b.cfg + "-" + field},
			"spec": map[string]any{
				"target":                        map[string]any{"kind": "MutatingWebhookConfiguration", "configurationName": "c", "webhookName": target},
				"allowAdmissionWithoutMutation": true,
				"probe":                         map[string]any{field: "soon"},
			},
		}}
		err := b.c.Create(b.ctx, u)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "type conversion error") {
			t.Errorf("%s: soon: %v\nwant only %q", field, err, want)
		}
	}
}

// TestAPIServerAppliesSeedDefaults pins the defaults and the immutable target.
func TestAPIServerAppliesSeedDefaults(t *testing.T) {
	b := newBed(t)
	b.createBreaker(b.cfg, nil)
	var got v1alpha1.WebhookCircuitBreaker
	if err := b.c.Get(b.ctx, types.NamespacedName{Name: b.cfg}, &got); err != nil {
		t.Fatal(err)
	}
	p := got.Spec.Probe
	if p.Interval.Duration != time.Second || p.Timeout.Duration != 250*time.Millisecond || p.FailureThreshold != 3 || p.SuccessThreshold != 5 ||
		p.Kind != v1alpha1.ProbeHTTPGet || p.HealthPath != "/healthz" || got.Spec.Mode != v1alpha1.ModeAuto || got.Spec.OpenAction != v1alpha1.OpenActionIgnore {
		t.Fatalf("defaults = %+v mode %s action %s", p, got.Spec.Mode, got.Spec.OpenAction)
	}
	got.Spec.Target.WebhookName = "else.tripswitch.test"
	if err := b.c.Update(b.ctx, &got); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "target is immutable") {
		t.Fatalf("changing the target: %v", err)
	}
}

// TestGoDefaultsAreTheCRDs: a breaker created with nothing but its target
// and the signal and audit switched on reads back from the API server with
// the CRD's defaults, which resolve to exactly what Resolve gives the same
// spec without them: the markers and v1alpha1's Default constants agree.
func TestGoDefaultsAreTheCRDs(t *testing.T) {
	b := newBed(t)
	created := b.createBreaker(b.cfg, func(w *v1alpha1.WebhookCircuitBreaker) {
		w.Spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true}
		w.Spec.Audit = &v1alpha1.AuditSpec{Enabled: true}
	})
	local := created.DeepCopy() // as sent: no defaults
	local.Spec.Probe, local.Spec.Mode, local.Spec.OpenAction = v1alpha1.ProbeSpec{}, "", ""
	local.Spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true}
	local.Spec.Audit = &v1alpha1.AuditSpec{Enabled: true}
	var got v1alpha1.WebhookCircuitBreaker
	if err := b.c.Get(b.ctx, types.NamespacedName{Name: b.cfg}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Probe.Interval == nil || got.Spec.APIServerSignal.Window == nil || got.Spec.Audit.QPS == 0 {
		t.Fatalf("the API server applied no defaults: %+v", got.Spec)
	}
	server, goSide := got.Spec.Resolve(), local.Spec.Resolve()
	if !reflect.DeepEqual(server, goSide) {
		t.Fatalf("the CRD's defaults resolve to\n%+v %+v %+v\nthe Go defaults to\n%+v %+v %+v",
			server, *server.Signal, *server.Audit, goSide, *goSide.Signal, *goSide.Audit)
	}
}

// TestSampleBoundsAreTheCRDs: the API server takes halfOpen.samplePercent
// at v1alpha1's bounds and refuses it one past the upper one, so the CRD's
// markers and the constants Resolve and the trial's expression use agree.
// (Below the lower bound is 0, which the API leaves out: the default.)
func TestSampleBoundsAreTheCRDs(t *testing.T) {
	b := newBed(t)
	for i, c := range []struct {
		percent int32
		ok      bool
	}{{v1alpha1.MinHalfOpenSamplePercent, true}, {v1alpha1.MaxHalfOpenSamplePercent, true}, {v1alpha1.MaxHalfOpenSamplePercent + 1, false}} {
		wcb := &v1alpha1.WebhookCircuitBreaker{
			ObjectMeta: metav1.ObjectMeta{Name: b.cfg + "-" + string(rune('a'+i))},
			Spec: v1alpha1.WebhookCircuitBreakerSpec{
				Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "c", WebhookName: target},
				AllowAdmissionWithoutMutation: true, OpenAction: v1alpha1.OpenActionBypass,
				APIServerSignal: &v1alpha1.APIServerSignalSpec{Enabled: true},
				HalfOpen:        &v1alpha1.HalfOpenSpec{SamplePercent: c.percent},
			},
		}
		err := b.c.Create(b.ctx, wcb)
		switch {
		case c.ok && err != nil:
			t.Errorf("samplePercent %d: %v, want it accepted", c.percent, err)
		case !c.ok && !apierrors.IsInvalid(err):
			t.Errorf("samplePercent %d: %v, want Invalid", c.percent, err)
		}
	}
}

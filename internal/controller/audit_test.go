package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/auditrun"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestAuditAfterClose: a webhook that denies names starting with
// "forbidden-" is down, its circuit opens, two ConfigMaps are admitted
// without it, it recovers and the circuit closes. The audit of the window
// lists both, says the webhook objects to one, names it in the status,
// fires a Warning event and sets the metric; objects from before and after
// the window are not listed.
func TestAuditAfterClose(t *testing.T) {
	for _, action := range []v1alpha1.OpenAction{v1alpha1.OpenActionBypass, v1alpha1.OpenActionIgnore} {
		t.Run(string(action), func(t *testing.T) {
			b := newBed(t)
			hook, err := slowhook.Start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = hook.Close() })
			hook.SetDeny("forbidden-")
			label := map[string]string{"tripswitch.test/audit": b.cfg}
			cm := func(name string) *corev1.ConfigMap {
				return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: b.cfg + "-" + name, Labels: label}}
			}
			// Named so that the webhook denies it: created before the webhook exists.
			before := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "forbidden-" + b.cfg + "-before", Labels: label}}
			if err := b.c.Create(b.ctx, before); err != nil {
				t.Fatal(err)
			}
			b.createConfig(func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) {
				w := &cfg.Webhooks[1]
				w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + "/validate"), CABundle: hook.CABundle}
				w.Rules = []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				}}
				w.ObjectSelector = &metav1.LabelSelector{MatchLabels: label}
				w.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
				w.TimeoutSeconds = ptr.To[int32](2)
			})
			name := b.cfg
			b.createBreaker(name, func(wcb *v1alpha1.WebhookCircuitBreaker) {
				wcb.Spec.OpenAction = action
				wcb.Spec.Audit = &v1alpha1.AuditSpec{Enabled: true, MaxObjects: 100, QPS: 50}
			})
			r := b.reconciler(b.c)
			b.settle(r, name)

			// The outage: the webhook answers 500, the circuit opens.
			waitServerSecondAfter(t, b, before.CreationTimestamp.Time)
			b.clock.SetTime(time.Now())
			hook.SetStatus(500)
			b.drive(r, name, probe.Unhealthy)
			if s := b.getBreaker(name).Status.State; s != v1alpha1.StateOpen {
				t.Fatalf("state %s, want Open", s)
			}
			// Admitted without the webhook (once the API server has seen the open circuit).
			forbidden := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "forbidden-" + b.cfg + "-during", Labels: label}}
			for _, o := range []*corev1.ConfigMap{forbidden, cm("ok-during")} {
				createEventually(t, b, o)
			}

			// Recovery: the webhook answers again, the circuit closes.
			hook.SetStatus(0)
			waitServerSecondAfter(t, b, time.Now().Add(-time.Second))
			b.clock.SetTime(time.Now())
			b.drive(r, name, probe.Healthy)
			if s := b.getBreaker(name).Status.State; s != v1alpha1.StateClosed {
				t.Fatalf("state %s, want Closed", s)
			}
			closedAt := b.getBreaker(name).Status.History[0].ClosedAt.Time
			waitServerSecondAfter(t, b, closedAt)
			if err := b.c.Create(b.ctx, cm("ok-after")); err != nil {
				t.Fatal(err)
			}

			rec := events.NewFakeRecorder(10)
			runner := &auditrun.Runner{Client: b.c, Reader: b.c, Config: controlPlane(t).Config, Reviewer: &probe.HTTPProber{}, Recorder: rec, Clock: b.clock}
			if err := runner.AuditPending(b.ctx, name); err != nil {
				t.Fatal(err)
			}
			got := b.getBreaker(name).Status.History[0].Audit
			if got == nil {
				t.Fatal("no audit result in status.history")
			}
			want := fmt.Sprintf("Objected ConfigMap default/%s", forbidden.Name)
			if got.Result != auditrun.AuditCompleted || got.Found != 2 || got.Objected != 1 || got.NoObjection != 1 ||
				len(got.Objects) != 1 || got.Objects[0] != want || got.Requests == 0 {
				t.Fatalf("audit %+v, want 2 found, 1 objected (%s), 1 clean", got, want)
			}
			select {
			case e := <-rec.Events:
				if !strings.HasPrefix(e, "Warning AuditObjections") || !strings.Contains(e, "tripswitch audit "+name) {
					t.Fatalf("event %q", e)
				}
			default:
				t.Fatal("no event")
			}
			// Done once: a second call finds nothing to audit.
			if err := runner.AuditPending(b.ctx, name); err != nil {
				t.Fatal(err)
			}
			if len(rec.Events) != 0 {
				t.Fatal("the window was audited twice")
			}
		})
	}
}

// TestAuditWithoutReadAccess: the status says the audit was not possible
// and why.
func TestAuditWithoutReadAccess(t *testing.T) {
	b := newBed(t)
	name := closedWindowToAudit(b)
	cfg, err := controlPlane(t).UserConfig("no-read-access")
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(10)
	runner := &auditrun.Runner{Client: b.c, Reader: b.c, Config: cfg, Reviewer: &probe.HTTPProber{}, Recorder: rec, Clock: b.clock}
	if err := runner.AuditPending(b.ctx, name); err != nil {
		t.Fatal(err)
	}
	got := b.getBreaker(name).Status.History[0].Audit
	if got == nil || got.Result != auditrun.AuditFailed || !strings.Contains(got.Message, "audit not possible") || !strings.Contains(got.Message, "forbidden") {
		t.Fatalf("audit %+v, want Failed saying it was forbidden", got)
	}
	for _, want := range []string{"get and list on", "audit.resources", "config/audit"} {
		if !strings.Contains(got.Message, want) {
			t.Errorf("audit message %q does not name %q", got.Message, want)
		}
	}
	if e := <-rec.Events; !strings.HasPrefix(e, "Warning AuditFailed") {
		t.Fatalf("event %q", e)
	}
}

// waitServerSecondAfter waits until the API server stamps objects with a
// later second than t (its timestamps have one-second resolution).
func waitServerSecondAfter(t *testing.T, b *bed, after time.Time) {
	t.Helper()
	for {
		tick := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "tick-"}}
		if err := b.c.Create(b.ctx, tick); err != nil {
			t.Fatal(err)
		}
		if tick.CreationTimestamp.After(after) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createEventually creates o, retrying while the API server still calls
// the failing webhook (it picks up configuration changes asynchronously).
func createEventually(t *testing.T, b *bed, o *corev1.ConfigMap) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := b.c.Create(b.ctx, o.DeepCopy())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("create %s while the circuit is open: %v", o.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deletingReader deletes the breaker the first time the audit reads its
// webhook configuration: the breaker goes while its audit runs.
type deletingReader struct {
	client.Reader
	del  func()
	once sync.Once
}

func (r *deletingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
		r.once.Do(r.del)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// A breaker deleted while its audit runs is the routine end of the audit:
// no error (which the runner would log with a stack trace).
func TestAuditOfADeletedBreakerIsNoError(t *testing.T) {
	b := newBed(t)
	name := closedWindowToAudit(b)
	reader := &deletingReader{Reader: b.c, del: func() {
		wcb := b.getBreaker(name)
		wcb.Finalizers = nil
		if err := b.c.Update(b.ctx, wcb); err != nil {
			t.Error(err)
		}
		if err := b.c.Delete(b.ctx, wcb); err != nil {
			t.Error(err)
		}
	}}
	runner := &auditrun.Runner{Client: b.c, Reader: reader, Config: controlPlane(t).Config, Reviewer: &probe.HTTPProber{}, Clock: b.clock}
	if err := runner.AuditPending(b.ctx, name); err != nil {
		t.Fatalf("audit of a breaker deleted meanwhile: %v, want no error", err)
	}
}

// closedWindowToAudit creates a breaker with the audit on, opens and closes
// its circuit, and returns its name: one closed window awaits an audit.
func closedWindowToAudit(b *bed) string {
	b.t.Helper()
	b.createConfig(nil)
	name := b.cfg
	b.createBreaker(name, func(wcb *v1alpha1.WebhookCircuitBreaker) {
		wcb.Spec.Audit = &v1alpha1.AuditSpec{Enabled: true, MaxObjects: 10, QPS: 10}
	})
	r := b.reconciler(b.c)
	b.settle(r, name)
	b.drive(r, name, probe.Unhealthy)
	b.drive(r, name, probe.Healthy)
	return name
}

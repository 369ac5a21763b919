package auditrun_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/auditrun"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/defaulthook"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/remediate"
)

// events records what the runner says, as "Kind/name Reason".
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) Eventf(regarding, _ runtime.Object, _, reason, _, _ string, _ ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	kind := regarding.GetObjectKind().GroupVersionKind().Kind
	if _, ok := regarding.(*v1alpha1.WebhookCircuitBreaker); ok {
		kind = "WebhookCircuitBreaker"
	}
	name := ""
	if o, ok := regarding.(client.Object); ok {
		name = o.GetName()
	}
	e.got = append(e.got, kind+"/"+name+" "+reason)
}

func (e *events) has(s string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, g := range e.got {
		if g == s {
			return true
		}
	}
	return false
}

// TestAutomaticRemediation: after the audit of a closed window, a breaker
// with spec.audit.remediate repairs what the audit found, with the same
// records as the command (events, counts in the window's audit status):
// None changes nothing, Reapply patches ConfigMaps but leaves a Pod,
// ReapplyAndRoll also evicts a ReplicaSet's Pod and never a bare one.
func TestAutomaticRemediation(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx, c := t.Context(), env.Client
	hook, err := defaulthook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })

	for _, mode := range []v1alpha1.RemediateMode{v1alpha1.RemediateNone, v1alpha1.RemediateReapply, v1alpha1.RemediateReapplyAndRoll} {
		t.Run(string(mode), func(t *testing.T) {
			ns := strings.ToLower(string(mode))
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			sel := map[string]string{"remediate-mode": ns}
			from := time.Now().Add(-time.Minute)
			// Admitted while there was no webhook.
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings", Labels: sel}}
			rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: appsv1.ReplicaSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/web:1"}}}}}}
			for _, o := range []client.Object{cm, rs} {
				if err := c.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			podSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/web:1"}}}
			owned := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-1", Labels: sel,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: rs.UID, Controller: ptr.To(true)}}}, Spec: podSpec}
			bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bare", Labels: sel}, Spec: podSpec}
			for _, o := range []client.Object{owned, bare} {
				if err := c.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			name := "auto-" + ns
			mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
				Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: name + ".example.com",
					ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + "/mutate"), CABundle: hook.CABundle},
					Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps", "pods"}}}},
					ObjectSelector: &metav1.LabelSelector{MatchLabels: sel}, SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone),
					AdmissionReviewVersions: []string{"v1"}}}}
			if err := c.Create(ctx, mwc); err != nil {
				t.Fatal(err)
			}
			wcb := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.WebhookCircuitBreakerSpec{
				Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: name, WebhookName: name + ".example.com"},
				AllowAdmissionWithoutMutation: true,
				Audit:                         &v1alpha1.AuditSpec{Enabled: true, QPS: 50, Remediate: mode},
			}}
			if err := c.Create(ctx, wcb); err != nil {
				t.Fatal(err)
			}
			closed := metav1.NewTime(time.Now().Add(time.Second))
			wcb.Status.History = []v1alpha1.OpenWindow{{OpenedAt: metav1.NewTime(from), ClosedAt: &closed, Action: v1alpha1.OpenActionBypass}}
			if err := c.Status().Update(ctx, wcb); err != nil {
				t.Fatal(err)
			}

			rec := &events{}
			r := &auditrun.Runner{Client: c, Reader: c, Config: env.Config, Reviewer: &probe.HTTPProber{}, Recorder: rec, Clock: clock.RealClock{},
				Remediation: remediate.Options{EvictionBackoff: 50 * time.Millisecond, EvictionTimeout: 10 * time.Second}}
			if err := r.AuditPending(ctx, name); err != nil {
				t.Fatal(err)
			}

			if err := c.Get(ctx, client.ObjectKeyFromObject(wcb), wcb); err != nil {
				t.Fatal(err)
			}
			res := wcb.Status.History[0].Audit
			if res == nil || res.WouldMutate != 3 {
				t.Fatalf("audit %+v", res)
			}
			got := ""
			if m := res.Remediation; m != nil {
				got = fmt.Sprintf("by %s: %d remediated, %d rolled, %d refused, %d failed", m.By, m.Remediated, m.Rolled, m.Refused, m.Failed)
			}
			want := map[v1alpha1.RemediateMode]string{
				v1alpha1.RemediateNone:           "",
				v1alpha1.RemediateReapply:        "by controller: 1 remediated, 0 rolled, 2 refused, 0 failed",
				v1alpha1.RemediateReapplyAndRoll: "by controller: 1 remediated, 1 rolled, 1 refused, 0 failed",
			}[mode]
			if got != want {
				t.Fatalf("remediation %q, want %q (%+v)", got, want, res.Remediation)
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
				t.Fatal(err)
			}
			if patched := cm.Labels[defaulthook.InjectedLabel] == "true" && cm.Data["mode"] == defaulthook.DefaultMode; patched != (mode != v1alpha1.RemediateNone) {
				t.Errorf("ConfigMap %v %v under %s", cm.Labels, cm.Data, mode)
			}
			err := c.Get(ctx, client.ObjectKeyFromObject(owned), &corev1.Pod{})
			if evicted := err != nil; evicted != (mode == v1alpha1.RemediateReapplyAndRoll) {
				t.Errorf("the ReplicaSet's Pod under %s: %v", mode, err)
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(bare), &corev1.Pod{}); err != nil {
				t.Errorf("the bare Pod under %s: %v", mode, err)
			}
			if mode != v1alpha1.RemediateNone && (!rec.has("ConfigMap/settings Remediated") || !rec.has("WebhookCircuitBreaker/"+name+" RemediationIncomplete")) {
				t.Errorf("events %v", rec.got)
			}
			if mode == v1alpha1.RemediateReapplyAndRoll && !rec.has("Pod/web-1 Rolled") {
				t.Errorf("events %v", rec.got)
			}
		})
	}
}

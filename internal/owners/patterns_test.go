package owners_test

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/ownersim"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
	"github.com/tripswitch-dev/tripswitch/internal/owners"
)

// The package's control plane starts on first use; TestMain stops it.
var shared testenv.Shared

// runs numbers the tests' configurations, so that -count runs each have
// their own.
var runs atomic.Int64

func controlPlane(t *testing.T) *testenv.Env {
	t.Helper()
	return shared.Get(t)
}

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	code := m.Run()
	shared.Stop()
	os.Exit(code)
}

// template is what an owner wants: two webhooks, the target with a
// matchCondition of the owner's own, failurePolicy Fail.
func template(name string, policy bool) *admissionregistrationv1.MutatingWebhookConfiguration {
	hook := func(n string) admissionregistrationv1.MutatingWebhook {
		w := admissionregistrationv1.MutatingWebhook{
			Name:                    n,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9/" + n), CABundle: []byte("owner-ca")},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}}}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"tripswitch.test/never": "true"}},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "owner.example.com/not-leases", Expression: "true"}},
		}
		if policy {
			w.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
		}
		return w
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "owner"}, Annotations: map[string]string{"owner.example.com/generation": "1"}},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{hook("other.tripswitch.test"), hook(hook1)},
	}
}

const hook1 = "target.tripswitch.test"

// TestWhatEachOwnerPatternLeaves pins, on the real API server, which
// writes of an owner leave tripswitch's open in place: the compatibility
// table of docs/owners.md. The owner creates its configuration and writes
// it again a second later, and Judge's verdict from managedFields alone
// must say what then happens (whenever it is sure); tripswitch opens (its
// own field manager), the owner writes once more its way, the webhook is
// read back and the one undo rule judges it; Blame must name the owner.
func TestWhatEachOwnerPatternLeaves(t *testing.T) {
	cp := controlPlane(t)
	ctx := t.Context()
	for _, tc := range []struct {
		pattern ownersim.Pattern
		// policy: the owner's template sets failurePolicy.
		policy bool
		// holds: what survives the owner's write, per action; kept: the
		// record annotation survives.
		ignoreHolds, bypassHolds, kept bool
		// conflict: the owner's own write is refused while an Ignore is open
		// (the failurePolicy it applies is tripswitch's now).
		conflict bool
		// unseen: managedFields cannot show this owner before it undoes an
		// open (each of its writes is a new object's creation).
		unseen bool
	}{
		{pattern: ownersim.WholeUpdate, policy: true},
		{pattern: ownersim.MergePatch, policy: true, kept: true},
		{pattern: ownersim.ApplyForce, policy: true, bypassHolds: true, kept: true},
		{pattern: ownersim.ApplyForce, policy: false, ignoreHolds: true, bypassHolds: true, kept: true},
		{pattern: ownersim.Apply, policy: true, ignoreHolds: true, bypassHolds: true, kept: true, conflict: true},
		// Their writes change nothing after the create (the policy they
		// set is the one the configuration has): managedFields show an
		// installer, or an owner of the caBundle alone, until they undo an
		// open (docs/owners.md says so).
		{pattern: ownersim.StrategicPatch, policy: true, bypassHolds: true, kept: true, unseen: true},
		{pattern: ownersim.PolicyUpdate, policy: true, bypassHolds: true, kept: true, unseen: true},
		{pattern: ownersim.CABundleUpdate, policy: true, ignoreHolds: true, bypassHolds: true, kept: true},
		{pattern: ownersim.CABundleApply, policy: true, ignoreHolds: true, bypassHolds: true, kept: true},
		// kubectl apply and Argo CD's default sync: a three-way strategic
		// merge puts back the failurePolicy its manifest sets, and keeps
		// tripswitch's matchCondition and record.
		{pattern: ownersim.ClientSideApply, policy: true, bypassHolds: true, kept: true},
		{pattern: ownersim.ClientSideApply, policy: false, ignoreHolds: true, bypassHolds: true, kept: true},
		{pattern: ownersim.Recreate, policy: true, unseen: true},
	} {
		for _, action := range []v1alpha1.OpenAction{v1alpha1.OpenActionIgnore, v1alpha1.OpenActionBypass} {
			holds := map[v1alpha1.OpenAction]bool{v1alpha1.OpenActionIgnore: tc.ignoreHolds, v1alpha1.OpenActionBypass: tc.bypassHolds}[action]
			name := fmt.Sprintf("%s-policy-%v-%s", tc.pattern, tc.policy, strings.ToLower(string(action)))
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				want := template(fmt.Sprintf("pattern-%d-%s", runs.Add(1), name), tc.policy)
				manager := "owner-" + string(tc.pattern)
				if tc.pattern == ownersim.ClientSideApply {
					manager = "argocd-controller" // Argo CD's default sync
				}
				o, err := ownersim.New(cp.Config, cp.Scheme, tc.pattern, manager, want)
				if err != nil {
					t.Fatal(err)
				}
				if tc.pattern == ownersim.CABundleUpdate || tc.pattern == ownersim.CABundleApply || tc.pattern == ownersim.PolicyUpdate {
					// These owners do not create their configuration: an installer does.
					if err := o.CreateAs(ctx, "helm"); err != nil {
						t.Fatal(err)
					}
					o.SetCABundle([]byte("rotated-ca")) // so that its write changes something
				} else if err := o.Create(ctx); err != nil {
					t.Fatal(err)
				}

				// A second later (managedFields keep seconds) the owner
				// writes again, as an owner does: Judge sees it came back.
				time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
				o.SetCABundle([]byte("owner-ca-2"))
				if err := o.Write(ctx); err != nil {
					t.Fatalf("owner's second write: %v", err)
				}
				o.SetCABundle([]byte("owner-ca-3")) // so that its next write changes something
				cfg := read(t, cp, want.Name)
				v := owners.Judge(cfg.Object, hook1, action, false, nil)
				switch {
				case tc.unseen:
				case v.Reason == owners.ReasonUndoesOpen && holds, v.Reason != owners.ReasonMayUndoOpen && v.Reason != owners.ReasonUndoesOpen && !holds:
					t.Fatalf("Owned says %s before the open (%s), but the open holds: %v", v.Reason, v.Message, holds)
				}
				uid := cfg.Object.GetUID()
				rec, err := circuit.Writer{Client: cp.Client, Budget: circuit.NoBudget{}}.Open(ctx, cfg, hook1, v1alpha1.CircuitRecord{Breaker: "b", BreakerUID: "uid", Action: action, OpenedAt: metav1.Now()})
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				if ws := owners.Writers(cfg.Object, hook1); len(ws) == 0 || ws[0].Manager == circuit.FieldManager {
					t.Fatalf("tripswitch's own write counted as a writer: %+v", ws)
				}
				if err := o.Write(ctx); err != nil {
					t.Fatalf("owner's write: %v", err)
				}
				if got, want := o.Counts().Conflicts == 1, tc.conflict && action == v1alpha1.OpenActionIgnore; got != want {
					t.Fatalf("owner's write refused for a conflict: %v, want %v", got, want)
				}

				after := read(t, cp, want.Name)
				st := circuit.Inspect(after, hook1)
				kept := st.Record != nil
				// The one rule judges it, as the controller does.
				held := &circuit.Held{Record: &rec, Action: rec.Action, OpenedAt: rec.OpenedAt, UID: uid}
				u, undone := circuit.Undone(held, after.Object.GetUID(), st)
				if undone == holds || kept != tc.kept {
					t.Fatalf("after the owner's write: undone %v (want %v), record kept %v (want %v): %+v %v",
						undone, !holds, kept, tc.kept, st.Webhook.MatchConditions, after.Object.GetAnnotations())
				}
				if holds {
					return
				}
				blamed := owners.Blame(owners.Writers(after.Object, hook1), rec.OpenedAt.Time, u.Fields.Has(circuit.FieldFailurePolicy))
				if !strings.Contains(blamed, manager) {
					t.Fatalf("Blame = %q, want it to name %s", blamed, manager)
				}
				t.Logf("%s: %s undid %s (%s: %s)", name, blamed, action, u.Shape, u.Gone)
			})
		}
	}
}

func read(t *testing.T, cp *testenv.Env, name string) *circuit.Configuration {
	t.Helper()
	obj := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := cp.Client.Get(t.Context(), types.NamespacedName{Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	cfg, err := circuit.View(obj)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestTrimOnTheAPIServersObject: what a watch keeps of a configuration the
// API server wrote (four webhooks, written by an installer, an owner that
// rewrote the policy, a caBundle injector and tripswitch): the same
// writers, in a fraction of the bytes.
func TestTrimOnTheAPIServersObject(t *testing.T) {
	cp := controlPlane(t)
	ctx := t.Context()
	want := template(fmt.Sprintf("trim-%d", runs.Add(1)), true)
	for i := 2; i < 4; i++ {
		w := *want.Webhooks[0].DeepCopy()
		w.Name = fmt.Sprintf("w%d.tripswitch.test", i)
		want.Webhooks = append(want.Webhooks, w)
	}
	istio, err := ownersim.New(cp.Config, cp.Scheme, ownersim.PolicyUpdate, "pilot-discovery", want)
	if err != nil {
		t.Fatal(err)
	}
	if err := istio.CreateAs(ctx, "helm"); err != nil {
		t.Fatal(err)
	}
	istio.SetCABundle([]byte("istio-ca"))
	if err := istio.Write(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := read(t, cp, want.Name)
	if _, err := (circuit.Writer{Client: cp.Client, Budget: circuit.NoBudget{}}).Open(ctx, cfg, hook1, v1alpha1.CircuitRecord{Breaker: "b", BreakerUID: "uid", Action: v1alpha1.OpenActionBypass, OpenedAt: metav1.Now()}); err != nil {
		t.Fatal(err)
	}
	obj := read(t, cp, want.Name).Object
	size := func() (n int) {
		for _, mf := range obj.GetManagedFields() {
			if mf.FieldsV1 != nil {
				n += len(mf.FieldsV1.GetRawBytes())
			}
		}
		return n
	}
	before, full := owners.Writers(obj, hook1), size()
	owners.Trim(obj)
	after, trimmed := owners.Writers(obj, hook1), size()
	if fmt.Sprint(before) != fmt.Sprint(after) || len(before) != 2 {
		t.Fatalf("writers %+v, trimmed %+v; want helm and pilot-discovery, the same", before, after)
	}
	if trimmed*2 > full {
		t.Fatalf("trimmed managedFields are %d bytes of %d", trimmed, full)
	}
	t.Logf("managedFields of 4 webhooks and 3 managers: %d bytes, trimmed %d", full, trimmed)
}

// TestOwnedIsNeverJudgedFromTripswitchsOwnWrite: an operator that writes
// the webhook with Update, failurePolicy included, may undo an open with
// Ignore. tripswitch's own open (an Update of the failurePolicy) takes that
// field from it in managedFields, and so does its close: judged afresh
// from them, the operator would seem to keep the open. The verdict stays
// as last judged while tripswitch owns the field.
func TestOwnedIsNeverJudgedFromTripswitchsOwnWrite(t *testing.T) {
	cp := controlPlane(t)
	ctx := t.Context()
	want := template(fmt.Sprintf("own-%d", runs.Add(1)), true)
	want.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	o, err := ownersim.New(cp.Config, cp.Scheme, ownersim.PolicyUpdate, "tenant-operator", want)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.CreateAs(ctx, "helm"); err != nil {
		t.Fatal(err)
	}
	// A second later the operator sets its failurePolicy, Fail: it owns it.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
	want.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	if o, err = ownersim.New(cp.Config, cp.Scheme, ownersim.PolicyUpdate, "tenant-operator", want); err != nil {
		t.Fatal(err)
	}
	if err := o.Write(ctx); err != nil {
		t.Fatal(err)
	}
	judge := func(last *metav1.Condition) owners.Verdict {
		return owners.Judge(read(t, cp, want.Name).Object, hook1, v1alpha1.OpenActionIgnore, false, last)
	}
	before := judge(nil)
	if before.Reason != owners.ReasonMayUndoOpen || owners.Taken(read(t, cp, want.Name).Object, hook1) != 0 {
		t.Fatalf("before the open: %s (%s)", before.Reason, before.Message)
	}
	last := &metav1.Condition{Type: v1alpha1.ConditionOwned, Status: metav1.ConditionTrue, Reason: before.Reason, Message: before.Message}
	w := circuit.Writer{Client: cp.Client, Budget: circuit.NoBudget{}}
	rec, err := w.Open(ctx, read(t, cp, want.Name), hook1, v1alpha1.CircuitRecord{Breaker: "b", BreakerUID: "uid", Action: v1alpha1.OpenActionIgnore, OpenedAt: metav1.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []string{"after tripswitch's open", "after tripswitch's close"} {
		if owners.Taken(read(t, cp, want.Name).Object, hook1)&owners.FailurePolicy == 0 {
			t.Fatalf("%s: tripswitch does not own the failurePolicy it wrote", step)
		}
		// What managedFields alone would say: the operator no longer
		// owns the failurePolicy, so it seems to keep the open.
		t.Logf("%s: judged afresh from managedFields: %s", step, judge(nil).Reason)
		if v := judge(last); v.Reason != owners.ReasonMayUndoOpen || !v.Kept {
			t.Fatalf("%s: Owned %s (kept %v), want %s as last judged: %s", step, v.Reason, v.Kept, owners.ReasonMayUndoOpen, v.Message)
		}
		if step == "after tripswitch's open" {
			if err := w.Close(ctx, read(t, cp, want.Name), hook1, &rec); err != nil {
				t.Fatal(err)
			}
		}
	}
}

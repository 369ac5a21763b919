package owners_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/owners"
)

const hook = "target.tripswitch.test"

var created = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fieldsV1 builds a managedFields field set of webhook hook from paths
// like "f:failurePolicy" or "f:clientConfig/f:caBundle", as the API
// server writes them.
func fieldsV1(t *testing.T, webhook string, paths ...string) *metav1.FieldsV1 {
	t.Helper()
	entry := map[string]any{".": map[string]any{}, "f:name": map[string]any{}}
	for _, p := range paths {
		m := entry
		for _, part := range strings.Split(p, "/") {
			next, ok := m[part].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[part] = next
			}
			m = next
		}
	}
	raw, err := json.Marshal(map[string]any{"f:webhooks": map[string]any{`k:{"name":"` + webhook + `"}`: entry}})
	if err != nil {
		t.Fatal(err)
	}
	return metav1.NewFieldsV1(string(raw))
}

func entry(t *testing.T, manager string, op metav1.ManagedFieldsOperationType, after time.Duration, paths ...string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "admissionregistration.k8s.io/v1",
		Time: &metav1.Time{Time: created.Add(after)}, FieldsType: "FieldsV1", FieldsV1: fieldsV1(t, hook, paths...)}
}

func config(entries ...metav1.ManagedFieldsEntry) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
		Name: "cfg", CreationTimestamp: metav1.Time{Time: created}, ManagedFields: entries}}
}

// Every field a full writer of an entry owns, as the API server lists
// them after a create.
var all = []string{"f:admissionReviewVersions", "f:clientConfig/.", "f:clientConfig/f:caBundle", "f:clientConfig/f:url",
	"f:failurePolicy", "f:matchConditions/.", `f:matchConditions/k:{"name":"owners-own"}/.`, "f:rules", "f:sideEffects", "f:timeoutSeconds"}

func TestWritersTellFieldsAndSkipTripswitch(t *testing.T) {
	cfg := config(
		entry(t, "helm", metav1.ManagedFieldsOperationUpdate, 0, all...),
		entry(t, circuit.FieldManager, metav1.ManagedFieldsOperationUpdate, 5*time.Second, "f:failurePolicy"),
		entry(t, "cainjector", metav1.ManagedFieldsOperationApply, 9*time.Second, "f:clientConfig/f:caBundle"),
		entry(t, "labeller", metav1.ManagedFieldsOperationUpdate, 7*time.Second), // owns nothing of the entry
		// tripswitch's own matchCondition, owned by someone else, is no field of theirs.
		entry(t, "sneaky", metav1.ManagedFieldsOperationUpdate, 3*time.Second, `f:matchConditions/k:{"name":"`+circuit.MatchConditionName+`"}/f:expression`),
	)
	cfg.ManagedFields = append(cfg.ManagedFields, metav1.ManagedFieldsEntry{Manager: "status-writer", Operation: metav1.ManagedFieldsOperationUpdate,
		Subresource: "status", FieldsType: "FieldsV1", FieldsV1: fieldsV1(t, hook, "f:failurePolicy")})
	got := owners.Writers(cfg, hook)
	if len(got) != 2 || got[0].Manager != "cainjector" || got[1].Manager != "helm" {
		t.Fatalf("writers %+v, want cainjector then helm", got)
	}
	if got[0].Fields != owners.CABundle || !got[0].Applies() {
		t.Errorf("cainjector: %s, applies %v", got[0].Fields, got[0].Applies())
	}
	if want := owners.FailurePolicy | owners.MatchConditions | owners.CABundle | owners.Other; got[1].Fields != want {
		t.Errorf("helm owns %s, want %s", got[1].Fields, want)
	}
	if len(owners.Writers(cfg, "other.tripswitch.test")) != 0 {
		t.Error("writers of another webhook's entry counted for this one")
	}
}

// Trim keeps what Writers reads, in a fraction of the bytes.
func TestTrimKeepsTheWriters(t *testing.T) {
	cfg := config(
		entry(t, "kyverno", metav1.ManagedFieldsOperationUpdate, 3*time.Second, all...),
		entry(t, "istio", metav1.ManagedFieldsOperationUpdate, 2*time.Second, "f:failurePolicy", "f:clientConfig/f:caBundle"),
		entry(t, "cainjector", metav1.ManagedFieldsOperationApply, time.Second, "f:clientConfig/f:caBundle"),
	)
	before := owners.Writers(cfg, hook)
	size := func() (n int) {
		for _, mf := range cfg.ManagedFields {
			n += len(mf.FieldsV1.GetRawBytes())
		}
		return n
	}
	full := size()
	owners.Trim(cfg)
	after := owners.Writers(cfg, hook)
	if len(after) != len(before) {
		t.Fatalf("trimmed writers %+v, want %+v", after, before)
	}
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("writer %d: trimmed %+v, want %+v", i, after[i], before[i])
		}
	}
	if size() >= full {
		t.Errorf("trimmed managedFields are %d bytes, were %d", size(), full)
	}
	t.Logf("managedFields %d bytes, trimmed %d", full, size())
}

func TestJudge(t *testing.T) {
	bypass, ignore := v1alpha1.OpenActionBypass, v1alpha1.OpenActionIgnore
	for _, tc := range []struct {
		name       string
		entries    []metav1.ManagedFieldsEntry
		ownerRef   bool
		action     v1alpha1.OpenAction
		trial      bool
		wantReason string
		wantIn     []string
	}{
		{name: "a configuration only helm and kubectl wrote is owned by no controller", action: ignore,
			entries: []metav1.ManagedFieldsEntry{
				entry(t, "helm", metav1.ManagedFieldsOperationUpdate, 0, all...),
				entry(t, "kubectl-edit", metav1.ManagedFieldsOperationUpdate, time.Hour, "f:failurePolicy"),
				entry(t, "kubectl-client-side-apply", metav1.ManagedFieldsOperationUpdate, 2*time.Hour, "f:rules"),
			},
			wantReason: owners.ReasonNotOwned, wantIn: []string{"kubectl-edit is a person's tool"}},
		{name: "a caBundle injector never undoes an open", action: ignore,
			entries: []metav1.ManagedFieldsEntry{
				entry(t, "helm", metav1.ManagedFieldsOperationUpdate, 0, all...),
				entry(t, "cert-manager-cainjector", metav1.ManagedFieldsOperationApply, time.Minute, "f:clientConfig/f:caBundle"),
			},
			wantReason: owners.ReasonCABundleOnly, wantIn: []string{"cert-manager (field manager cert-manager-cainjector) writes only the caBundle"}},
		{name: "Kyverno undoes Ignore and names its own setting", action: ignore,
			entries:    []metav1.ManagedFieldsEntry{entry(t, "kyverno", metav1.ManagedFieldsOperationUpdate, 0, all...)},
			wantReason: owners.ReasonUndoesOpen, wantIn: []string{"Kyverno (field manager kyverno)", "undoes openAction Ignore", "--forceFailurePolicyIgnore", "features.forceFailurePolicyIgnore.enabled"}},
		{name: "Kyverno undoes Bypass too", action: bypass,
			entries:    []metav1.ManagedFieldsEntry{entry(t, "kyverno", metav1.ManagedFieldsOperationUpdate, 0, all...)},
			wantReason: owners.ReasonUndoesOpen, wantIn: []string{"undoes openAction Bypass", "spec.failurePolicy: Ignore"}},
		{name: "istiod undoes Ignore", action: ignore,
			entries: []metav1.ManagedFieldsEntry{
				entry(t, "helm", metav1.ManagedFieldsOperationUpdate, 0, all...),
				entry(t, "pilot-discovery", metav1.ManagedFieldsOperationUpdate, time.Minute, "f:failurePolicy", "f:clientConfig/f:caBundle"),
			},
			wantReason: owners.ReasonUndoesOpen, wantIn: []string{"Istio (field manager pilot-discovery)", "base.validationFailurePolicy"}},
		{name: "istiod keeps Bypass", action: bypass,
			entries:    []metav1.ManagedFieldsEntry{entry(t, "pilot-discovery", metav1.ManagedFieldsOperationUpdate, time.Minute, "f:failurePolicy", "f:clientConfig/f:caBundle")},
			wantReason: owners.ReasonKeepsOpen, wantIn: []string{"openAction Bypass holds", "openAction Ignore would not"}},
		{name: "istiod undoes the failurePolicy of a Bypass breaker's half-open trials", action: bypass, trial: true,
			entries:    []metav1.ManagedFieldsEntry{entry(t, "pilot-discovery", metav1.ManagedFieldsOperationUpdate, time.Minute, "f:failurePolicy")},
			wantReason: owners.ReasonUndoesOpen, wantIn: []string{"half-open trial"}},
		{name: "an unknown applier of the failurePolicy may undo Ignore (with force) and leaves Bypass", action: ignore,
			entries:    []metav1.ManagedFieldsEntry{entry(t, "platform-operator", metav1.ManagedFieldsOperationApply, 0, all...)},
			wantReason: owners.ReasonMayUndoOpen, wantIn: []string{"field manager platform-operator writes this webhook's failurePolicy, matchConditions, caBundle, other fields with server-side apply",
				"applying with force", "Use openAction Bypass"}},
		{name: "an unknown applier keeps Bypass", action: bypass,
			entries:    []metav1.ManagedFieldsEntry{entry(t, "platform-operator", metav1.ManagedFieldsOperationApply, 0, all...)},
			wantReason: owners.ReasonKeepsOpen, wantIn: []string{"openAction Bypass holds"}},
		{name: "an unknown updater that came back after creating the configuration may undo either", action: bypass,
			entries:    []metav1.ManagedFieldsEntry{entry(t, "webhook-operator", metav1.ManagedFieldsOperationUpdate, 2*time.Second, all...)},
			wantReason: owners.ReasonMayUndoOpen, wantIn: []string{"webhook-operator", "if it writes the whole entry"}},
		{name: "an unknown updater of a configuration with an owner reference may undo either", action: ignore, ownerRef: true,
			entries:    []metav1.ManagedFieldsEntry{entry(t, "webhook-operator", metav1.ManagedFieldsOperationUpdate, 0, all...)},
			wantReason: owners.ReasonMayUndoOpen},
		{name: "an unknown creator that never came back is no owner", action: ignore,
			entries:    []metav1.ManagedFieldsEntry{entry(t, "installer", metav1.ManagedFieldsOperationUpdate, 0, all...)},
			wantReason: owners.ReasonNotOwned, wantIn: []string{"installer created the configuration and has not written it since"}},
		{name: "Argo CD's sync at creation is no owner", action: ignore,
			entries:    []metav1.ManagedFieldsEntry{entry(t, "argocd-controller", metav1.ManagedFieldsOperationApply, 0, all...)},
			wantReason: owners.ReasonNotOwned},
		{name: "Argo CD applying again later is", action: ignore,
			entries:    []metav1.ManagedFieldsEntry{entry(t, "argocd-controller", metav1.ManagedFieldsOperationApply, time.Hour, all...)},
			wantReason: owners.ReasonMayUndoOpen, wantIn: []string{"Argo CD", "ignoreDifferences"}},
		{name: "the worst writer decides", action: bypass,
			entries: []metav1.ManagedFieldsEntry{
				entry(t, "cainjector", metav1.ManagedFieldsOperationApply, 0, "f:clientConfig/f:caBundle"),
				entry(t, "platform-operator", metav1.ManagedFieldsOperationApply, 0, "f:failurePolicy"),
				entry(t, "kyverno", metav1.ManagedFieldsOperationUpdate, 0, all...),
			},
			wantReason: owners.ReasonUndoesOpen, wantIn: []string{"Kyverno"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(tc.entries...)
			if tc.ownerRef {
				cfg.OwnerReferences = []metav1.OwnerReference{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "operator:webhook", UID: "u"}}
			}
			v := owners.Judge(cfg, hook, tc.action, tc.trial, nil)
			if v.Reason != tc.wantReason {
				t.Fatalf("reason %s, want %s: %s", v.Reason, tc.wantReason, v.Message)
			}
			if v.Owned != (tc.wantReason == owners.ReasonUndoesOpen || tc.wantReason == owners.ReasonMayUndoOpen || tc.wantReason == owners.ReasonKeepsOpen) {
				t.Errorf("owned %v with reason %s", v.Owned, v.Reason)
			}
			for _, want := range tc.wantIn {
				if !strings.Contains(v.Message, want) {
					t.Errorf("message %q lacks %q", v.Message, want)
				}
			}
		})
	}
}

func TestBlameNamesTheWriterSinceTheOpen(t *testing.T) {
	opened := created.Add(10*time.Second + 400*time.Millisecond) // managedFields keep seconds
	rotator := owners.Writer{Manager: "rotator", Operation: metav1.ManagedFieldsOperationUpdate, Time: created.Add(12 * time.Second), Fields: owners.CABundle}
	labeller := owners.Writer{Manager: "late-labeller", Operation: metav1.ManagedFieldsOperationUpdate, Time: created.Add(11 * time.Second), Fields: owners.Other}
	owner := owners.Writer{Manager: "owner", Operation: metav1.ManagedFieldsOperationApply, Time: created.Add(10 * time.Second), Fields: owners.FailurePolicy | owners.Other}
	kyverno := owners.Writer{Manager: "kyverno", Operation: metav1.ManagedFieldsOperationUpdate, Time: created.Add(9 * time.Second), Fields: owners.FailurePolicy | owners.Other}
	helm := owners.Writer{Manager: "helm", Operation: metav1.ManagedFieldsOperationUpdate, Time: created.Add(time.Second), Fields: owners.FailurePolicy | owners.Other}
	for _, tc := range []struct {
		name    string
		writers []owners.Writer
		policy  bool
		want    string
	}{
		{"the failurePolicy's owner, when that was put back", []owners.Writer{rotator, labeller, owner, kyverno}, true, "field manager owner (server-side apply)"},
		{"else the latest writer since the open", []owners.Writer{rotator, labeller, owner, kyverno}, false, "field manager late-labeller (Update)"},
		{"a writer that only removed fields, as the likeliest", []owners.Writer{rotator, kyverno, helm}, false,
			"probably Kyverno (field manager kyverno, Update) (a write that only removes fields leaves no trace in managedFields)"},
		{"never a caBundle rotator or a person's tool", []owners.Writer{rotator, helm}, false, "a writer managedFields do not name"},
	} {
		if got := owners.Blame(tc.writers, opened, tc.policy); got != tc.want {
			t.Errorf("%s: Blame = %q, want %q", tc.name, got, tc.want)
		}
	}
}

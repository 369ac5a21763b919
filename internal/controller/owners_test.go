package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/ownersim"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/owners"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// maxWritesPerOutage bounds tripswitch's writes to a configuration in one
// outage, whatever its owner does: the open, then the drop of a record
// whose change the owner undid or the close at recovery. An owner that
// undoes the open disarms the breaker, which opens no more until the
// webhook is healthy.
const maxWritesPerOutage = 2

// ownerCase is one owner simulator with one open action.
type ownerCase struct {
	pattern ownersim.Pattern
	// every is how often the owner writes; onEvent: also on every change
	// its watch shows (Kyverno).
	every   time.Duration
	onEvent bool
	// ownerRef: the owner sets an owner reference, as Kyverno does.
	ownerRef bool
	// installer: a person's Helm created the configuration, not the owner.
	installer bool
	action    v1alpha1.OpenAction
	// holds: the open survives the owner; else the breaker disarms.
	holds bool
	// ownedBefore is the Owned condition's reason before the outage.
	ownedBefore string
}

// TestOwnersThroughAnOutage runs the manager (the real reconciler, its
// target watches and the real HTTPS prober against a real webhook) on a
// configuration that an owner simulator keeps writing, each a real API
// client with its own field manager, through an outage and its recovery,
// for (a) Kyverno's whole-object Update from a template every 1.5 s and on
// every watch event, (b) server-side apply with force every 2 s, (c) a JSON
// merge patch of the whole webhooks list every 1.5 s and (d) a caBundle
// injector's server-side apply every second, each with Ignore and Bypass.
// Each run: the Owned condition says before the outage what will happen;
// at most maxWritesPerOutage writes; no write while the owner writes twice
// more; the breaker either holds the circuit open or is Disarmed with
// a reason naming the owner's field manager and what it undid; at the end
// no record, a Closed status, and the configuration as its owner wants it.
func TestOwnersThroughAnOutage(t *testing.T) {
	ignore, bypass := v1alpha1.OpenActionIgnore, v1alpha1.OpenActionBypass
	for _, tc := range []ownerCase{
		{pattern: ownersim.WholeUpdate, every: 1500 * time.Millisecond, onEvent: true, ownerRef: true, action: ignore, ownedBefore: owners.ReasonMayUndoOpen},
		{pattern: ownersim.WholeUpdate, every: 1500 * time.Millisecond, onEvent: true, ownerRef: true, action: bypass, ownedBefore: owners.ReasonMayUndoOpen},
		// managedFields cannot show whether an applier forces: it may.
		{pattern: ownersim.ApplyForce, every: 2 * time.Second, action: ignore, ownedBefore: owners.ReasonMayUndoOpen},
		{pattern: ownersim.ApplyForce, every: 2 * time.Second, action: bypass, holds: true, ownedBefore: owners.ReasonKeepsOpen},
		// A merge-patching owner that created the configuration and never
		// had to write it again looks like an installer: nothing is said
		// before the outage (docs/owners.md says so).
		{pattern: ownersim.MergePatch, every: 1500 * time.Millisecond, action: ignore, ownedBefore: owners.ReasonNotOwned},
		{pattern: ownersim.MergePatch, every: 1500 * time.Millisecond, action: bypass, ownedBefore: owners.ReasonNotOwned},
		{pattern: ownersim.CABundleApply, every: time.Second, installer: true, action: ignore, holds: true, ownedBefore: owners.ReasonCABundleOnly},
		{pattern: ownersim.CABundleApply, every: time.Second, installer: true, action: bypass, holds: true, ownedBefore: owners.ReasonCABundleOnly},
	} {
		t.Run(fmt.Sprintf("%s-%s", tc.pattern, strings.ToLower(string(tc.action))), func(t *testing.T) {
			t.Parallel() // each its own configuration, breaker and manager; mostly waiting for the owner
			ownerOutage(t, tc)
		})
	}
}

// writeCount counts the manager's successful patches of webhook
// configurations.
type writeCount struct{ patches atomic.Int64 }

func (w *writeCount) funcs() *interceptor.Funcs {
	return &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		err := c.Patch(ctx, obj, p, opts...)
		if _, ok := obj.(*admissionregistrationv1.MutatingWebhookConfiguration); ok && err == nil {
			w.patches.Add(1)
		}
		return err
	}}
}

func ownerOutage(t *testing.T, tc ownerCase) {
	b := newBed(t)
	cp := controlPlane(t)
	hook, err := slowhook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })
	want := ownerTemplate(t, b, hook, tc.ownerRef)
	manager := "sim-" + string(tc.pattern)
	owner, err := ownersim.New(cp.Config, cp.Scheme, tc.pattern, manager, want)
	if err != nil {
		t.Fatal(err)
	}
	create := owner.Create
	if tc.installer {
		create = func(ctx context.Context) error { return owner.CreateAs(ctx, "helm") }
	}
	if err := create(b.ctx); err != nil {
		t.Fatal(err)
	}
	// The caBundle injector rotates between two spellings of the same CA,
	// so that each of its writes changes the object and the probe still
	// trusts it.
	ca := [2][]byte{hook.CABundle, append(bytes.Clone(hook.CABundle), '\n')}
	if tc.pattern == ownersim.CABundleApply {
		owner.SetCABundle(ca[1])
	}
	ownerCtx, stopOwner := context.WithCancel(b.ctx)
	var ownerErr error
	var wg sync.WaitGroup
	wg.Go(func() { ownerErr = owner.Run(ownerCtx, tc.every, tc.onEvent) })
	if tc.pattern == ownersim.CABundleApply {
		wg.Go(func() {
			for i := 0; ownerCtx.Err() == nil; i++ {
				owner.SetCABundle(ca[i%2])
				select {
				case <-ownerCtx.Done():
				case <-time.After(tc.every):
				}
			}
		})
	}
	defer func() { stopOwner(); wg.Wait() }()

	wcb := b.createBreaker(b.cfg, func(w *v1alpha1.WebhookCircuitBreaker) {
		w.Spec.OpenAction = tc.action
		// Explicit failures (HTTP 500) make the outage: nothing here
		// depends on how fast a busy machine answers.
		w.Spec.Probe = v1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: 500 * time.Millisecond}, Timeout: &metav1.Duration{Duration: 500 * time.Millisecond},
			FailureThreshold: 2, SuccessThreshold: 2}
	})
	var writes writeCount
	runManagerWith(t, b.cfg, &probe.HTTPProber{}, writes.funcs())

	// Before the outage: armed, and Owned says what will happen.
	eventually(t, "armed, with Owned "+tc.ownedBefore, func() bool {
		got := b.getBreaker(wcb.Name)
		c := condition(got, v1alpha1.ConditionOwned)
		return got.Status.State == v1alpha1.StateClosed && condition(got, v1alpha1.ConditionReady).Reason == policy.ReasonArmed && c.Reason == tc.ownedBefore
	})
	owned := condition(b.getBreaker(wcb.Name), v1alpha1.ConditionOwned)
	t.Logf("before the outage: Owned=%s %s: %s", owned.Status, owned.Reason, owned.Message)
	if tc.ownedBefore != owners.ReasonNotOwned && !strings.Contains(owned.Message, manager) {
		t.Fatalf("Owned does not name %s: %s", manager, owned.Message)
	}
	wanted := webhookJSON(t, b.getConfig(), target) // as the owner wants it, stored
	before := writes.patches.Load()

	start := time.Now()
	hook.SetStatus(http.StatusInternalServerError)
	var took time.Duration
	if tc.holds {
		eventually(t, "open", func() bool {
			return hasRecord(b.getConfig()) && b.getBreaker(wcb.Name).Status.State == v1alpha1.StateOpen
		})
		took = time.Since(start)
	} else {
		deadline := time.Now().Add(30 * time.Second)
		for got := b.getBreaker(wcb.Name); got.Status.State != v1alpha1.StateDisarmed || hasRecord(b.getConfig()); got = b.getBreaker(wcb.Name) {
			if time.Now().After(deadline) {
				t.Fatalf("not disarmed 30s into the outage, after %d writes to the configuration: state %s, %s",
					writes.patches.Load()-before, got.Status.State, condition(got, v1alpha1.ConditionReady).Message)
			}
			time.Sleep(50 * time.Millisecond)
		}
		took = time.Since(start)
		got := b.getBreaker(wcb.Name)
		ext := condition(got, v1alpha1.ConditionExternalChange)
		for _, s := range []string{got.Status.DisarmedReason, ext.Message} {
			if !strings.Contains(s, manager) || !strings.Contains(s, "undid tripswitch's "+string(tc.action)) {
				t.Errorf("disarm does not name the owner %s and what it undid: %q", manager, s)
			}
		}
		if ext.Status != metav1.ConditionTrue || condition(got, v1alpha1.ConditionCircuitOpen).Status != metav1.ConditionFalse || got.Status.Record != nil {
			t.Errorf("disarmed status contradicts the configuration: %+v", got.Status)
		}
		t.Logf("disarmed: %s", got.Status.DisarmedReason)
	}
	// The owner keeps writing through the rest of the outage: tripswitch
	// does not write again.
	during := writes.patches.Load()
	seen := owner.Counts().Writes
	eventually(t, "two more owner writes", func() bool { return owner.Counts().Writes >= seen+2 })
	cfg := b.getConfig()
	got := b.getBreaker(wcb.Name)
	if n := writes.patches.Load(); n != during {
		t.Fatalf("tripswitch wrote %d more times while the owner kept writing (a write loop)", n-during)
	}
	if tc.holds != hasRecord(cfg) || tc.holds != (got.Status.State == v1alpha1.StateOpen) || tc.holds != (got.Status.Record != nil) {
		t.Fatalf("mid-outage: record %v, state %s, status record %v; want open %v", hasRecord(cfg), got.Status.State, got.Status.Record != nil, tc.holds)
	}

	hook.SetStatus(0)
	eventually(t, "closed and re-armed after recovery", func() bool {
		got := b.getBreaker(wcb.Name)
		return got.Status.State == v1alpha1.StateClosed && got.Status.DisarmedReason == "" && got.Status.Record == nil && !hasRecord(b.getConfig())
	})
	outage := writes.patches.Load() - before
	stopOwner()
	wg.Wait()
	if ownerErr != nil {
		t.Fatalf("owner: %v", ownerErr)
	}
	if outage > maxWritesPerOutage || outage < 1 {
		t.Fatalf("%d writes to the configuration in one outage, want 1 to %d", outage, maxWritesPerOutage)
	}
	end := b.getConfig()
	if tc.pattern == ownersim.CABundleApply {
		// The injector's latest of its two spellings of the CA.
		w := hookOf(t, end, target)
		if !bytes.Equal(w.ClientConfig.CABundle, ca[0]) && !bytes.Equal(w.ClientConfig.CABundle, ca[1]) {
			t.Fatalf("after recovery the caBundle is %q, the injector's neither", w.ClientConfig.CABundle)
		}
		var want admissionregistrationv1.MutatingWebhook
		if err := json.Unmarshal([]byte(wanted), &want); err != nil {
			t.Fatal(err)
		}
		w.ClientConfig.CABundle, want.ClientConfig.CABundle = nil, nil
		got, _ := json.Marshal(w)
		if exp, _ := json.Marshal(want); string(got) != string(exp) {
			t.Fatalf("after recovery the webhook is %s, want %s", got, exp)
		}
	} else if got := webhookJSON(t, end, target); got != wanted {
		t.Fatalf("after recovery the webhook is %s, want what its owner wants, %s", got, wanted)
	}
	for k := range end.Annotations {
		if strings.HasPrefix(k, "tripswitch.dev/") {
			t.Fatalf("annotation %s left on the configuration", k)
		}
	}
	t.Logf("RESULT %s %s: %d writes in the outage, %s from the outage to %s; the owner made %d writes (%d changed it, %d refused)",
		tc.pattern, tc.action, outage, took.Round(10*time.Millisecond), map[bool]string{true: "Open", false: "Disarmed"}[tc.holds],
		owner.Counts().Writes, owner.Counts().Changes, owner.Counts().Conflicts)
}

// ownerTemplate is what the owner wants: the bed's two webhooks, the
// target served by hook, and, with ownerRef, an owner reference to a
// ClusterRole, as Kyverno sets on its configurations.
func ownerTemplate(t *testing.T, b *bed, hook *slowhook.Server, ownerRef bool) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	w := func(name, path string) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + path), CABundle: hook.CABundle},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
			// Selects nothing: the API server never calls it for the test's writes.
			ObjectSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"tripswitch.test/never": "true"}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "owner.example.com/not-leases", Expression: "true"}},
		}
	}
	want := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: b.cfg, Labels: map[string]string{"app.kubernetes.io/managed-by": "owner"},
			Annotations: map[string]string{"owner.example.com/template": "1"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{w(other, "/other"), w(target, "/mutate")},
	}
	if ownerRef {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: b.cfg + ":webhook"}}
		if err := b.c.Create(b.ctx, role); err != nil {
			t.Fatal(err)
		}
		want.OwnerReferences = []metav1.OwnerReference{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: role.Name, UID: role.UID}}
	}
	if circuit.MatchConditionName == want.Webhooks[1].MatchConditions[0].Name {
		t.Fatal("the owner's matchCondition must not be tripswitch's")
	}
	return want
}

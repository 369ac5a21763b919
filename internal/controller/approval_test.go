package controller_test

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
)

// A misspelled configurationName is not told to be approved: the message
// lists the approved names (from a SelfSubjectRulesReview, as the controller)
// and suggests the one meant. A configuration that exists but is not
// approved gets the approved names and how to approve it; an approved name
// that does not exist is TargetNotFound.
func TestNotApprovedListsTheApprovedNames(t *testing.T) {
	b := newBed(t)
	planned := "zz-" + b.cfg + "-planned" // approved, not created yet
	restricted := restrictedClient(t, b, rbacv1.PolicyRule{
		APIGroups: []string{admissionregistrationv1.GroupName}, Resources: []string{"mutatingwebhookconfigurations"},
		ResourceNames: []string{b.cfg, planned}, Verbs: []string{"get", "list", "watch", "patch"},
	})
	b.createConfig(nil)
	otherCfg := "other-" + b.cfg
	b.createConfig(func(c *admissionregistrationv1.MutatingWebhookConfiguration) { c.Name = otherCfg })
	r := b.reconciler(restricted)
	r.Client = restricted

	cases := []struct {
		name, configuration, wantReason string
		want, notWant                   []string
	}{
		{"typo", b.cfg + "s", policy.ReasonNotApproved,
			[]string{"not an approved configuration name", "the approved ones are " + b.cfg + ", " + planned, "Did you mean " + b.cfg + "?"}, nil},
		{"unapproved", otherCfg, policy.ReasonNotApproved,
			[]string{"the approved ones are " + b.cfg + ", " + planned, "approvedWebhookConfigurations.mutating={...," + otherCfg + "}", "config/rbac/webhook_configurations.yaml"},
			[]string{"Did you mean"}},
		{"missing", planned, policy.ReasonTargetNotFound, []string{"not found"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wcb := b.createBreaker(b.cfg+"-"+c.name, func(w *v1alpha1.WebhookCircuitBreaker) { w.Spec.Target.ConfigurationName = c.configuration })
			b.settle(r, wcb.Name)
			ready := meta.FindStatusCondition(b.getBreaker(wcb.Name).Status.Conditions, v1alpha1.ConditionReady)
			if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != c.wantReason {
				t.Fatalf("Ready %+v, want False/%s", ready, c.wantReason)
			}
			for _, w := range c.want {
				if !strings.Contains(ready.Message, w) {
					t.Errorf("message %q does not say %q", ready.Message, w)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(ready.Message, w) {
					t.Errorf("message %q says %q", ready.Message, w)
				}
			}
			// A typo is fixed in the breaker: its message names the right
			// configuration before it says how to approve the typo.
			if c.name == "typo" && strings.Index(ready.Message, "Did you mean") > strings.Index(ready.Message, "approve it with Helm") {
				t.Errorf("message %q offers approving the typo before the name meant", ready.Message)
			}
		})
	}
}

func TestNearestName(t *testing.T) {
	names := []string{"policy-validator", "sidecar-injector"}
	for name, want := range map[string]string{
		"sidecar-injectr":    "sidecar-injector",
		"sidecar-injector":   "", // the name itself is no suggestion
		"policy-validater":   "policy-validator",
		"cert-manager":       "",
		"abc":                "", // too short for three edits to be a typo
		"sidecar-injector-2": "sidecar-injector",
	} {
		if got := policy.NearestName(name, names); got != want {
			t.Errorf("NearestName(%q) = %q, want %q", name, got, want)
		}
	}
}

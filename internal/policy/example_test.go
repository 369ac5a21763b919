package policy_test

import (
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// Decide is pure: observed webhook, record, health and spec in; one write and
// its reason out. An administrator's Ignore is never taken over.
func ExampleDecide() {
	down := policy.Health{Verdict: probe.VerdictUnhealthy, Failures: 3, LastReason: "timeout after 250ms"}
	webhook := func(p admissionregistrationv1.FailurePolicyType) circuit.State {
		return circuit.State{Index: 0, Webhook: circuit.Webhook{Name: "slow.example.com", FailurePolicy: ptr.To(p)}}
	}
	for _, st := range []circuit.State{webhook(admissionregistrationv1.Fail), webhook(admissionregistrationv1.Ignore)} {
		d := policy.Decide(policy.Input{
			Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionIgnore, BreakerUID: "uid",
			TargetFound: true, State: st, Health: down,
		})
		fmt.Printf("%s -> write %q, %s\n", *st.Webhook.FailurePolicy, d.Write, d.Reason)
	}
	// Output:
	// Fail -> write "Open", WebhookUnhealthy
	// Ignore -> write "", AlreadyFailOpen
}

// Two breakers name one webhook: the older owns it, whatever the names.
func ExampleWinner() {
	created := func(name string, at int) v1alpha1.WebhookCircuitBreaker {
		return v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: name,
			CreationTimestamp: metav1.NewTime(time.Date(2026, 12, 1, 9, 0, at, 0, time.UTC))}}
	}
	orig, copied := created("sidecar-injector", 0), created("a-sidecar-injector-copy", 30)
	fmt.Printf("%q\n", policy.Winner(&copied, []v1alpha1.WebhookCircuitBreaker{orig}))
	fmt.Printf("%q\n", policy.Winner(&orig, []v1alpha1.WebhookCircuitBreaker{copied}))
	// Output:
	// "sidecar-injector"
	// ""
}

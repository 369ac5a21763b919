package controller_test

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/controller"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// Decide is pure: observed webhook, record, health and spec in; one write and
// its reason out. An administrator's Ignore is never taken over.
func ExampleDecide() {
	down := controller.Health{Verdict: probe.VerdictUnhealthy, Failures: 3, LastReason: "timeout after 250ms"}
	webhook := func(p admissionregistrationv1.FailurePolicyType) circuit.State {
		return circuit.State{Index: 0, Webhook: circuit.Webhook{Name: "slow.example.com", FailurePolicy: ptr.To(p)}}
	}
	for _, st := range []circuit.State{webhook(admissionregistrationv1.Fail), webhook(admissionregistrationv1.Ignore)} {
		d := controller.Decide(controller.Input{
			Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionIgnore, BreakerUID: "uid",
			TargetFound: true, State: st, Health: down,
		})
		fmt.Printf("%s -> write %q, %s\n", *st.Webhook.FailurePolicy, d.Write, d.Reason)
	}
	// Output:
	// Fail -> write "Open", WebhookUnhealthy
	// Ignore -> write "", AlreadyFailOpen
}

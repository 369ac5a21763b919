package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// FallbackPolicyKind is the kind of in-process admission policy a breaker
// arms while its circuit is open.
// +kubebuilder:validation:Enum=ValidatingAdmissionPolicy;MutatingAdmissionPolicy
type FallbackPolicyKind string

// Fallback policy kinds (admissionregistration.k8s.io/v1).
const (
	ValidatingAdmissionPolicy FallbackPolicyKind = "ValidatingAdmissionPolicy"
	MutatingAdmissionPolicy   FallbackPolicyKind = "MutatingAdmissionPolicy"
)

// OnMaxOpen is what happens when a circuit has been open for maxOpenDuration.
// +kubebuilder:validation:Enum=Stay;Close
type OnMaxOpen string

const (
	// OnMaxOpenStay keeps the circuit open and raises OpenTooLong.
	OnMaxOpenStay OnMaxOpen = "Stay"
	// OnMaxOpenClose raises OpenTooLong and fails closed again: the webhook's
	// original policy is restored although it is still failing.
	OnMaxOpenClose OnMaxOpen = "Close"
)

// FallbackPolicy names a ValidatingAdmissionPolicy or MutatingAdmissionPolicy
// the operator wrote: the critical part of the webhook's rules in CEL, which
// the API server runs in process, with nothing to time out.
type FallbackPolicy struct {
	// Kind is ValidatingAdmissionPolicy or MutatingAdmissionPolicy.
	// +required
	Kind FallbackPolicyKind `json:"kind"`
	// Name is the policy's metadata.name. RBAC must approve it (the chart's
	// approvedFallbackPolicies, config/rbac/fallback_policies.yaml).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// WhileOpenSpec is what stands in for the webhook while its circuit is open.
type WhileOpenSpec struct {
	// FallbackPolicy is inert while the circuit is closed (tripswitch holds
	// a matchCondition tripswitch.dev/circuit-open, expression "false", on
	// it), armed before the webhook opens and disarmed after it closes, so
	// the policy's binding never changes.
	// +optional
	FallbackPolicy *FallbackPolicy `json:"fallbackPolicy,omitempty"`
}

// FloorRecord is the record tripswitch keeps on a fallback policy, as a JSON
// annotation (tripswitch.dev/floor), from the first write it makes to the
// policy. Each write changes the policy's matchCondition and this record in
// one request, as a circuit record does on a webhook configuration.
type FloorRecord struct {
	// Policy is Kind/name of the policy.
	Policy string `json:"policy"`
	// Breaker is the owning WebhookCircuitBreaker's name.
	Breaker string `json:"breaker"`
	// BreakerUID is the owning breaker's UID.
	BreakerUID types.UID `json:"breakerUID"`
	// AdoptedAt is when tripswitch first wrote to the policy.
	AdoptedAt metav1.Time `json:"adoptedAt"`
	// ConditionPreexisted: the operator wrote tripswitch's matchCondition
	// (expression "false") on the policy before tripswitch adopted it, so a
	// release leaves the policy inert rather than live.
	// +optional
	ConditionPreexisted bool `json:"conditionPreexisted,omitempty"`
	// Armed: tripswitch removed its matchCondition, so the policy applies.
	// +optional
	Armed bool `json:"armed,omitempty"`
	// ArmedAt is when it was armed; unset while disarmed.
	// +optional
	ArmedAt *metav1.Time `json:"armedAt,omitempty"`
	// ConditionIndex is where the matchCondition stood before arming, so
	// disarming puts it back in place; 0 while disarmed.
	// +optional
	ConditionIndex int `json:"conditionIndex,omitempty"`
}

// FloorStatus mirrors the fallback policy's record for display; the
// annotation on the policy is the truth.
type FloorStatus struct {
	// Policy is Kind/name of the fallback policy.
	Policy string `json:"policy"`
	// Armed: the policy applies (the circuit is open, or a crash between
	// the two writes left it armed while the webhook is back: stricter,
	// never looser).
	Armed bool `json:"armed"`
	// ArmedAt is when it was armed.
	// +optional
	ArmedAt *metav1.Time `json:"armedAt,omitempty"`
	// Message says why the floor cannot be armed or disarmed, when it cannot.
	// +optional
	Message string `json:"message,omitempty"`
	// Previous are fallback policies (Kind/name) this breaker adopted under
	// an earlier spec.whileOpen.fallbackPolicy and has not yet given back as
	// it found them; Message says why. While the circuit is open, one is
	// given back only once the policy named now is armed.
	// +optional
	// +listType=atomic
	Previous []string `json:"previous,omitempty"`
}

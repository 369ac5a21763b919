// Package v1alpha1 contains the tripswitch.dev/v1alpha1 API: the
// WebhookCircuitBreaker, an operator's explicit approval for tripswitch to
// fail one admission webhook open during a sustained outage.
//
// +kubebuilder:object:generate=true
// +groupName=tripswitch.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Finalizer is on every breaker whose target the controller has read: it
// holds the breaker's deletion until the controller (or `tripswitch
// standdown`) has restored the webhook.
const Finalizer = "tripswitch.dev/restore"

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "tripswitch.dev", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &WebhookCircuitBreaker{}, &WebhookCircuitBreakerList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

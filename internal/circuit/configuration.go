package circuit

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Webhook is the part of one webhook entry that tripswitch reads or changes;
// it is the same for mutating and validating webhooks.
type Webhook struct {
	Name            string
	FailurePolicy   *admissionregistrationv1.FailurePolicyType
	MatchConditions []admissionregistrationv1.MatchCondition
	ClientConfig    admissionregistrationv1.WebhookClientConfig
	TimeoutSeconds  *int32
	ReviewVersions  []string
}

// Configuration is a webhook configuration of either kind, as read.
type Configuration struct {
	// Object is the typed object read from the API server; patches decode into it.
	Object   client.Object
	Webhooks []Webhook
}

// NewObject returns an empty typed object for kind.
func NewObject(kind v1alpha1.TargetKind) (client.Object, error) {
	switch kind {
	case v1alpha1.MutatingWebhookConfiguration:
		return &admissionregistrationv1.MutatingWebhookConfiguration{}, nil
	case v1alpha1.ValidatingWebhookConfiguration:
		return &admissionregistrationv1.ValidatingWebhookConfiguration{}, nil
	default:
		return nil, fmt.Errorf("target.kind %q is not MutatingWebhookConfiguration or ValidatingWebhookConfiguration", kind)
	}
}

// View returns the uniform view of a typed webhook configuration.
func View(obj client.Object) (*Configuration, error) {
	cfg := &Configuration{Object: obj}
	switch o := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for _, w := range o.Webhooks {
			cfg.Webhooks = append(cfg.Webhooks, Webhook{w.Name, w.FailurePolicy, w.MatchConditions, w.ClientConfig, w.TimeoutSeconds, w.AdmissionReviewVersions})
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for _, w := range o.Webhooks {
			cfg.Webhooks = append(cfg.Webhooks, Webhook{w.Name, w.FailurePolicy, w.MatchConditions, w.ClientConfig, w.TimeoutSeconds, w.AdmissionReviewVersions})
		}
	default:
		return nil, fmt.Errorf("%T is not a webhook configuration", obj)
	}
	return cfg, nil
}

// Index returns the position of the named webhook, or -1.
func (c *Configuration) Index(name string) int {
	for i, w := range c.Webhooks {
		if w.Name == name {
			return i
		}
	}
	return -1
}

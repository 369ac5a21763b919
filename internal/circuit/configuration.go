package circuit

import (
	"context"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Webhook is one webhook entry of a configuration, mutating or validating:
// tripswitch's single model of a webhook. It holds what the circuit reads
// and changes and what the audit needs to find and re-review what the
// webhook would have admitted. View and List read either kind into it;
// NewObject is the only other place that tells the kinds apart.
type Webhook struct {
	// Configuration is the name of the configuration that holds the entry.
	Configuration string
	// Kind is the configuration's kind.
	Kind            v1alpha1.TargetKind
	Name            string
	FailurePolicy   *admissionregistrationv1.FailurePolicyType
	MatchConditions []admissionregistrationv1.MatchCondition
	ClientConfig    admissionregistrationv1.WebhookClientConfig
	TimeoutSeconds  *int32
	ReviewVersions  []string
	Rules           []admissionregistrationv1.RuleWithOperations
	// NamespaceSelector and ObjectSelector as set; nil selects everything.
	NamespaceSelector *metav1.LabelSelector
	ObjectSelector    *metav1.LabelSelector
	SideEffects       *admissionregistrationv1.SideEffectClass
}

// Mutating reports whether the webhook is a mutating one.
func (w Webhook) Mutating() bool { return w.Kind == v1alpha1.MutatingWebhookConfiguration }

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
			cfg.Webhooks = append(cfg.Webhooks, Webhook{Configuration: o.Name, Kind: v1alpha1.MutatingWebhookConfiguration,
				Name: w.Name, FailurePolicy: w.FailurePolicy, MatchConditions: w.MatchConditions, ClientConfig: w.ClientConfig,
				TimeoutSeconds: w.TimeoutSeconds, ReviewVersions: w.AdmissionReviewVersions, Rules: w.Rules,
				NamespaceSelector: w.NamespaceSelector, ObjectSelector: w.ObjectSelector, SideEffects: w.SideEffects})
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for _, w := range o.Webhooks {
			cfg.Webhooks = append(cfg.Webhooks, Webhook{Configuration: o.Name, Kind: v1alpha1.ValidatingWebhookConfiguration,
				Name: w.Name, FailurePolicy: w.FailurePolicy, MatchConditions: w.MatchConditions, ClientConfig: w.ClientConfig,
				TimeoutSeconds: w.TimeoutSeconds, ReviewVersions: w.AdmissionReviewVersions, Rules: w.Rules,
				NamespaceSelector: w.NamespaceSelector, ObjectSelector: w.ObjectSelector, SideEffects: w.SideEffects})
		}
	default:
		return nil, fmt.Errorf("%T is not a webhook configuration", obj)
	}
	return cfg, nil
}

// Kinds are the two kinds of webhook configuration.
var Kinds = []v1alpha1.TargetKind{v1alpha1.MutatingWebhookConfiguration, v1alpha1.ValidatingWebhookConfiguration}

// List reads every configuration of kind.
func List(ctx context.Context, r client.Reader, kind v1alpha1.TargetKind) ([]*Configuration, error) {
	var objs []client.Object
	switch kind {
	case v1alpha1.MutatingWebhookConfiguration:
		var l admissionregistrationv1.MutatingWebhookConfigurationList
		if err := r.List(ctx, &l); err != nil {
			return nil, fmt.Errorf("list %ss: %w", kind, err)
		}
		for i := range l.Items {
			objs = append(objs, &l.Items[i])
		}
	case v1alpha1.ValidatingWebhookConfiguration:
		var l admissionregistrationv1.ValidatingWebhookConfigurationList
		if err := r.List(ctx, &l); err != nil {
			return nil, fmt.Errorf("list %ss: %w", kind, err)
		}
		for i := range l.Items {
			objs = append(objs, &l.Items[i])
		}
	default:
		return nil, fmt.Errorf("target.kind %q is not MutatingWebhookConfiguration or ValidatingWebhookConfiguration", kind)
	}
	out := make([]*Configuration, 0, len(objs))
	for _, obj := range objs {
		cfg, err := View(obj)
		if err != nil {
			return nil, err
		}
		out = append(out, cfg)
	}
	return out, nil
}

// Read reads the configuration t names and returns its webhook t.WebhookName.
func Read(ctx context.Context, r client.Reader, t v1alpha1.Target) (Webhook, error) {
	obj, err := NewObject(t.Kind)
	if err != nil {
		return Webhook{}, err
	}
	if err := r.Get(ctx, types.NamespacedName{Name: t.ConfigurationName}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return Webhook{}, fmt.Errorf("%s %s no longer exists", t.Kind, t.ConfigurationName)
		}
		return Webhook{}, fmt.Errorf("read %s %s: %w", t.Kind, t.ConfigurationName, err)
	}
	cfg, err := View(obj)
	if err != nil {
		return Webhook{}, err
	}
	i := cfg.Index(t.WebhookName)
	if i < 0 {
		return Webhook{}, fmt.Errorf("webhook %s is not in %s %s", t.WebhookName, t.Kind, t.ConfigurationName)
	}
	return cfg.Webhooks[i], nil
}

// ShortKind is the kind as operators type it, in Helm values
// (approvedWebhookConfigurations.mutating), CLI flags and the API server's
// CEL errors: "mutating" or "validating".
func ShortKind(kind v1alpha1.TargetKind) string {
	if kind == v1alpha1.MutatingWebhookConfiguration {
		return "mutating"
	}
	return "validating"
}

// KindOf parses a short kind ("mutating", "Validating"; any case).
func KindOf(short string) (v1alpha1.TargetKind, error) {
	switch strings.ToLower(short) {
	case "mutating":
		return v1alpha1.MutatingWebhookConfiguration, nil
	case "validating":
		return v1alpha1.ValidatingWebhookConfiguration, nil
	}
	return "", fmt.Errorf("kind %q: must be mutating or validating", short)
}

// MetricType is the kind as the API server's admission webhook metrics
// label it (type="admit" for mutating webhooks, "validating").
func MetricType(kind v1alpha1.TargetKind) string {
	if kind == v1alpha1.MutatingWebhookConfiguration {
		return "admit"
	}
	return "validating"
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

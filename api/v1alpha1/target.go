package v1alpha1

// The keys that name what a Target points at; nothing else spells them.

// ConfigurationKey names the target's configuration: kind/name.
func (t Target) ConfigurationKey() string { return string(t.Kind) + "/" + t.ConfigurationName }

// Key names the target's webhook: kind/configuration/webhook. Two breakers
// with one Key name the same webhook.
func (t Target) Key() string { return t.ConfigurationKey() + "/" + t.WebhookName }

// SignalKey names what the API server signal counts: the webhook's kind
// and name, across configurations (the API server's metrics key webhooks
// by name and type only).
func (t Target) SignalKey() string { return string(t.Kind) + "/" + t.WebhookName }

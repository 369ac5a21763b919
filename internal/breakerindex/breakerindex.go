// Package breakerindex files breakers in the manager's cache under the
// webhook they name, so that the breakers naming one webhook (to settle
// which owns it) or sharing its API server signal are found without
// listing every breaker.
package breakerindex

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// ByTarget files a breaker under Target.Key: its configuration and webhook.
const ByTarget = "spec.target.key"

// ByWebhook files a breaker under Target.SignalKey: the API server counts a
// webhook's calls by name and type, whatever its configuration.
const ByWebhook = "spec.target.webhook"

// keys are the indexes and the key each one files a breaker under.
var keys = map[string]func(v1alpha1.Target) string{ByTarget: v1alpha1.Target.Key, ByWebhook: v1alpha1.Target.SignalKey}

// Register registers ByTarget and ByWebhook with a cache's indexer.
func Register(ctx context.Context, indexer client.FieldIndexer) error {
	for field, key := range keys {
		err := indexer.IndexField(ctx, &v1alpha1.WebhookCircuitBreaker{}, field, func(o client.Object) []string {
			b, ok := o.(*v1alpha1.WebhookCircuitBreaker)
			if !ok {
				return nil
			}
			return []string{key(b.Spec.Target)}
		})
		if err != nil {
			return fmt.Errorf("index breakers by %s: %w", field, err)
		}
	}
	return nil
}

// List lists the breakers filed under key in field (ByTarget or
// ByWebhook): through the index when indexed (the reader is a cache that
// Register was given), else by listing every breaker.
func List(ctx context.Context, c client.Reader, indexed bool, field, key string) ([]v1alpha1.WebhookCircuitBreaker, error) {
	of, ok := keys[field]
	if !ok {
		return nil, fmt.Errorf("list breakers: no index %q", field)
	}
	var list v1alpha1.WebhookCircuitBreakerList
	var err error
	if indexed {
		err = c.List(ctx, &list, client.MatchingFields{field: key})
	} else {
		err = c.List(ctx, &list)
	}
	if err != nil {
		return nil, fmt.Errorf("list breakers naming webhook %s: %w", key, err)
	}
	out := list.Items[:0]
	for _, p := range list.Items {
		if of(p.Spec.Target) == key {
			out = append(out, p)
		}
	}
	return out, nil
}

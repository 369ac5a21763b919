package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// The manager's cache files breakers under the webhook they name, so that
// the breakers naming one webhook (to settle which owns it) or sharing its
// API server signal are found without listing every breaker.

// byTarget files a breaker under Target.Key: its configuration and webhook.
const byTarget = "spec.target.key"

// byWebhook files a breaker under Target.SignalKey: the API server counts a
// webhook's calls by name and type, whatever its configuration.
const byWebhook = "spec.target.webhook"

// indexKeys are the indexes and the key each one files a breaker under.
var indexKeys = map[string]func(v1alpha1.Target) string{byTarget: v1alpha1.Target.Key, byWebhook: v1alpha1.Target.SignalKey}

// indexBreakers registers byTarget and byWebhook with a cache's indexer.
func indexBreakers(ctx context.Context, indexer client.FieldIndexer) error {
	for field, key := range indexKeys {
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

// listBreakers lists the breakers filed under key in field (byTarget or
// byWebhook): through the index when indexed (the reader is a cache that
// indexBreakers was given), else by listing every breaker.
func listBreakers(ctx context.Context, c client.Reader, indexed bool, field, key string) ([]v1alpha1.WebhookCircuitBreaker, error) {
	of, ok := indexKeys[field]
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

package breakglass

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
)

// floorState says how b's fallback policy stands: "Kind/name armed" or
// "Kind/name inert", with what is wrong when it cannot be read; "" without
// a fallback policy.
func floorState(ctx context.Context, c client.Client, b *v1alpha1.WebhookCircuitBreaker) string {
	fp := fallbackOf(b)
	if fp == nil {
		return ""
	}
	name := string(fp.Kind) + "/" + fp.Name
	p, err := floor.Writer{Client: c}.Read(ctx, *fp)
	if err != nil {
		return name + " unreadable: " + err.Error()
	}
	if floor.Inspect(p).Armed() {
		return name + " armed"
	}
	return name + " inert"
}

func fallbackOf(b *v1alpha1.WebhookCircuitBreaker) *v1alpha1.FallbackPolicy {
	if b.Spec.WhileOpen == nil {
		return nil
	}
	return b.Spec.WhileOpen.FallbackPolicy
}

// syncFloor writes the fallback policy of the breaker rec names toward want,
// after its webhook was restored (the webhook first, then the floor): a
// restore disarms it, a stand-down gives it back as tripswitch found it.
// Either gives back a policy an earlier spec named (status.floor). A
// breaker that is gone, or has no fallback policy, holds no floor.
func syncFloor(ctx context.Context, c client.Client, breaker string, want floor.Want) error {
	var b v1alpha1.WebhookCircuitBreaker
	if err := c.Get(ctx, client.ObjectKey{Name: breaker}, &b); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("read breaker %s for its fallback policy: %w", breaker, err)
	}
	w := floor.Writer{Client: c}
	owner := floor.Owner{Breaker: b.Name, UID: b.UID}
	fp := fallbackOf(&b)
	if fp != nil {
		_, err := w.Sync(ctx, *fp, owner, want, b.Status.Floor, metav1.Now())
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("breaker %s: %w", b.Name, err)
		}
	}
	if _, _, err := w.ReleaseAll(ctx, floor.Replaced(b.Status.Floor, fp), owner); err != nil {
		return fmt.Errorf("breaker %s: %w", b.Name, err)
	}
	return nil
}

package controller

import (
	"context"
	"maps"
	"slices"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
)

// Two breakers may name the same webhook (a copy of a manifest, a second
// GitOps source). Only one may own it: whichever trips first would take the
// record, and the other would be refused, mid-outage. As Gateway API and
// Kyverno settle such conflicts, the oldest wins, by creationTimestamp and
// then by name, and every other breaker naming the same webhook is told at
// once (Ready=False, reason Conflicted, naming the winner) and never opens
// the circuit. When the winner is deleted, the next oldest takes over: every
// breaker naming a webhook is reconciled again when another breaker naming
// it is created or deleted.

// watchPeers reconciles, when a breaker was created, deleted, or started
// being deleted (the only changes that can change which of them owns a
// webhook: creationTimestamp and the target are immutable), the breakers
// that name the same webhook, and those whose API server signal it makes
// or made ambiguous (see signalAmbiguity).
func (r *Reconciler) watchPeers(bld *builder.Builder) *builder.Builder {
	peers := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		b, ok := o.(*v1alpha1.WebhookCircuitBreaker)
		if !ok {
			return nil
		}
		list, err := listBreakers(ctx, r.Client, r.TargetIndexed, byWebhook, b.Spec.Target.SignalKey())
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "list the breakers naming the same webhook", "breaker", b.Name)
			return nil
		}
		var out []reconcile.Request
		for _, p := range list {
			// Same webhook: ownership; same name elsewhere: signal ambiguity.
			if p.Name != b.Name {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: p.Name}})
			}
		}
		return out
	})
	changes := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return true },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	}
	return bld.Watches(&v1alpha1.WebhookCircuitBreaker{}, peers, builder.WithPredicates(changes))
}

// breakerEvents passes the events of a breaker that its reconcile acts on:
// its creation and deletion, and every update but this controller's own
// write of its status alone, unless a reconcile waits for that write
// (readBreaker). The controller's own status writes would otherwise queue
// each breaker again after every write: a storm's thousand status writes
// were a thousand reconciles more, competing with its decisions for the
// workers. A status someone else wrote (a break-glass restore, an audit)
// passes.
func (r *Reconciler) breakerEvents() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			if o.GetGeneration() != n.GetGeneration() || !o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
				!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) || !maps.Equal(o.GetLabels(), n.GetLabels()) ||
				!slices.Equal(o.GetFinalizers(), n.GetFinalizers()) {
				return true
			}
			m := r.memory.get(n.GetName())
			return m.awaitsEvent || m.written.now != n.GetResourceVersion()
		},
	}
}

// peers are the other breakers that name b's webhook.
func (r *Reconciler) peers(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker) ([]v1alpha1.WebhookCircuitBreaker, error) {
	list, err := listBreakers(ctx, r.Client, r.TargetIndexed, byTarget, b.Spec.Target.Key())
	out := list[:0]
	for _, p := range list {
		if p.Name != b.Name {
			out = append(out, p)
		}
	}
	return out, err
}

// conflictWinner names the breaker that owns b's webhook when it is not b:
// the oldest breaker naming it that is not being deleted (a breaker being
// deleted never opens again, so the next one takes over at once). Empty
// when b owns it.
func (r *Reconciler) conflictWinner(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker) (string, error) {
	peers, err := r.peers(ctx, b)
	if err != nil || len(peers) == 0 {
		return "", err
	}
	return policy.Winner(b, peers), nil
}

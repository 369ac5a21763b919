package controller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/budget"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
)

// ledger is the write budget of one patch (circuit.Budget): before the
// patch is sent, it counts the write against the outage window of every
// breaker the patch writes for, in that breaker's status (budget.Spend, a
// status patch conditional on the version read), so that a restart or a
// new leader keeps the count; a window that does not allow the write
// refuses it, and nothing is sent. A patch the API server refused is
// given back.
type ledger struct {
	r   *Reconciler
	cfg *circuit.Configuration
	// breakers are the breakers the patch may write for, by name, with
	// the decision's evidence and action for an open.
	breakers map[string]companion
	// spent are the windows as they were before this patch counted, by
	// breaker: what a refund restores.
	spent map[string]*v1alpha1.OutageWindow
}

func (r *Reconciler) ledger(cfg *circuit.Configuration, all []companion) *ledger {
	l := &ledger{r: r, cfg: cfg, breakers: map[string]companion{}, spent: map[string]*v1alpha1.OutageWindow{}}
	for _, c := range all {
		l.breakers[c.b.Name] = c
	}
	return l
}

// Spend counts write for each named breaker, or refuses it: a refusal of
// one refunds the others already counted.
func (l *ledger) Spend(ctx context.Context, write budget.Write, names []string) error {
	for _, name := range names {
		if err := l.spend(ctx, write, name); err != nil {
			l.Refund(ctx, write, names)
			return err
		}
	}
	return nil
}

func (l *ledger) spend(ctx context.Context, write budget.Write, name string) error {
	c, ok := l.breakers[name]
	if !ok {
		return fmt.Errorf("%w: the patch would write for breaker %q, which this reconcile did not decide for", budget.ErrExhausted, name)
	}
	b := c.b
	prev := l.window(b)
	now := metav1.NewTime(l.r.Clock.Now().Truncate(time.Second))
	next, err := budget.Spend(prev, b.Generation, write, budget.Begin{At: now, Evidence: c.d.Evidence, UID: l.cfg.Object.GetUID(), Version: l.cfg.Object.GetResourceVersion()}, &now, c.d.Action)
	if err != nil {
		return fmt.Errorf("breaker %s: %w", name, err)
	}
	if write == budget.Close && c.d.EndsOutage {
		// The close ends the outage: ended here, before the patch, so
		// that a process killed between the two leaves no window whose
		// end a new process must see again (its probes may not, before
		// the next outage begins); a refused patch refunds it.
		next = nil
	}
	if err := l.r.setOutage(ctx, b, next); err != nil {
		return err
	}
	if prev != nil && next == nil {
		l.r.Signals.Forget(b.Name, prev.StartedAt.Time)
	}
	l.spent[name] = prev
	return nil
}

// window is b's outage window as the decision saw it (policy.Window).
func (l *ledger) window(b *v1alpha1.WebhookCircuitBreaker) *v1alpha1.OutageWindow {
	return policy.Window(b, l.cfg, circuit.Inspect(l.cfg, b.Spec.Target.WebhookName))
}

// Refund puts back the windows of the named breakers as they were before
// this patch counted: the API server refused the patch, so it was never
// applied. A refund that cannot be written leaves the write counted (one
// more than was made: the budget allows a close that much slack).
func (l *ledger) Refund(ctx context.Context, _ budget.Write, names []string) {
	for _, name := range names {
		prev, ok := l.spent[name]
		if !ok {
			continue
		}
		delete(l.spent, name)
		b := l.breakers[name].b
		counted := b.Status.Outage.DeepCopy()
		for range 3 {
			err := l.r.setOutage(ctx, b, prev)
			if err == nil || !apierrors.IsConflict(err) {
				break
			}
			// Someone wrote the breaker in between: give back only if
			// the window is still as this patch left it.
			if err := l.r.APIReader.Get(ctx, types.NamespacedName{Name: name}, b); err != nil || !equality.Semantic.DeepEqual(b.Status.Outage, counted) {
				break
			}
		}
	}
}

// setOutage writes w as b's outage window, alone, conditional on b's
// version (another writer in between makes it fail with a conflict).
func (r *Reconciler) setOutage(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, w *v1alpha1.OutageWindow) error {
	base := b.DeepCopy()
	before := b.ResourceVersion
	b.Status.Outage = w.DeepCopy()
	if err := r.Client.Status().Patch(ctx, b, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		b.Status.Outage = base.Status.Outage
		return fmt.Errorf("count the write in the outage window of breaker %s: %w", b.Name, err)
	}
	r.wrote(b, before)
	return nil
}

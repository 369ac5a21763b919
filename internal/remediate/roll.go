package remediate

import (
	"context"
	"fmt"
	"slices"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// rolledOwners are the controllers that recreate a Pod evicted from them.
var rolledOwners = map[string]string{"ReplicaSet": "apps", "StatefulSet": "apps", "DaemonSet": "apps", "Job": "batch"}

// rollable reports whether a Pod may be rolled: it has a controller that
// recreates it. owner is the controller's UID, kind "Kind/name".
func rollable(pod *unstructured.Unstructured) (owner types.UID, kind string, ok bool, why string) {
	var ref *metav1.OwnerReference
	for _, o := range pod.GetOwnerReferences() {
		if o.Controller != nil && *o.Controller {
			ref = &o
			break
		}
	}
	if ref == nil {
		return "", "", false, "a bare Pod (no controller would recreate it): never deleted; recreate it yourself so that the webhook sees it"
	}
	kind = ref.Kind + "/" + ref.Name
	group, known := rolledOwners[ref.Kind]
	if !known || (ref.APIVersion != group+"/v1") {
		return ref.UID, kind, false, fmt.Sprintf("owned by %s (%s), which tripswitch does not roll: restart it through its owner", kind, ref.APIVersion)
	}
	if pod.GetDeletionTimestamp() != nil {
		return ref.UID, kind, false, "already being deleted"
	}
	return ref.UID, kind, true, ""
}

// evict sends one eviction. Dry run: a 429 (the budget allows none now) is
// no refusal, the real run waits for it. The precondition is the Pod's UID:
// a Pod's spec cannot change, and its resourceVersion changes with every
// status update, so the UID is what says it is the Pod that was reviewed.
func (r *Remediator) evict(ctx context.Context, it *Item, dryRun bool) error {
	f := it.finding
	uid := f.Object().GetUID()
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: f.Name, Namespace: f.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	}
	if dryRun {
		ev.DeleteOptions.DryRun = []string{metav1.DryRunAll}
	}
	err := r.Kube.PolicyV1().Evictions(f.Namespace).Evict(ctx, ev)
	switch {
	case err == nil:
		if dryRun && !r.Apply {
			it.Outcome = WouldRoll
		}
		return nil
	case apierrors.IsTooManyRequests(err) && dryRun:
		if !r.Apply {
			it.Outcome, it.Message = WouldRoll, "its disruption budget allows no eviction now: --apply waits for it (at most "+r.EvictionTimeout.String()+")"
		}
		return nil
	case apierrors.IsTooManyRequests(err):
		return errBudget{err}
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		it.Outcome, it.Message = Current, "gone or replaced since its review"
		return nil
	}
	if err := stop(err, "create", "pods/eviction", f.Namespace); err != nil {
		return err
	}
	r.fail(it, dryRun, "the API server refused the eviction: "+err.Error())
	return nil
}

// errBudget: a disruption budget allows no eviction now.
type errBudget struct{ err error }

func (e errBudget) Error() string { return e.err.Error() }

// roll evicts the items' Pods, at most MaxEvictions at a time and never two
// of one owner's at once, each retried with backoff while its budget allows
// none, and waits for each to be gone before its owner's next.
func (r *Remediator) roll(ctx context.Context, items []*Item) error {
	return schedule(items, r.MaxEvictions, func(it *Item) error {
		if err := r.check(ctx); err != nil {
			return err
		}
		return r.rollOne(ctx, it)
	})
}

func (r *Remediator) rollOne(ctx context.Context, it *Item) error {
	deadline := r.Now().Add(r.EvictionTimeout)
	wait := r.EvictionBackoff
	waits := 0
	for {
		err := r.evict(ctx, it, false)
		if _, ok := err.(errBudget); !ok {
			if err != nil || it.Outcome != "" {
				return err
			}
			break
		}
		if !r.Now().Add(wait).Before(deadline) {
			it.Outcome, it.Message = Refused, fmt.Sprintf("its disruption budget allowed no eviction in %s (%d tries): %v", r.EvictionTimeout, waits+1, err)
			r.event(it, "Warning", "NotRolled", "not evicted: %s", it.Message)
			return nil
		}
		waits++
		if err := sleep(ctx, wait); err != nil {
			return errStop{fmt.Errorf("stopped: %w", err)}
		}
		wait = min(2*wait, r.MaxEvictionBackoff)
	}
	it.Outcome = Rolled
	if waits > 0 {
		it.Message = fmt.Sprintf("evicted after its disruption budget refused %d times", waits)
	}
	r.event(it, "Normal", "Rolled", "evicted so that %s recreates it through webhook %s, which was skipped while its circuit was open", it.Owner, r.Webhook.Name)
	return r.waitGone(ctx, it, deadline)
}

// waitGone waits until the evicted Pod is deleted (or replaced), so that its
// owner's next Pod is not evicted while it is still terminating.
func (r *Remediator) waitGone(ctx context.Context, it *Item, deadline time.Time) error {
	f := it.finding
	for {
		p, err := r.Kube.CoreV1().Pods(f.Namespace).Get(ctx, f.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && p.UID != f.Object().GetUID() {
			return nil
		}
		if err != nil {
			if err := stop(err, "get", "pods", f.Namespace); err != nil {
				return err
			}
		}
		if !r.Now().Before(deadline) {
			it.Message = "evicted, but still terminating after " + r.EvictionTimeout.String()
			return nil
		}
		if err := sleep(ctx, min(r.EvictionBackoff, time.Second)); err != nil {
			return errStop{fmt.Errorf("stopped: %w", err)}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// schedule runs do for each item in order, at most n at once and never two
// items of one owner at once (an item waits for its owner's previous one).
// An error from do starts nothing more; the first one is returned once the
// running ones finished.
func schedule(items []*Item, n int, do func(*Item) error) error {
	type result struct {
		it  *Item
		err error
	}
	queue := slices.Clone(items)
	busy := map[types.UID]bool{}
	done := make(chan result)
	running := 0
	var first error
	for len(queue) > 0 || running > 0 {
		for i := 0; first == nil && i < len(queue) && running < n; {
			it := queue[i]
			if busy[it.owner] {
				i++
				continue
			}
			busy[it.owner] = true
			running++
			queue = slices.Delete(queue, i, i+1)
			go func() { done <- result{it, do(it)} }()
		}
		if running == 0 {
			break // stopped: the rest are not done
		}
		res := <-done
		running--
		delete(busy, res.it.owner)
		if res.err != nil && first == nil {
			first = res.err
		}
	}
	return first
}

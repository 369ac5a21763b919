package breakglass

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// StandDown is what an uninstall runs before it deletes anything (the
// chart's pre-delete hook; `tripswitch standdown` before `kubectl delete -k`).
// Deleting the controller, its RBAC and the breakers together would leave
// every open circuit failed open, with nobody to close it, and the breakers
// stuck on their finalizer. So, in order:
//
//  1. the controller is scaled to zero replicas, so nothing opens a circuit
//     again behind the restore;
//  2. the wait for its leader Lease to be released (or to expire) proves no
//     replica is still acting;
//  3. every breaker's circuit is restored from its record, with the
//     controller's own one-patch protocol;
//  4. every breaker's finalizer is removed, so deleting it completes without
//     a controller; a breaker that outlives the uninstall holds nothing, and
//     a controller installed again adds the finalizer back.
//
// A circuit that cannot be restored (someone changed what tripswitch set,
// or its configuration may not be read) keeps its breaker's finalizer, and
// the error says which: the uninstall stops there instead of hiding it.
type StandDown struct {
	Client client.Client
	// Namespace, Deployment and Lease name the controller's Deployment and
	// its leader-election Lease.
	Namespace, Deployment, Lease string
	// Timeout bounds the wait for the Lease.
	Timeout time.Duration
	// Log receives one line per step.
	Log io.Writer
	// Now is the clock for the Lease's expiry; nil is time.Now.
	Now func() time.Time
}

// Run performs the stand-down.
func (s StandDown) Run(ctx context.Context) error {
	if s.Namespace == "" || s.Deployment == "" || s.Lease == "" {
		return errors.New("stand down: the controller's namespace, Deployment and Lease must all be named")
	}
	now := s.Now
	if now == nil {
		now = time.Now
	}
	if err := s.scaleToZero(ctx); err != nil {
		return err
	}
	fmt.Fprintf(s.Log, "scaled deployment %s/%s to 0 replicas\n", s.Namespace, s.Deployment)
	if err := s.waitForLease(ctx, now); err != nil {
		return err
	}
	fmt.Fprintf(s.Log, "no replica holds lease %s/%s\n", s.Namespace, s.Lease)

	var breakers v1alpha1.WebhookCircuitBreakerList
	if err := s.Client.List(ctx, &breakers); err != nil {
		return fmt.Errorf("stand down: list breakers: %w", err)
	}
	var errs []error
	for i := range breakers.Items {
		b := &breakers.Items[i]
		if err := s.release(ctx, b); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("stand down: %d of %d breakers not released (their finalizers stay; fix each and run again): %w",
			len(errs), len(breakers.Items), errors.Join(errs...))
	}
	fmt.Fprintf(s.Log, "released %d breakers\n", len(breakers.Items))
	return nil
}

func (s StandDown) scaleToZero(ctx context.Context) error {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: s.Deployment, Namespace: s.Namespace}}
	err := s.Client.SubResource("scale").Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`)),
		client.WithSubResourceBody(&autoscalingv1.Scale{}))
	switch {
	case apierrors.IsNotFound(err):
		return nil // no controller: nothing to stop
	case err != nil:
		return fmt.Errorf("stand down: scale deployment %s/%s to 0: %w", s.Namespace, s.Deployment, err)
	}
	return nil
}

// waitForLease returns once no replica can be leader: the Lease is gone,
// released (no holder) or past its duration since the last renewal.
func (s StandDown) waitForLease(ctx context.Context, now func() time.Time) error {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var l coordinationv1.Lease
		err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Lease}, &l)
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, fmt.Errorf("get lease %s/%s: %w", s.Namespace, s.Lease, err)
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if holder == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			return true, nil
		}
		expires := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		last = fmt.Sprintf("held by %s until %s", holder, expires.Format(time.RFC3339))
		return now().After(expires), nil
	})
	if err != nil {
		return fmt.Errorf("stand down: a replica still leads (lease %s/%s %s): %w", s.Namespace, s.Lease, last, err)
	}
	return nil
}

// release restores a breaker's circuit, if its record is there, and removes
// its finalizer.
func (s StandDown) release(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker) error {
	if !controllerutil.ContainsFinalizer(b, v1alpha1.Finalizer) {
		// The controller puts the finalizer on before it can write to the
		// target, so a breaker without one holds nothing open (and one whose
		// configuration is not approved must not fail the uninstall).
		return nil
	}
	t := b.Spec.Target
	err := Restore(ctx, s.Client, t.Kind, t.ConfigurationName, t.WebhookName)
	switch {
	case errors.Is(err, ErrNotRecorded):
		fmt.Fprintf(s.Log, "breaker %s: %v\n", b.Name, err)
	case err == nil:
		fmt.Fprintf(s.Log, "breaker %s: restored %s %s/%s\n", b.Name, t.Kind, t.ConfigurationName, t.WebhookName)
	case errors.Is(err, errNoRecord), errors.Is(err, errNoConfiguration):
		// Nothing held open.
	default:
		return fmt.Errorf("breaker %s: %w", b.Name, err)
	}
	// The restore recorded itself in the breaker's status, so read it again;
	// anyone else's write in between only makes this try again.
	var err2 error
	for range 5 {
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("breaker %s: %w", b.Name, err)
		}
		if !controllerutil.ContainsFinalizer(b, v1alpha1.Finalizer) {
			return nil
		}
		patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(b, v1alpha1.Finalizer)
		err2 = s.Client.Patch(ctx, b, patch)
		if err2 == nil || apierrors.IsNotFound(err2) {
			return nil
		}
		if !apierrors.IsConflict(err2) {
			break
		}
	}
	return fmt.Errorf("breaker %s: remove finalizer: %w", b.Name, err2)
}

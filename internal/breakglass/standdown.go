package breakglass

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/floor"
)

// ControllerLabels select the controller's Deployment when StandDown is not
// given its name: config/manager and the Helm chart both set them.
var ControllerLabels = map[string]string{"app.kubernetes.io/name": "tripswitch", "app.kubernetes.io/component": "controller"}

// ErrNoController is returned, with nothing changed, when StandDown finds no
// controller Deployment to stop and was not forced: a wrong --namespace or
// --deployment would otherwise release every breaker in the cluster while
// the real controller runs elsewhere.
var ErrNoController = errors.New("no controller Deployment found")

// StandDown is what an uninstall runs before it deletes anything (the
// chart's pre-delete hook; `tripswitch standdown` before `kubectl delete -k`).
// Deleting the controller, its RBAC and the breakers together would leave
// every open circuit failed open, with nobody to close it, and the breakers
// stuck on their finalizer. So, in order:
//
//  1. the controller's Deployment is found (by name, or by
//     ControllerLabels) and scaled to zero replicas, so nothing opens a
//     circuit again behind the restore; when there is none it stops with
//     ErrNoController and changes nothing, unless Force;
//  2. the wait for its leader Lease to be released (or to expire) proves no
//     replica is still acting; a Lease still renewed when Timeout ends stops
//     it, whatever Force says;
//  3. every breaker's circuit is restored from its record, with the
//     controller's own one-patch protocol;
//  4. every breaker's finalizer is removed, so deleting it completes without
//     a controller; a breaker that outlives the uninstall holds nothing, and
//     a controller installed again adds the finalizer back;
//  5. once every breaker is released, the Lease is deleted (if no replica
//     took it meanwhile): a Lease found later in the namespace then means a
//     controller has led since the last stand-down.
//
// Each restored breaker's status says the stand-down restored it, and who
// ran it (By), with reason StandDownReason.
//
// A circuit that cannot be restored (someone changed what tripswitch set,
// or its configuration may not be read) keeps its breaker's finalizer, and
// the error says which: the uninstall stops there instead of hiding it.
type StandDown struct {
	Client client.Client
	// Namespace is the controller's namespace (required).
	Namespace string
	// Deployment names the controller's Deployment; empty: the one
	// Deployment in Namespace with ControllerLabels (more than one is an
	// error).
	Deployment string
	// Lease names the controller's leader-election Lease (required).
	Lease string
	// Timeout bounds the wait for the Lease; zero is two minutes.
	Timeout time.Duration
	// Force restores and releases the breakers even when no controller
	// Deployment was found (the controller is already gone). It does not
	// override a Lease that a replica still renews.
	Force bool
	// By names who runs the stand-down, for the restored breakers' status:
	// "the stand-down before an uninstall (By)"; empty is
	// "tripswitch standdown" (the chart's hook says helm uninstall).
	By string
	// Log receives one line per thing done.
	Log io.Writer
	// Now is the clock for the Lease's expiry; nil is time.Now.
	Now func() time.Time
}

// Run performs the stand-down.
func (s StandDown) Run(ctx context.Context) error {
	if s.Namespace == "" || s.Lease == "" {
		return errors.New("stand down: the controller's namespace and Lease must be named")
	}
	now := s.Now
	if now == nil {
		now = time.Now
	}
	deployment, err := s.findController(ctx)
	switch {
	case errors.Is(err, ErrNoController) && s.Force:
		fmt.Fprintf(s.Log, "%v; --force: nothing stopped, going on\n", err)
	case err != nil:
		return err
	default:
		if err := s.scaleToZero(ctx, deployment); err != nil {
			return err
		}
	}
	lease, err := s.waitForLease(ctx, now, deployment)
	if err != nil {
		return err
	}

	var breakers v1alpha1.WebhookCircuitBreakerList
	if err := s.Client.List(ctx, &breakers); err != nil {
		return fmt.Errorf("stand down: list breakers: %w", err)
	}
	var errs []error
	var restored, released int
	for i := range breakers.Items {
		b := &breakers.Items[i]
		r, err := s.release(ctx, b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r.restored {
			restored++
		}
		if r.released {
			released++
		}
	}
	fmt.Fprintf(s.Log, "restored %d circuits; removed the finalizer from %d of %d breakers (the others had none)\n",
		restored, released, len(breakers.Items)-len(errs))
	if len(errs) > 0 {
		return fmt.Errorf("stand down: %d of %d breakers not released (their finalizers stay; fix each and run again): %w",
			len(errs), len(breakers.Items), errors.Join(errs...))
	}
	return s.deleteLease(ctx, lease)
}

// restorer is who the restored breakers' status names.
func (s StandDown) restorer() restorer {
	by := s.By
	if by == "" {
		by = "tripswitch standdown"
	}
	return restorer{reason: StandDownReason, by: "the stand-down before an uninstall (" + by + ")"}
}

// deleteLease deletes the Lease waitForLease last saw (nil: there was
// none), on condition that it is still that version: a replica that took
// it since leads, and the error says so.
func (s StandDown) deleteLease(ctx context.Context, l *coordinationv1.Lease) error {
	if l == nil {
		return nil
	}
	err := s.Client.Delete(ctx, l, client.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return fmt.Errorf("stand down: every circuit is restored, but lease %s/%s changed since no replica held it: is another tripswitch running in %s? %w",
			s.Namespace, s.Lease, s.Namespace, err)
	case err != nil:
		return fmt.Errorf("stand down: every circuit is restored, but lease %s/%s could not be deleted: %w", s.Namespace, s.Lease, err)
	}
	fmt.Fprintf(s.Log, "deleted lease %s/%s\n", s.Namespace, s.Lease)
	return nil
}

// findController returns the name of the controller's Deployment, or
// ErrNoController.
func (s StandDown) findController(ctx context.Context) (string, error) {
	if s.Deployment != "" {
		err := s.Client.SubResource("scale").Get(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: s.Deployment, Namespace: s.Namespace}}, &autoscalingv1.Scale{})
		switch {
		case apierrors.IsNotFound(err):
			return "", fmt.Errorf("stand down: %w: deployment %s/%s does not exist%s; name the controller's with --namespace and --deployment, or pass --force if it is already gone",
				ErrNoController, s.Namespace, s.Deployment, s.candidates(ctx))
		case err != nil:
			return "", fmt.Errorf("stand down: get deployment %s/%s: %w", s.Namespace, s.Deployment, err)
		}
		return s.Deployment, nil
	}
	names, err := s.labelled(ctx)
	if err != nil {
		return "", fmt.Errorf("stand down: find the controller's Deployment in %s by its labels (or name it with --deployment): %w", s.Namespace, err)
	}
	switch len(names) {
	case 0:
		return "", fmt.Errorf("stand down: %w: no Deployment in namespace %s is labelled %s; name the controller's with --namespace and --deployment, or pass --force if it is already gone",
			ErrNoController, s.Namespace, labels.Set(ControllerLabels))
	case 1:
		return names[0], nil
	default:
		return "", fmt.Errorf("stand down: %d Deployments in namespace %s are labelled %s (%s): name the controller's with --deployment",
			len(names), s.Namespace, labels.Set(ControllerLabels), strings.Join(names, ", "))
	}
}

// labelled lists the Deployments in Namespace with ControllerLabels.
func (s StandDown) labelled(ctx context.Context) ([]string, error) {
	var list appsv1.DeploymentList
	if err := s.Client.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels(ControllerLabels)); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, d := range list.Items {
		names = append(names, d.Name)
	}
	return names, nil
}

// candidates names, for an error, the labelled Deployments in Namespace;
// empty when there are none or they may not be listed.
func (s StandDown) candidates(ctx context.Context) string {
	names, err := s.labelled(ctx)
	if err != nil || len(names) == 0 {
		return ""
	}
	return fmt.Sprintf(" (labelled as tripswitch's controller there: %s)", strings.Join(names, ", "))
}

func (s StandDown) scaleToZero(ctx context.Context, name string) error {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace}}
	var scale autoscalingv1.Scale
	if err := s.Client.SubResource("scale").Get(ctx, d, &scale); err != nil {
		return fmt.Errorf("stand down: get the scale of deployment %s/%s: %w", s.Namespace, name, err)
	}
	if scale.Spec.Replicas == 0 {
		fmt.Fprintf(s.Log, "deployment %s/%s was at 0 replicas already\n", s.Namespace, name)
		return nil
	}
	err := s.Client.SubResource("scale").Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`)),
		client.WithSubResourceBody(&autoscalingv1.Scale{}))
	if err != nil {
		return fmt.Errorf("stand down: scale deployment %s/%s to 0: %w", s.Namespace, name, err)
	}
	fmt.Fprintf(s.Log, "scaled deployment %s/%s from %d to 0 replicas (it stays at 0; `kubectl scale` it back if you keep tripswitch)\n",
		s.Namespace, name, scale.Spec.Replicas)
	return nil
}

// waitForLease returns once no replica can be leader: the Lease is gone
// (nil), released (no holder) or past its duration since the last renewal.
// deployment is the one scaled to zero, empty when none was.
func (s StandDown) waitForLease(ctx context.Context, now func() time.Time, deployment string) (*coordinationv1.Lease, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	var last, said string
	var seen *coordinationv1.Lease
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var l coordinationv1.Lease
		err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Lease}, &l)
		seen = nil
		switch {
		case apierrors.IsNotFound(err):
			said = fmt.Sprintf("lease %s/%s does not exist: no replica leads", s.Namespace, s.Lease)
			return true, nil
		case err != nil:
			return false, fmt.Errorf("get lease %s/%s: %w", s.Namespace, s.Lease, err)
		}
		seen = &l
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if holder == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			said = fmt.Sprintf("lease %s/%s is released: no replica leads", s.Namespace, s.Lease)
			return true, nil
		}
		expires := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		last = fmt.Sprintf("held by %s, last renewed %s", holder, l.Spec.RenewTime.UTC().Format(time.RFC3339))
		said = fmt.Sprintf("lease %s/%s expired (%s): no replica leads", s.Namespace, s.Lease, last)
		return now().After(expires), nil
	})
	if err != nil {
		stopped := "nothing was stopped"
		if deployment != "" {
			stopped = fmt.Sprintf("deployment %s/%s stays at 0 replicas", s.Namespace, deployment)
		}
		return nil, fmt.Errorf("stand down: a replica still leads after %v (lease %s/%s %s): is another tripswitch Deployment running in %s? No circuit was restored and no breaker released; %s: %w",
			timeout, s.Namespace, s.Lease, last, s.Namespace, stopped, err)
	}
	fmt.Fprintln(s.Log, said)
	return seen, nil
}

// released is what release did to one breaker.
type released struct{ restored, released bool }

// release restores a breaker's circuit, if its record is there, and removes
// its finalizer.
func (s StandDown) release(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker) (released, error) {
	var r released
	if !controllerutil.ContainsFinalizer(b, v1alpha1.Finalizer) {
		// The controller puts the finalizer on before it can write to the
		// target, so a breaker without one holds nothing open (and one whose
		// configuration is not approved must not fail the uninstall).
		return r, nil
	}
	t := b.Spec.Target
	err := restore(ctx, s.Client, t.Kind, t.ConfigurationName, t.WebhookName, s.restorer())
	switch {
	case errors.Is(err, ErrNotRecorded):
		fmt.Fprintf(s.Log, "breaker %s: %v\n", b.Name, err)
	case err == nil:
		r.restored = true
		fmt.Fprintf(s.Log, "breaker %s: restored %s %s/%s\n", b.Name, t.Kind, t.ConfigurationName, t.WebhookName)
	case errors.Is(err, errNoRecord), errors.Is(err, errNoConfiguration):
		// Nothing held open.
	default:
		return r, fmt.Errorf("breaker %s: %w", b.Name, err)
	}
	// Then the fallback policy goes back to how tripswitch found it.
	if err := syncFloor(ctx, s.Client, b.Name, floor.WantReleased); err != nil {
		return r, err
	}
	// The restore recorded itself in the breaker's status, so read it again;
	// anyone else's write in between only makes this try again.
	var readErr error
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if readErr = s.Client.Get(ctx, client.ObjectKeyFromObject(b), b); readErr != nil || !controllerutil.ContainsFinalizer(b, v1alpha1.Finalizer) {
			return nil
		}
		patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(b, v1alpha1.Finalizer)
		err := s.Client.Patch(ctx, b, patch)
		r.released = err == nil
		return client.IgnoreNotFound(err)
	})
	switch {
	case apierrors.IsNotFound(readErr):
		return r, nil
	case readErr != nil:
		return r, fmt.Errorf("breaker %s: %w", b.Name, readErr)
	case err != nil:
		return r, fmt.Errorf("breaker %s: remove finalizer: %w", b.Name, err)
	}
	if r.released {
		fmt.Fprintf(s.Log, "breaker %s: removed finalizer %s\n", b.Name, v1alpha1.Finalizer)
	}
	return r, nil
}

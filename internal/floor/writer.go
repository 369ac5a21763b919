package floor

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// Writer applies floor patches. On success the policy's Object holds the
// API server's answer, so the caller can Inspect it again without a read.
type Writer struct {
	// Client reads and patches the approved fallback policies.
	Client client.Client
	// Reader, if set, reads them instead of Client: an uncached reader, since
	// RBAC grants the controller the approved policies by name only.
	Reader client.Reader
}

// Read reads the fallback policy fp names.
func (w Writer) Read(ctx context.Context, fp v1alpha1.FallbackPolicy) (*Policy, error) {
	obj, err := NewObject(fp.Kind)
	if err != nil {
		return nil, err
	}
	var reader client.Reader = w.Client
	if w.Reader != nil {
		reader = w.Reader
	}
	if err := reader.Get(ctx, types.NamespacedName{Name: fp.Name}, obj); err != nil {
		if meta.IsNoMatchError(err) {
			// Said plainly: the kind's absence is the cluster's version, not
			// a missing policy or a missing permission.
			return nil, fmt.Errorf("whileOpen.fallbackPolicy %s %s: %w (%s is served there from Kubernetes %s; use a ValidatingAdmissionPolicy, or upgrade): %w",
				fp.Kind, fp.Name, ErrNotServed, fp.Kind, ServedFrom(fp.Kind), err)
		}
		return nil, fmt.Errorf("read whileOpen.fallbackPolicy %s %s: %w", fp.Kind, fp.Name, err)
	}
	return View(obj)
}

// ServedFrom is the first Kubernetes minor release ("1.36") that serves
// kind at admissionregistration.k8s.io/v1 by default; TestFloorOnTheAPIServer
// checks it on every release the compatibility suite runs it on.
func ServedFrom(kind v1alpha1.FallbackPolicyKind) string {
	if kind == v1alpha1.MutatingAdmissionPolicy {
		return "1.36"
	}
	return "1.30"
}

// Arm arms the floor (see ArmPatch). It reports whether it wrote; a floor
// already armed is left alone.
func (w Writer) Arm(ctx context.Context, p *Policy, owner Owner, now metav1.Time) (bool, error) {
	data, err := ArmPatch(p, owner, now)
	if err != nil || data == nil {
		return false, err
	}
	return true, w.apply(ctx, p, "arm", data)
}

// Disarm disarms the floor, or adopts the policy inert (see DisarmPatch).
// It reports whether it wrote.
func (w Writer) Disarm(ctx context.Context, p *Policy, owner Owner, now metav1.Time) (bool, error) {
	data, err := DisarmPatch(p, owner, now)
	if err != nil || data == nil {
		return false, err
	}
	return true, w.apply(ctx, p, "disarm", data)
}

// Release gives the policy back as tripswitch found it (see ReleasePatch).
// It reports whether it wrote.
func (w Writer) Release(ctx context.Context, p *Policy, owner Owner) (bool, error) {
	data, err := ReleasePatch(p, owner)
	if err != nil || data == nil {
		return false, err
	}
	return true, w.apply(ctx, p, "release", data)
}

// Drop removes the record and nothing else (see DropPatch). It reports
// whether it wrote.
func (w Writer) Drop(ctx context.Context, p *Policy, owner Owner) (bool, error) {
	data, err := DropPatch(p, owner)
	if err != nil || data == nil {
		return false, err
	}
	return true, w.apply(ctx, p, "drop the record of", data)
}

func (w Writer) apply(ctx context.Context, p *Policy, what string, data []byte) error {
	if err := w.Client.Patch(ctx, p.Object, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return fmt.Errorf("%s floor %s: %w", what, p.Name(), err)
	}
	v, err := View(p.Object)
	if err != nil {
		return err
	}
	p.MatchConditions = v.MatchConditions
	return nil
}

// IsStale reports whether a write failed because the policy changed since
// it was read (409 from the resourceVersion, 422 from a failed test): read
// again and decide again.
func IsStale(err error) bool { return circuit.IsStale(err) }

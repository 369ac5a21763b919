package floor

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Replaced are the fallback policies prev (a breaker's status.floor) names
// that current does not: adopted under an earlier
// spec.whileOpen.fallbackPolicy and not yet given back. A name that does
// not parse as Kind/name is skipped.
func Replaced(prev *v1alpha1.FloorStatus, current *v1alpha1.FallbackPolicy) []v1alpha1.FallbackPolicy {
	if prev == nil {
		return nil
	}
	var out []v1alpha1.FallbackPolicy
	seen := map[string]bool{}
	if current != nil {
		seen[string(current.Kind)+"/"+current.Name] = true
	}
	for _, name := range append([]string{prev.Policy}, prev.Previous...) {
		fp, ok := parseName(name)
		if !ok || seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, fp)
	}
	return out
}

func parseName(s string) (v1alpha1.FallbackPolicy, bool) {
	kind, name, ok := strings.Cut(s, "/")
	k := v1alpha1.FallbackPolicyKind(kind)
	if !ok || name == "" || (k != v1alpha1.ValidatingAdmissionPolicy && k != v1alpha1.MutatingAdmissionPolicy) {
		return v1alpha1.FallbackPolicy{}, false
	}
	return v1alpha1.FallbackPolicy{Kind: k, Name: name}, true
}

// Names are fps as Kind/name.
func Names(fps []v1alpha1.FallbackPolicy) []string {
	out := make([]string, len(fps))
	for i, fp := range fps {
		out[i] = string(fp.Kind) + "/" + fp.Name
	}
	return out
}

// ReleaseAll gives each of fps back as tripswitch found it (Sync toward
// WantReleased). A policy that is gone, or holds no record of owner's (it
// was never adopted, or another breaker adopted it since), holds nothing
// to give back. It returns what it released and what it could not, with
// the errors joined.
func (w Writer) ReleaseAll(ctx context.Context, fps []v1alpha1.FallbackPolicy, owner Owner) (released, left []v1alpha1.FallbackPolicy, err error) {
	var errs []error
	for _, fp := range fps {
		s, e := w.Sync(ctx, fp, owner, WantReleased, nil, metav1.Time{})
		switch {
		case e == nil:
			if s.Wrote == WantReleased || s.ExternalChange {
				released = append(released, fp)
			}
		case apierrors.IsNotFound(e) || errors.Is(e, ErrOwnedByOther):
		default:
			left = append(left, fp)
			errs = append(errs, fmt.Errorf("release the replaced fallback policy: %w", e))
		}
	}
	return released, left, errors.Join(errs...)
}

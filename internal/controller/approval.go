package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
)

// approvalCache tells a breaker whose target configuration RBAC does not
// approve what to change: it keeps the approved configuration names last
// read from a SelfSubjectRulesReview, per kind. The zero value is ready.
type approvalCache struct {
	kinds sync.Map // v1alpha1.TargetKind -> approvalReview
}

// A breaker whose configuration RBAC does not approve cannot be told from a
// breaker whose configurationName is misspelled: the API server answers
// Forbidden for a name the controller may not read whether or not it
// exists, and the controller may not list configurations to find out. What
// it can learn is which names it may read: a SelfSubjectRulesReview (every
// authenticated user may create one) lists its rules, and so the names the
// chart or kustomize approved. The message lists them, suggests the nearest
// one, and only then says how to approve the name as written; `tripswitch
// check`, with an operator's credentials, tells a missing configuration from
// an unapproved one.

// approvedNames are the names of kind's configurations that RBAC lets the
// controller get. all is true when its rules allow every name. The review
// is answered from the authorizer's rules, without reading any
// configuration; incomplete is set when the authorizer could not list all
// of them (a webhook authorizer), so a name may be allowed that is not listed.
// A breaker that is not approved is looked at every probe interval; the
// review is asked for at most every approvalsTTL per kind.
func (c *approvalCache) approvedNames(ctx context.Context, cl client.Client, now time.Time, kind v1alpha1.TargetKind) (names []string, all, incomplete bool, err error) {
	if v, ok := c.kinds.Load(kind); ok {
		if a := v.(approvalReview); now.Sub(a.at) < approvalsTTL {
			return a.names, a.all, a.incomplete, nil
		}
	}
	review := &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: metav1.NamespaceDefault}}
	if err := cl.Create(ctx, review); err != nil {
		return nil, false, false, fmt.Errorf("create a SelfSubjectRulesReview to learn the approved %s names: %w", kind, err)
	}
	names, all = policy.ApprovedIn(review.Status.ResourceRules, kind)
	c.kinds.Store(kind, approvalReview{names: names, all: all, incomplete: review.Status.Incomplete, at: now})
	return names, all, review.Status.Incomplete, nil
}

// approvalsTTL is how long a SelfSubjectRulesReview's answer is used.
const approvalsTTL = 30 * time.Second

// approvalReview is one SelfSubjectRulesReview's answer for one kind.
type approvalReview struct {
	names           []string
	all, incomplete bool
	at              time.Time
}

// notApproved says why the controller may not read t's configuration and
// what to change: first whether the name is among the approved ones (a
// typo is fixed in the breaker, not by approving it), then how to approve it.
func (c *approvalCache) notApproved(ctx context.Context, cl client.Client, now time.Time, t v1alpha1.Target) string {
	names, all, incomplete, err := c.approvedNames(ctx, cl, now, t.Kind)
	return policy.NotApprovedMessage(t, names, all || incomplete, err)
}

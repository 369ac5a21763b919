package audit

import (
	"context"
	"errors"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	celplugin "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// matcher applies a webhook's selectors and matchConditions to an object,
// as the API server does before calling it.
type matcher struct {
	namespaceSelector, objectSelector labels.Selector
	conds                             matchconditions.Matcher // nil: no conditions besides tripswitch's own
	conditionsNote                    string
}

func newMatcher(wh circuit.Webhook) (*matcher, error) {
	m := &matcher{namespaceSelector: labels.Everything(), objectSelector: labels.Everything()}
	var err error
	if wh.NamespaceSelector != nil {
		if m.namespaceSelector, err = metav1.LabelSelectorAsSelector(wh.NamespaceSelector); err != nil {
			return nil, fmt.Errorf("webhook namespaceSelector: %w", err)
		}
	}
	if wh.ObjectSelector != nil {
		if m.objectSelector, err = metav1.LabelSelectorAsSelector(wh.ObjectSelector); err != nil {
			return nil, fmt.Errorf("webhook objectSelector: %w", err)
		}
	}
	var accessors []celplugin.ExpressionAccessor
	for _, c := range wh.MatchConditions {
		if ownMatchCondition(c) {
			continue // tripswitch's bypass: it is what skipped the webhook
		}
		mc := matchconditions.MatchCondition(c)
		accessors = append(accessors, &mc)
	}
	if len(accessors) > 0 {
		env := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
		eval := celplugin.NewConditionCompiler(env).CompileCondition(accessors, celplugin.OptionalVariableDeclarations{HasAuthorizer: true}, environment.StoredExpressions)
		fail := admissionregistrationv1.Fail
		m.conds = matchconditions.NewMatcher(eval, &fail, "webhook", circuit.ShortKind(wh.Kind), wh.Name)
		m.conditionsNote = "matchConditions are evaluated against the object as it is now, without the original requester: a condition that needs the requester or the authorizer counts as matching"
	}
	return m, nil
}

// scope applies the selectors. An UPDATE matched if either the old or the
// new object matched; only the current one is known, so it decides.
func (m *matcher) scope(res gvr, obj *unstructured.Unstructured, nsLabels map[string]labels.Set) bool {
	if !m.objectSelector.Matches(labels.Set(obj.GetLabels())) {
		return false
	}
	if m.namespaceSelector.Empty() || nsLabels == nil {
		return true
	}
	switch {
	case res.Group == "" && res.Resource == "namespaces":
		return m.namespaceSelector.Matches(labels.Set(obj.GetLabels()))
	case !res.namespaced:
		return true // the API server ignores namespaceSelector for cluster-scoped objects
	}
	return m.namespaceSelector.Matches(nsLabels[obj.GetNamespace()])
}

var errNoRequester = errors.New("the original requester is not known to the audit")

// conditions evaluates the webhook's matchConditions. A condition that
// cannot be evaluated counts as matching, with a note: the audit would
// rather list an object than miss one.
func (m *matcher) conditions(ctx context.Context, res gvr, obj *unstructured.Unstructured, op, username string) (bool, string) {
	if m.conds == nil {
		return true, ""
	}
	var old *unstructured.Unstructured
	if op == "UPDATE" {
		old = obj
	}
	attrs := admission.NewAttributesRecord(obj, runtimeObject(old), obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName(),
		res.GroupVersionResource, "", admission.Operation(op), nil, true, &user.DefaultInfo{Name: username})
	va := &admission.VersionedAttributes{Attributes: attrs, VersionedKind: obj.GroupVersionKind(), VersionedObject: admission.NewLazyObject(obj)}
	if old != nil {
		va.VersionedOldObject = admission.NewLazyObject(old)
	}
	noAuthz := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "", errNoRequester
	})
	r := m.conds.Match(ctx, va, nil, noAuthz)
	if r.Error != nil {
		return true, fmt.Sprintf("matchConditions could not be evaluated (%v); listed in case", r.Error)
	}
	return r.Matches, ""
}

// runtimeObject turns a possibly nil *unstructured.Unstructured into a
// runtime.Object that is nil when it is (a typed nil would not be).
func runtimeObject(v any) runtime.Object {
	if u, ok := v.(*unstructured.Unstructured); ok && u != nil {
		return u
	}
	return nil
}

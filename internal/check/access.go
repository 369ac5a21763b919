package check

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// serviceAccount is the controller's identity, as the API server sees it.
type serviceAccount struct{ namespace, name string }

func (s serviceAccount) user() string { return "system:serviceaccount:" + s.namespace + ":" + s.name }

func (s serviceAccount) groups() []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + s.namespace, "system:authenticated"}
}

// may asks the API server whether the controller may do verb on the
// resource; a failed review is an error, never a yes.
func (c *checker) may(ctx context.Context, attrs authorizationv1.ResourceAttributes) (bool, error) {
	return c.review(ctx, authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &attrs})
}

func (c *checker) review(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (bool, error) {
	spec.User, spec.Groups = c.sa.user(), c.sa.groups()
	sar := &authorizationv1.SubjectAccessReview{Spec: spec}
	if err := c.Client.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("create SubjectAccessReview for %s: %w", c.sa.user(), err)
	}
	return sar.Status.Allowed, nil
}

// missing are those of verbs the controller may not do on the resource.
func (c *checker) missing(ctx context.Context, attrs authorizationv1.ResourceAttributes, verbs ...string) ([]string, error) {
	var out []string
	for _, v := range verbs {
		attrs.Verb = v
		ok, err := c.may(ctx, attrs)
		if err != nil {
			return nil, err
		}
		if !ok {
			out = append(out, v)
		}
	}
	return out, nil
}

func configurationAttrs(kind v1alpha1.TargetKind, name string) authorizationv1.ResourceAttributes {
	return authorizationv1.ResourceAttributes{Group: admissionregistrationv1.GroupName,
		Resource: strings.ToLower(string(kind)) + "s", Name: name}
}

// approval: the controller may get, patch and watch (by name) the
// configuration. A name that is missing and not approved is a typo to
// fix in the breaker, not a name to approve.
func (c *checker) approval(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, exists bool, add addFunc) {
	t := b.Spec.Target
	miss, err := c.missing(ctx, configurationAttrs(t.Kind, t.ConfigurationName), "get", "patch", "list", "watch")
	switch {
	case err != nil:
		add(CheckApproval, Warning, "could not check the controller's access: %v", err)
		return
	case len(miss) == 0 && !exists:
		add(CheckApproval, OK, "approved: the controller may read and patch %s %s (which does not exist)", t.Kind, t.ConfigurationName)
		return
	case len(miss) == 0:
		add(CheckApproval, OK, "approved: the controller (%s) may get, patch, list and watch %s %s", c.sa.user(), t.Kind, t.ConfigurationName)
		return
	case !exists:
		add(CheckApproval, Warning, "%s is not approved either, but it does not exist: fix spec.target.configurationName rather than approve it", t.ConfigurationName)
		return
	}
	var approved []string
	for _, name := range c.existing(ctx, t.Kind) {
		if ok, err := c.may(ctx, authorizationv1.ResourceAttributes{Verb: "get", Group: admissionregistrationv1.GroupName,
			Resource: strings.ToLower(string(t.Kind)) + "s", Name: name}); err == nil && ok {
			approved = append(approved, name)
		}
	}
	listed := "no existing configuration of this kind is approved"
	if len(approved) > 0 {
		listed = "approved: " + strings.Join(approved, ", ")
	}
	add(CheckApproval, Problem, "not approved: the controller (%s) may not %s %s %s (%s). Approve it with Helm (--set 'approvedWebhookConfigurations.%s={...,%s}') "+
		"or, with kustomize, add it to resourceNames in config/rbac/webhook_configurations.yaml",
		c.sa.user(), strings.Join(miss, ", "), t.Kind, t.ConfigurationName, listed, circuit.ShortKind(t.Kind), t.ConfigurationName)
}

// probe: the controller's own view from the breaker's status (the probes
// run where the controller runs), and, with a Prober, one probe from here.
func (c *checker) probe(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, p v1alpha1.ResolvedProbe, cfg *circuit.Configuration, add addFunc) {
	st := b.Status
	switch pu := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionProbeUnsupported); {
	case pu != nil && pu.Status == metav1.ConditionTrue:
		add(CheckProbe, Problem, "the controller cannot probe the webhook, so it can neither open nor close the circuit: %s", pu.Message)
	case st.Probe.LastResult == string(probe.Healthy):
		add(CheckProbe, OK, "the controller's probes reach the webhook (as of its last status write: %s)", st.Probe.LastReason)
	case st.Probe.LastResult == string(probe.Unhealthy):
		add(CheckProbe, Warning, "the controller's probe failed as of its last status write (%s): an outage, or no network path from the controller to the webhook", st.Probe.LastReason)
	case st.Probe.LastResult == "":
		add(CheckProbe, Warning, "no probe result from the controller yet (is it running, and does it lead?)")
	default:
		add(CheckProbe, Warning, "the controller's last probe: %s (%s)", st.Probe.LastResult, st.Probe.LastReason)
	}
	if c.Prober == nil || cfg == nil {
		return
	}
	i := cfg.Index(b.Spec.Target.WebhookName)
	if i < 0 {
		return
	}
	w := cfg.Webhooks[i]
	res := c.Prober.Probe(ctx, probe.Target{ClientConfig: w.ClientConfig, Kind: p.Kind, HealthPath: p.HealthPath, Timeout: p.Timeout, ReviewVersions: w.ReviewVersions})
	if res.Status == probe.Healthy {
		add(CheckProbe, OK, "probed from here: healthy (%s)", res.Reason)
		return
	}
	add(CheckProbe, Warning, "probed from here: %s (%s); this machine's network is not necessarily the controller's", res.Status, res.Reason)
}

// permissions: what the breaker's optional features need.
func (c *checker) permissions(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, cfg *circuit.Configuration, add addFunc) {
	var w *circuit.Webhook
	if cfg != nil {
		if i := cfg.Index(b.Spec.Target.WebhookName); i >= 0 {
			w = &cfg.Webhooks[i]
		}
	}
	var needs []string
	found := 0
	problem := func(format string, args ...any) { found++; add(CheckPermission, Problem, format, args...) }
	fail := func(err error) {
		found++
		add(CheckPermission, Warning, "could not check the controller's access: %v", err)
	}
	if spec.Signal != nil {
		needs = append(needs, "apiServerSignal")
		if ok, err := c.review(ctx, authorizationv1.SubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}); err != nil {
			fail(err)
		} else if !ok {
			problem("spec.apiServerSignal needs get on the API server's /metrics: Helm --set apiServerSignal.enabled=true, or the kustomize component config/apiserver-signal")
		}
	}
	if spec.Audit != nil && w != nil {
		needs = append(needs, "audit")
		for _, gr := range auditedResources(w.Rules) {
			miss, err := c.missing(ctx, authorizationv1.ResourceAttributes{Group: gr[0], Resource: gr[1]}, "get", "list")
			if err != nil {
				fail(err)
			} else if len(miss) > 0 {
				problem("spec.audit needs %s on %s: Helm --set audit.enabled=true with it in audit.resources, or the kustomize component config/audit with it in its ClusterRole", strings.Join(miss, " and "), groupResource(gr))
			}
		}
		if sel := w.NamespaceSelector; sel != nil && len(sel.MatchLabels)+len(sel.MatchExpressions) > 0 {
			if miss, err := c.missing(ctx, authorizationv1.ResourceAttributes{Resource: "namespaces"}, "list"); err != nil {
				fail(err)
			} else if len(miss) > 0 {
				problem("spec.audit needs list on namespaces for the webhook's namespaceSelector: Helm --set audit.enabled=true, or the kustomize component config/audit")
			}
		}
	}
	if spec.Probe.Endpoints && w != nil && w.ClientConfig.Service != nil {
		needs = append(needs, "probe.endpoints")
		svc := w.ClientConfig.Service
		for _, a := range []authorizationv1.ResourceAttributes{
			{Verb: "get", Resource: "services", Namespace: svc.Namespace, Name: svc.Name},
			{Verb: "list", Group: discoveryv1.GroupName, Resource: "endpointslices", Namespace: svc.Namespace},
		} {
			if ok, err := c.may(ctx, a); err != nil {
				fail(err)
			} else if !ok {
				problem("spec.probe.endpoints needs %s on %s in namespace %s: Helm --set endpointProbing.enabled=true, or the kustomize component config/endpoint-probing", a.Verb, groupResource([2]string{a.Group, a.Resource}), a.Namespace)
			}
		}
	}
	switch {
	case found > 0:
	case len(needs) == 0:
		add(CheckPermission, OK, "the spec needs no optional permission")
	default:
		add(CheckPermission, OK, "the controller has what %s need", strings.Join(needs, ", "))
	}
}

// auditedResources are the group/resource pairs the rules send CREATE or
// UPDATE of, as {group, resource}; wildcards are checked as written.
func auditedResources(rules []admissionregistrationv1.RuleWithOperations) [][2]string {
	var out [][2]string
	for _, r := range rules {
		if !slices.ContainsFunc(r.Operations, func(op admissionregistrationv1.OperationType) bool {
			return op == admissionregistrationv1.OperationAll || op == admissionregistrationv1.Create || op == admissionregistrationv1.Update
		}) {
			continue
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				res, _, _ = strings.Cut(res, "/")
				if p := [2]string{g, res}; !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

func groupResource(gr [2]string) string {
	if gr[0] == "" {
		return gr[1]
	}
	return gr[1] + "." + gr[0]
}

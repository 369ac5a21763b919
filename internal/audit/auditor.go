package audit

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/admission"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// Reviewer posts an AdmissionReview to a webhook (*probe.HTTPProber);
// admission.Send bounds each re-review by the webhook's timeoutSeconds.
type Reviewer = admission.Poster

// Auditor runs audits. Its clients should come from a rest.Config whose QPS
// and Burst are the audit's budget (NewClients): the client's rate limiter
// then holds every request of an audit to it.
type Auditor struct {
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
	// Reviewer sends the re-reviews; nil lists the objects without asking
	// the webhook (every finding NotChecked).
	Reviewer Reviewer
	// PageSize is the list page size. Default 500.
	PageSize int64
	// MaxObjects caps the findings; reaching it is reported. Default v1alpha1.DefaultAuditMaxObjects.
	MaxObjects int
	// Concurrency is how many re-reviews run at once. Default 4.
	Concurrency int
	// User is the requester the re-reviews name (the original one is not
	// recorded anywhere): the user tripswitch runs as (cmd/tripswitch asks
	// the API server). Empty names none.
	User string
	// Now is the clock; default time.Now.
	Now func() time.Time

	requests atomic.Int64
}

type gvr struct {
	schema.GroupVersionResource
	namespaced bool
}

func (a *Auditor) defaults() {
	if a.PageSize <= 0 {
		a.PageSize = 500
	}
	if a.MaxObjects <= 0 {
		a.MaxObjects = v1alpha1.DefaultAuditMaxObjects
	}
	if a.Concurrency <= 0 {
		a.Concurrency = 4
	}
	if a.Now == nil {
		a.Now = time.Now
	}
}

// Audit finds and re-reviews the objects wh matched in w. An error means
// the audit could not be done at all (for example, it may not list a
// resource); partial limits are Notes on the report.
func (a *Auditor) Audit(ctx context.Context, wh circuit.Webhook, w Window) (*Report, error) {
	a.defaults()
	r := &Report{Webhook: wh.Configuration + "/" + wh.Name, Window: w, Started: a.Now(), Counts: map[Verdict]int{}}
	resources, notes, err := a.resources(wh.Rules)
	if err != nil {
		return nil, err
	}
	r.Notes = append(r.Notes, notes...)
	for _, res := range resources {
		r.Resources = append(r.Resources, res.GroupResource().String())
	}
	m, err := newMatcher(wh)
	if err != nil {
		return nil, err
	}
	if m.conditionsNote != "" {
		r.Notes = append(r.Notes, m.conditionsNote)
	}
	var nsLabels map[string]labels.Set
	if wh.NamespaceSelector != nil && len(wh.NamespaceSelector.MatchLabels)+len(wh.NamespaceSelector.MatchExpressions) > 0 {
		if nsLabels, err = a.namespaceLabels(ctx); err != nil {
			return nil, err
		}
	}
	from, to := w.From.Truncate(time.Second), w.To
	if to.Truncate(time.Second) != to {
		to = to.Truncate(time.Second).Add(time.Second)
	}
	for _, res := range resources {
		if r.Truncated {
			break
		}
		err := a.list(ctx, res, func(obj *unstructured.Unstructured) bool {
			r.Scanned++
			op, at, evidence, ok := admittedIn(obj, from, to)
			if !ok || !m.scope(res, obj, nsLabels) {
				return true
			}
			matches, note := m.conditions(ctx, res, obj, op, a.User)
			if !matches {
				return true
			}
			if r.Found == a.MaxObjects {
				r.Truncated = true // one more than the cap: stop here
				return false
			}
			f := Finding{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Resource: res.GroupResource().String(),
				Namespace: obj.GetNamespace(), Name: obj.GetName(), Operation: op, At: at, Evidence: evidence, Message: note,
				ResourceVersion: obj.GetResourceVersion(), obj: obj, res: res}
			r.Findings = append(r.Findings, f)
			r.Found++
			return true
		})
		if err != nil {
			if apierrors.IsForbidden(err) {
				return nil, fmt.Errorf("list %s: %w (the audit needs get and list on %s: Helm --set audit.enabled=true with it in audit.resources; kustomize: the component config/audit with it added to its ClusterRole)", res.GroupResource(), err, res.GroupResource())
			}
			return nil, fmt.Errorf("list %s: %w", res.GroupResource(), err)
		}
	}
	if r.Truncated {
		r.Notes = append(r.Notes, fmt.Sprintf("stopped at the cap of %d objects: later objects were not examined", a.MaxObjects))
	}
	a.review(ctx, wh, r)
	for _, f := range r.Findings {
		r.Counts[f.Verdict]++
	}
	r.Finished = a.Now()
	return r, nil
}

// admittedIn reports whether obj was created or written in [from, to], and
// as what operation.
func admittedIn(obj *unstructured.Unstructured, from, to time.Time) (op string, at time.Time, evidence string, ok bool) {
	in := func(t time.Time) bool { return !t.Before(from) && !t.After(to) }
	if c := obj.GetCreationTimestamp().Time; in(c) {
		return "CREATE", c, "creationTimestamp", true
	}
	var latest time.Time
	var manager string
	for _, mf := range obj.GetManagedFields() {
		if mf.Subresource != "" || mf.Time == nil || !in(mf.Time.Time) {
			continue
		}
		if mf.Time.After(latest) {
			latest, manager = mf.Time.Time, mf.Manager
		}
	}
	if manager != "" || !latest.IsZero() {
		return "UPDATE", latest, fmt.Sprintf("managedFields (%s)", manager), true
	}
	return "", time.Time{}, "", false
}

// resources resolves the webhook's rules for CREATE and UPDATE to the
// listable resources they cover, one version per group/resource (every
// version lists the same objects).
func (a *Auditor) resources(rules []admissionregistrationv1.RuleWithOperations) ([]gvr, []string, error) {
	var notes []string
	_, lists, err := a.Discovery.ServerGroupsAndResources()
	if err != nil {
		if !discovery.IsGroupDiscoveryFailedError(err) || len(lists) == 0 {
			return nil, nil, fmt.Errorf("discover resources: %w", err)
		}
		notes = append(notes, fmt.Sprintf("some API groups could not be discovered and were not audited: %v", err))
	}
	seen := map[schema.GroupResource]bool{}
	var out []gvr
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, res := range l.APIResources {
			if strings.Contains(res.Name, "/") || !slices.Contains(res.Verbs, "list") {
				continue
			}
			g := schema.GroupVersionResource{Group: gv.Group, Version: gv.Version, Resource: res.Name}
			if seen[g.GroupResource()] || !covered(rules, g, res.Namespaced) {
				continue
			}
			seen[g.GroupResource()] = true
			out = append(out, gvr{GroupVersionResource: g, namespaced: res.Namespaced})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GroupResource().String() < out[j].GroupResource().String() })
	return out, notes, nil
}

// covered reports whether a rule sends CREATE or UPDATE of g to the webhook.
// Versions are not compared: with matchPolicy Equivalent (the default) a
// rule for one version covers the resource in every version.
func covered(rules []admissionregistrationv1.RuleWithOperations, g schema.GroupVersionResource, namespaced bool) bool {
	for _, r := range rules {
		if !slices.ContainsFunc(r.Operations, func(op admissionregistrationv1.OperationType) bool {
			return op == admissionregistrationv1.OperationAll || op == admissionregistrationv1.Create || op == admissionregistrationv1.Update
		}) {
			continue
		}
		if !slices.Contains(r.APIGroups, "*") && !slices.Contains(r.APIGroups, g.Group) {
			continue
		}
		if !slices.Contains(r.Resources, "*") && !slices.Contains(r.Resources, "*/*") && !slices.Contains(r.Resources, g.Resource) {
			continue
		}
		if r.Scope != nil {
			switch *r.Scope {
			case admissionregistrationv1.ClusterScope:
				if namespaced {
					continue
				}
			case admissionregistrationv1.NamespacedScope:
				if !namespaced {
					continue
				}
			}
		}
		return true
	}
	return false
}

// list pages through a resource, calling visit for each object until it
// returns false.
func (a *Auditor) list(ctx context.Context, res gvr, visit func(*unstructured.Unstructured) bool) error {
	opts := metav1.ListOptions{Limit: a.PageSize}
	for {
		page, err := a.Dynamic.Resource(res.GroupVersionResource).List(ctx, opts)
		if err != nil {
			return err
		}
		for i := range page.Items {
			if !visit(&page.Items[i]) {
				return nil
			}
		}
		if opts.Continue = page.GetContinue(); opts.Continue == "" {
			return nil
		}
	}
}

func (a *Auditor) namespaceLabels(ctx context.Context) (map[string]labels.Set, error) {
	out := map[string]labels.Set{}
	err := a.list(ctx, gvr{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}}, func(o *unstructured.Unstructured) bool {
		out[o.GetName()] = o.GetLabels()
		return true
	})
	if apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("list namespaces for the namespaceSelector: %w (the audit needs list on namespaces to evaluate it: "+
			"Helm --set audit.enabled=true; kustomize: add the component config/audit)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("list namespaces for the namespaceSelector: %w", err)
	}
	return out, nil
}

// review sends each finding to the webhook as a dry-run AdmissionReview.
func (a *Auditor) review(ctx context.Context, wh circuit.Webhook, r *Report) {
	if a.Reviewer == nil {
		r.Notes = append(r.Notes, "not re-reviewed: asked to list only")
		for i := range r.Findings {
			r.Findings[i].Verdict, r.Findings[i].Message = NotChecked, "not re-reviewed"
		}
		return
	}
	if class, ok := reviewable(wh); !ok {
		r.Notes = append(r.Notes, fmt.Sprintf("not re-reviewed: the webhook declares sideEffects %s, and only None or NoneOnDryRun are safe to call with dryRun", class))
		for i := range r.Findings {
			r.Findings[i].Verdict = NotReviewed
		}
		return
	}
	timeout := reviewTimeout(wh)
	sem := make(chan struct{}, a.Concurrency)
	var wg sync.WaitGroup
	for i := range r.Findings {
		f := &r.Findings[i]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			a.reviewOne(ctx, wh, f, f.res, timeout)
		})
	}
	wg.Wait()
}

// reviewable reports whether the webhook may be sent a dry-run review: only
// sideEffects None or NoneOnDryRun; class names what it declares.
func reviewable(wh circuit.Webhook) (class string, ok bool) {
	se := wh.SideEffects
	if se == nil {
		return "unset", false
	}
	return string(*se), *se == admissionregistrationv1.SideEffectClassNone || *se == admissionregistrationv1.SideEffectClassNoneOnDryRun
}

func reviewTimeout(wh circuit.Webhook) time.Duration {
	if wh.TimeoutSeconds != nil {
		return time.Duration(*wh.TimeoutSeconds) * time.Second
	}
	return 10 * time.Second
}

// Rereview reads the finding's object again and asks the webhook about it
// as it is now, updating the finding in place (Verdict, Message, Patch,
// ResourceVersion): for an object that changed after its review, so that
// nothing is done to it on the strength of a verdict about another
// version. An object deleted since is an error that apierrors.IsNotFound
// recognises. The webhook's side effects are checked as in Audit.
func (a *Auditor) Rereview(ctx context.Context, wh circuit.Webhook, f *Finding) error {
	a.defaults()
	obj, err := a.Dynamic.Resource(f.res.GroupVersionResource).Namespace(f.Namespace).Get(ctx, f.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("re-read %s %s: %w", f.Resource, f.Name, err)
	}
	f.obj, f.ResourceVersion, f.Patch, f.Message = obj, obj.GetResourceVersion(), "", ""
	if a.Reviewer == nil {
		f.Verdict, f.Message = NotChecked, "not re-reviewed"
		return nil
	}
	if _, ok := reviewable(wh); !ok {
		f.Verdict = NotReviewed
		return nil
	}
	a.reviewOne(ctx, wh, f, f.res, reviewTimeout(wh))
	return nil
}

func (a *Auditor) reviewOne(ctx context.Context, wh circuit.Webhook, f *Finding, res gvr, timeout time.Duration) {
	notChecked := func(format string, args ...any) {
		f.Verdict, f.Message = NotChecked, fmt.Sprintf(format, args...)
	}
	body, uid, err := reviewRequest(wh, res, f.obj, f.Operation, a.User)
	if err != nil {
		notChecked("%v", err)
		return
	}
	code, data, err := admission.Send(ctx, a.Reviewer, wh.ClientConfig, body, timeout)
	if err != nil {
		notChecked("the webhook did not answer the re-review: %v", err)
		return
	}
	if code != 200 {
		notChecked("the webhook answered the re-review with HTTP %d", code)
		return
	}
	resp, err := admission.Decode(data, uid)
	if err != nil {
		notChecked("the webhook's answer to the re-review: %v", err)
		return
	}
	switch {
	case !resp.Allowed:
		f.Verdict = Objected
		if resp.Result != nil {
			f.Message = resp.Result.Message
		}
	case wh.Mutating() && len(resp.Patch) > 0 && strings.TrimSpace(string(resp.Patch)) != "[]":
		f.Verdict, f.Patch = WouldMutate, string(resp.Patch)
	default:
		f.Verdict = NoObjection
	}
}

// reviewRequest builds the AdmissionReview the API server would have sent:
// the same kind, resource and operation, the object as it is now (for an
// UPDATE it is also the old object: the previous state is not kept), and
// dryRun set.
func reviewRequest(wh circuit.Webhook, res gvr, obj *unstructured.Unstructured, op, user string) ([]byte, types.UID, error) {
	raw, err := obj.MarshalJSON()
	if err != nil {
		return nil, "", fmt.Errorf("encode the object: %w", err)
	}
	gvk := obj.GroupVersionKind()
	return admission.Review{
		Versions:  wh.ReviewVersions,
		UIDPrefix: "tripswitch-audit-",
		Kind:      metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Resource:  metav1.GroupVersionResource(res.GroupVersionResource),
		Name:      obj.GetName(),
		Namespace: obj.GetNamespace(),
		Operation: admissionv1.Operation(op),
		User:      user,
		Object:    raw,
	}.Encode()
}

// ownMatchCondition reports whether a matchCondition is tripswitch's own.
func ownMatchCondition(c admissionregistrationv1.MatchCondition) bool {
	return c.Name == circuit.MatchConditionName
}

// NewAuditor returns an auditor whose API requests go through a copy of cfg
// limited to qps requests per second (burst at most burst), and counted.
func NewAuditor(cfg *rest.Config, qps float32, burst int, reviewer Reviewer) (*Auditor, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = qps, burst
	a := &Auditor{Reviewer: reviewer}
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counting{rt, &a.requests} })
	var err error
	if a.Dynamic, err = dynamic.NewForConfig(c); err != nil {
		return nil, fmt.Errorf("audit client: %w", err)
	}
	if a.Discovery, err = discovery.NewDiscoveryClientForConfig(c); err != nil {
		return nil, fmt.Errorf("audit discovery client: %w", err)
	}
	return a, nil
}

// counting counts the requests that reach the API server.
type counting struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// Requests is how many API requests the auditor has made (NewAuditor only).
func (a *Auditor) Requests() int64 { return a.requests.Load() }

// Resources are the listable resources the webhook's rules send CREATE or
// UPDATE of, as the audit resolves them through discovery: what an audit
// lists, and so what a remediation of it may patch or evict.
func (a *Auditor) Resources(rules []admissionregistrationv1.RuleWithOperations) ([]schema.GroupResource, []string, error) {
	res, notes, err := a.resources(rules)
	var out []schema.GroupResource
	for _, r := range res {
		out = append(out, r.GroupResource())
	}
	return out, notes, err
}

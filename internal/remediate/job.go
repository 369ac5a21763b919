package remediate

import (
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Job is `tripswitch remediate` as a Job in the cluster, where a
// Service-backed webhook's <service>.<namespace>.svc resolves, under a
// ServiceAccount whose ClusterRole allows what that run does and nothing
// more (Rules).
type Job struct {
	// Breaker is the breaker whose window is repaired.
	Breaker string
	// Target is the breaker's webhook.
	Target v1alpha1.Target
	// Resources are what the webhook's rules cover (the audit lists them).
	Resources []schema.GroupResource
	// NamespaceSelector: the webhook selects namespaces by label, so the
	// audit lists namespaces.
	NamespaceSelector bool
	// Apply, Roll and Label are the run's --apply, --roll and --label.
	Apply, Roll, Label bool
	// Args are the command's arguments after the breaker's name.
	Args []string
	// Image is the controller's image, which holds the command.
	Image string
	// Namespace holds the Job and its ServiceAccount.
	Namespace string
}

// Name is the Job's, its ServiceAccount's, ClusterRole's and binding's.
func (j Job) Name() string {
	n := "tripswitch-remediate-" + j.Breaker
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-.")
	}
	return n
}

// Rules are exactly what the run does: get the breaker (and, with --apply,
// write the window's counts into its status); get the webhook's
// configuration; list and get what the webhook covers, and list namespaces
// when it selects them; patch what it re-applies a patch to (or, with
// --label, labels), Pods excepted: a Pod is only ever evicted (--roll); and
// with --apply, create events on the objects and the breaker. Patches and
// evictions are dry-run first, which needs the same verbs. Discovery and
// the SelfSubjectReview that names the requester are every authenticated
// user's already.
func (j Job) Rules() ([]rbacv1.PolicyRule, error) {
	cfgResource := map[v1alpha1.TargetKind]string{
		v1alpha1.MutatingWebhookConfiguration:   "mutatingwebhookconfigurations",
		v1alpha1.ValidatingWebhookConfiguration: "validatingwebhookconfigurations",
	}[j.Target.Kind]
	if cfgResource == "" {
		return nil, fmt.Errorf("target.kind %q: want %s or %s", j.Target.Kind, v1alpha1.MutatingWebhookConfiguration, v1alpha1.ValidatingWebhookConfiguration)
	}
	if len(j.Resources) == 0 {
		return nil, fmt.Errorf("breaker %s: its webhook's rules cover no listable resource: there is nothing to remediate", j.Breaker)
	}
	breakerVerbs := []string{"get"}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"webhookcircuitbreakers"}, ResourceNames: []string{j.Breaker}, Verbs: breakerVerbs},
	}
	if j.Apply {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"webhookcircuitbreakers/status"}, ResourceNames: []string{j.Breaker}, Verbs: []string{"update"}})
	}
	rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{cfgResource}, ResourceNames: []string{j.Target.ConfigurationName}, Verbs: []string{"get"}})
	byGroup := map[string][]string{}
	pods := false
	for _, gr := range j.Resources {
		byGroup[gr.Group] = append(byGroup[gr.Group], gr.Resource)
		pods = pods || gr == (schema.GroupResource{Resource: "pods"})
	}
	for _, g := range slices.Sorted(mapKeys(byGroup)) {
		res := slices.Sorted(slices.Values(byGroup[g]))
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{g}, Resources: res, Verbs: []string{"get", "list"}})
		var patched []string
		for _, r := range res {
			if g != "" || r != "pods" || j.Label {
				patched = append(patched, r)
			}
		}
		if len(patched) > 0 {
			rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{g}, Resources: patched, Verbs: []string{"patch"}})
		}
	}
	if pods && j.Roll {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}})
	}
	if j.NamespaceSelector {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list"}})
	}
	if j.Apply {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create"}})
	}
	return rules, nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Manifest is the ServiceAccount, ClusterRole, ClusterRoleBinding and Job
// as YAML documents, for `kubectl apply -f -`.
func (j Job) Manifest() ([]byte, error) {
	rules, err := j.Rules()
	if err != nil {
		return nil, err
	}
	if j.Image == "" || j.Namespace == "" {
		return nil, fmt.Errorf("a remediation Job needs an image and a namespace")
	}
	name := j.Name()
	labels := map[string]string{"app.kubernetes.io/name": "tripswitch", "app.kubernetes.io/component": "remediate", "tripswitch.dev/breaker": j.Breaker}
	meta := func(namespaced bool) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Name: name, Labels: labels}
		if namespaced {
			m.Namespace = j.Namespace
		}
		return m
	}
	objs := []any{
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta(true)},
		&rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}, ObjectMeta: meta(false), Rules: rules},
		&rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"}, ObjectMeta: meta(false),
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: j.Namespace}}},
		&batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}, ObjectMeta: meta(true), Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](0),
			TTLSecondsAfterFinished: ptr.To[int32](7 * 24 * 3600),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				ServiceAccountName: name, RestartPolicy: corev1.RestartPolicyNever,
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				Containers: []corev1.Container{{
					Name: "remediate", Image: j.Image, ImagePullPolicy: corev1.PullIfNotPresent,
					Args: append([]string{"remediate", j.Breaker}, j.Args...),
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
						Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				}},
			}},
		}},
	}
	var out []byte
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, b...)
	}
	return out, nil
}

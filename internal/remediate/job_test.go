package remediate

import (
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

func ruleStrings(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, strings.Join(r.APIGroups, ",")+"|"+strings.Join(r.Resources, ",")+"|"+strings.Join(r.ResourceNames, ",")+"|"+strings.Join(r.Verbs, ","))
	}
	return out
}

// A remediation Job's ClusterRole is what that run does: a dry run reads and
// dry-runs its patches and evictions (the same verbs), --apply also writes
// events and the breaker's status; Pods are evicted, never patched, unless
// --label labels them; namespaces are listed only for a namespaceSelector.
func TestJobRulesAreWhatTheRunDoes(t *testing.T) {
	base := Job{Breaker: "hook", Target: v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "cfg", WebhookName: "w.example.com"},
		Resources: []schema.GroupResource{{Resource: "pods"}, {Group: "apps", Resource: "deployments"}, {Resource: "configmaps"}}}
	for _, tc := range []struct {
		name string
		mod  func(*Job)
		want []string
	}{
		{"dry run", func(*Job) {}, []string{
			"tripswitch.dev|webhookcircuitbreakers|hook|get",
			"admissionregistration.k8s.io|mutatingwebhookconfigurations|cfg|get",
			"|configmaps,pods||get,list", "|configmaps||patch",
			"apps|deployments||get,list", "apps|deployments||patch"}},
		{"apply, roll, namespaceSelector", func(j *Job) { j.Apply, j.Roll, j.NamespaceSelector = true, true, true }, []string{
			"tripswitch.dev|webhookcircuitbreakers|hook|get",
			"tripswitch.dev|webhookcircuitbreakers/status|hook|update",
			"admissionregistration.k8s.io|mutatingwebhookconfigurations|cfg|get",
			"|configmaps,pods||get,list", "|configmaps||patch",
			"apps|deployments||get,list", "apps|deployments||patch",
			"|pods/eviction||create", "|namespaces||list", "events.k8s.io|events||create"}},
		{"label, validating", func(j *Job) {
			j.Label, j.Target.Kind, j.Resources = true, v1alpha1.ValidatingWebhookConfiguration, []schema.GroupResource{{Resource: "pods"}}
		}, []string{
			"tripswitch.dev|webhookcircuitbreakers|hook|get",
			"admissionregistration.k8s.io|validatingwebhookconfigurations|cfg|get",
			"|pods||get,list", "|pods||patch"}},
	} {
		j := base
		tc.mod(&j)
		rules, err := j.Rules()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := ruleStrings(rules); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: rules\n%s\nwant\n%s", tc.name, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
	j := base
	j.Resources = nil
	if _, err := j.Rules(); err == nil {
		t.Error("a webhook that covers nothing: want an error")
	}
}

// The manifest is four objects: the ServiceAccount, the ClusterRole, its
// binding to that ServiceAccount, and the Job running remediate as it,
// locked down.
func TestJobManifest(t *testing.T) {
	j := Job{Breaker: "hook", Target: v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: "cfg"},
		Resources: []schema.GroupResource{{Resource: "configmaps"}}, Apply: true, Args: []string{"--apply=true"},
		Image: "registry.example/tripswitch:v1", Namespace: "ops"}
	b, err := j.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "---\n")
	var kinds []string
	for _, d := range docs {
		var o struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, o.Kind+" "+o.Metadata.Namespace+"/"+o.Metadata.Name)
	}
	want := "ServiceAccount ops/tripswitch-remediate-hook,ClusterRole /tripswitch-remediate-hook,ClusterRoleBinding /tripswitch-remediate-hook,Job ops/tripswitch-remediate-hook"
	if strings.Join(kinds, ",") != want {
		t.Errorf("objects %v, want %s", kinds, want)
	}
	for _, s := range []string{"- remediate\n", "- hook\n", "- --apply=true\n", "serviceAccountName: tripswitch-remediate-hook", "readOnlyRootFilesystem: true", "runAsNonRoot: true", "image: registry.example/tripswitch:v1"} {
		if !strings.Contains(docs[3], s) {
			t.Errorf("the Job has no %q:\n%s", s, docs[3])
		}
	}
}

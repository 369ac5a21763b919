package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/release"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// stripLabels removes what legitimately differs between the two installs:
// Helm's release labels.
func stripLabels(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		c := o.DeepCopy()
		unstructured.RemoveNestedField(c.Object, "metadata", "labels")
		out[key(c)] = c
	}
	return out
}

// TestChartMatchesKustomize: config/default and the chart with the same
// approved configurations produce the same objects, but for labels and the
// Namespace, which Helm leaves to `helm install --create-namespace`.
func TestChartMatchesKustomize(t *testing.T) {
	k := stripLabels(without(kustomizeBuild(t, "config/default"), "Namespace"))
	h := stripLabels(helmTemplate(t, chartValues()))
	var kk, hk []string
	for n := range k {
		kk = append(kk, n)
	}
	for n := range h {
		hk = append(hk, n)
	}
	slices.Sort(kk)
	slices.Sort(hk)
	if !slices.Equal(kk, hk) {
		t.Fatalf("different objects:\nkustomize: %v\nhelm:      %v", kk, hk)
	}
	for _, n := range kk {
		if !reflect.DeepEqual(k[n].Object, h[n].Object) {
			ky, _ := yaml.Marshal(k[n].Object)
			hy, _ := yaml.Marshal(h[n].Object)
			t.Errorf("%s differs:\n--- kustomize\n%s\n--- helm\n%s", n, ky, hy)
		}
	}
	if len(kk) < 15 {
		t.Fatalf("only %d objects: %v", len(kk), kk)
	}
}

// TestChartOptions: with nothing approved the webhook-configuration role has
// no rule at all (an empty resourceNames would mean every name); every
// optional part renders when enabled.
func TestChartOptions(t *testing.T) {
	defaults := helmTemplate(t, map[string]any{})
	for _, opt := range []string{"tripswitch-audit", "tripswitch-apiserver-signal", "tripswitch-remediation"} {
		if find(defaults, "ClusterRole", opt) != nil {
			t.Fatalf("%s is rendered without being enabled", opt)
		}
	}
	role := find(defaults, "ClusterRole", "tripswitch-webhook-configurations")
	if rules, _, _ := unstructured.NestedSlice(role.Object, "rules"); len(rules) != 0 {
		t.Fatalf("no approved configurations, yet rules %v", rules)
	}
	fallback := find(defaults, "ClusterRole", "tripswitch-fallback-policies")
	if rules, _, _ := unstructured.NestedSlice(fallback.Object, "rules"); len(rules) != 0 {
		t.Fatalf("no approved fallback policies, yet rules %v", rules)
	}
	objs := helmTemplate(t, map[string]any{
		"approvedWebhookConfigurations": map[string]any{"mutating": []any{"a"}},
		"approvedFallbackPolicies":      map[string]any{"validating": []any{"floor"}},
		"endpointProbing":               map[string]any{"enabled": true},
		"apiServerSignal":               map[string]any{"enabled": true},
		"maxOpenCircuits":               3,
		"apiServerRequestTimeout":       "90s",
		"audit": map[string]any{"enabled": true, "resources": []any{
			map[string]any{"apiGroups": []any{"apps"}, "resources": []any{"deployments"}},
		}},
		"metrics": map[string]any{"secure": false, "serviceMonitor": map[string]any{"enabled": true},
			"prometheusRule": map[string]any{"enabled": true}, "grafanaDashboard": map[string]any{"enabled": true}},
		"breakers": map[string]any{"a": map[string]any{
			"target":                        map[string]any{"kind": "MutatingWebhookConfiguration", "configurationName": "a", "webhookName": "w.example.com"},
			"allowAdmissionWithoutMutation": true,
		}},
	})
	for _, want := range [][2]string{
		{"ClusterRole", "tripswitch-endpoint-probing"}, {"ServiceMonitor", "tripswitch-metrics"},
		{"ClusterRole", "tripswitch-audit"}, {"ClusterRoleBinding", "tripswitch-audit"},
		{"ClusterRole", "tripswitch-apiserver-signal"}, {"ClusterRoleBinding", "tripswitch-apiserver-signal"},
		{"PrometheusRule", "tripswitch"}, {"ConfigMap", "tripswitch-dashboard"}, {"WebhookCircuitBreaker", "a"},
	} {
		if find(objs, want[0], want[1]) == nil {
			t.Errorf("%s %s not rendered", want[0], want[1])
		}
	}
	role = find(objs, "ClusterRole", "tripswitch-webhook-configurations")
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	if len(rules) != 1 || fmt.Sprint(rules[0].(map[string]any)["resourceNames"]) != "[a]" {
		t.Fatalf("rules for one approved configuration: %v", rules)
	}
	fallback = find(objs, "ClusterRole", "tripswitch-fallback-policies")
	rules, _, _ = unstructured.NestedSlice(fallback.Object, "rules")
	if data, _ := json.Marshal(rules); string(data) != `[{"apiGroups":["admissionregistration.k8s.io"],"resourceNames":["floor"],"resources":["validatingadmissionpolicies"],"verbs":["get","list","watch","patch"]}]` {
		t.Fatalf("rules for one approved fallback policy: %s", data)
	}
	auditRole := find(objs, "ClusterRole", "tripswitch-audit")
	auditRules, _, _ := unstructured.NestedSlice(auditRole.Object, "rules")
	if fmt.Sprint(auditRules) != "[map[apiGroups:[apps] resources:[deployments] verbs:[get list]] map[apiGroups:[] resources:[namespaces] verbs:[list]]]" {
		t.Fatalf("audit rules %v", auditRules)
	}
	deploy := find(objs, "Deployment", "tripswitch")
	args, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	if !strings.Contains(fmt.Sprint(args), "--max-open-circuits=3") {
		t.Fatalf("maxOpenCircuits not passed to the manager: %v", args)
	}
	if !strings.Contains(fmt.Sprint(args), "--apiserver-request-timeout=90s") {
		t.Fatalf("apiServerRequestTimeout not passed to the manager: %v", args)
	}
	if !strings.Contains(fmt.Sprint(args), "--metrics-secure=false") {
		t.Fatalf("metrics.secure=false not passed to the manager: %v", args)
	}
}

// TestChartLeaseTimings: the chart's leaderElection values reach the
// manager's three flags (the defaults when unset), and the schema refuses
// a value that is not a Go duration, naming the field.
func TestChartLeaseTimings(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		want   []string
	}{
		{map[string]any{}, []string{"--leader-election-lease-duration=15s", "--leader-election-renew-deadline=10s", "--leader-election-retry-period=2s"}},
		{map[string]any{"leaderElection": map[string]any{"leaseDuration": "5s", "renewDeadline": "3s", "retryPeriod": "1s"}},
			[]string{"--leader-election-lease-duration=5s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=1s"}},
	} {
		deploy := find(helmTemplate(t, tc.values), "Deployment", "tripswitch")
		containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		for _, want := range tc.want {
			if !slices.Contains(args, want) {
				t.Errorf("values %v: the manager's args %v lack %s", tc.values, args, want)
			}
		}
	}
	for _, field := range []string{"leaseDuration", "renewDeadline", "retryPeriod"} {
		err := helmTemplateErr(t, namespace, map[string]any{"leaderElection": map[string]any{field: "2 seconds"}})
		if err == nil || !strings.Contains(err.Error(), "/leaderElection/"+field) {
			t.Errorf("leaderElection.%s: \"2 seconds\": %v, want a schema error naming it", field, err)
		}
	}
}

// TestKustomizeComponents: config/default with every optional component
// builds and carries each component's role, bound to the ServiceAccount in
// the install namespace.
func TestKustomizeComponents(t *testing.T) {
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, repoPath(t, "config"))
	if err != nil {
		t.Fatal(err)
	}
	k := "resources:\n  - " + rel + "/default\ncomponents:\n"
	for _, c := range []string{"endpoint-probing", "audit", "apiserver-signal", "remediation"} {
		k += "  - " + rel + "/" + c + "\n"
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		t.Fatalf("kustomize build with every component: %v", err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	for _, name := range []string{"tripswitch-endpoint-probing", "tripswitch-audit", "tripswitch-apiserver-signal", "tripswitch-remediation"} {
		if find(objs, "ClusterRole", name) == nil {
			t.Errorf("ClusterRole %s missing", name)
		}
		b := find(objs, "ClusterRoleBinding", name)
		if b == nil {
			t.Errorf("ClusterRoleBinding %s missing", name)
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		if ns := subjects[0].(map[string]any)["namespace"]; ns != "tripswitch-system" {
			t.Errorf("%s binds the ServiceAccount in %v", name, ns)
		}
	}
}

// TestRemediationRBACMatchesKustomize: the chart's remediation values and
// the kustomize component config/remediation (with config/audit, as a
// breaker with spec.audit.remediate needs) grant the same narrow rules:
// patch on the listed resources, create on pods/eviction, nothing else.
func TestRemediationRBACMatchesKustomize(t *testing.T) {
	k := overlay(t, "resources:\n  - {{config}}/default\ncomponents:\n  - {{config}}/audit\n  - {{config}}/remediation\n")
	deployments := []any{map[string]any{"apiGroups": []any{"apps"}, "resources": []any{"deployments"}}}
	values := chartValues()
	values["audit"] = map[string]any{"enabled": true, "resources": deployments}
	values["remediation"] = map[string]any{"enabled": true, "resources": deployments, "roll": true}
	h := helmTemplate(t, values)
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
		for _, name := range []string{"tripswitch-remediation", "tripswitch-audit"} {
			ko, ho := find(k, kind, name), find(h, kind, name)
			if ko == nil || ho == nil {
				t.Fatalf("%s %s: in kustomize %v, in helm %v", kind, name, ko != nil, ho != nil)
			}
			ko, ho = ko.DeepCopy(), ho.DeepCopy()
			unstructured.RemoveNestedField(ko.Object, "metadata", "labels")
			unstructured.RemoveNestedField(ho.Object, "metadata", "labels")
			if !reflect.DeepEqual(ko.Object, ho.Object) {
				ky, _ := yaml.Marshal(ko.Object)
				hy, _ := yaml.Marshal(ho.Object)
				t.Errorf("%s %s differs:\n--- kustomize\n%s\n--- helm\n%s", kind, name, ky, hy)
			}
		}
	}
	role := find(helmTemplate(t, values), "ClusterRole", "tripswitch-remediation")
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	if fmt.Sprint(rules) != "[map[apiGroups:[apps] resources:[deployments] verbs:[patch]] map[apiGroups:[] resources:[pods/eviction] verbs:[create]]]" {
		t.Fatalf("remediation rules %v", rules)
	}
	values["remediation"] = map[string]any{"enabled": true, "resources": deployments}
	role = find(helmTemplate(t, values), "ClusterRole", "tripswitch-remediation")
	if rules, _, _ := unstructured.NestedSlice(role.Object, "rules"); len(rules) != 1 {
		t.Fatalf("without roll, rules %v (no eviction)", rules)
	}
}

// Installed into a namespace of another name (helm --namespace), every
// namespaced object, every binding's ServiceAccount and the admission
// guard's user follow it: nothing names tripswitch-system.
func TestChartInAnyNamespace(t *testing.T) {
	const ns = "platform-guards"
	objs := helmTemplateIn(t, ns, map[string]any{
		"approvedWebhookConfigurations": map[string]any{"mutating": []any{"a"}},
		"apiServerSignal":               map[string]any{"enabled": true},
		"audit": map[string]any{"enabled": true, "resources": []any{
			map[string]any{"apiGroups": []any{"apps"}, "resources": []any{"deployments"}},
		}},
	})
	for _, o := range objs {
		if o.GetNamespace() != "" && o.GetNamespace() != ns {
			t.Errorf("%s %s in namespace %s, want %s", o.GetKind(), o.GetName(), o.GetNamespace(), ns)
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			if m := s.(map[string]any); m["kind"] == "ServiceAccount" && m["namespace"] != ns {
				t.Errorf("%s %s binds a ServiceAccount in %v, want %s", o.GetKind(), o.GetName(), m["namespace"], ns)
			}
		}
		if data, err := o.MarshalJSON(); err == nil && strings.Contains(string(data), "tripswitch-system") {
			t.Errorf("%s %s still names tripswitch-system", o.GetKind(), o.GetName())
		}
	}
	want := []string{"tripswitch-guard-mutating: system:serviceaccount:" + ns + ":tripswitch",
		"tripswitch-guard-validating: system:serviceaccount:" + ns + ":tripswitch"}
	if got := guardedUsers(t, objs); !slices.Equal(got, want) {
		t.Errorf("the admission guard constrains %v, want %v", got, want)
	}
}

// A mistake in the values is named by the chart's schema, not a raw
// unmarshal error; the NOTES say how to approve a first webhook and how to
// uninstall safely.
func TestChartValuesSchemaAndNotes(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"approvedWebhookConfigurations": map[string]any{"mutating": "sidecar-injector"}}, "/approvedWebhookConfigurations/mutating': got string, want array"},
		{map[string]any{"approvedWebhookConfigurations": map[string]any{"validating": []any{"policy", "{Bad_Name}"}}}, "/approvedWebhookConfigurations/validating/1"},
		{map[string]any{"approvedWebhookConfigurations": map[string]any{"mutating": []any{"Sidecar-Injector"}}}, "/approvedWebhookConfigurations/mutating/0"},
		{map[string]any{"approvedFallbackPolicies": map[string]any{"mutating": []any{"Bad_Name"}}}, "/approvedFallbackPolicies/mutating/0"},
		{map[string]any{"approvedFallbackPolicies": map[string]any{"validating": "require-x"}}, "/approvedFallbackPolicies/validating': got string, want array"},
		{map[string]any{"replicas": 0}, "replicas"},
		{map[string]any{"apiServerRequestTimeout": "a minute"}, "/apiServerRequestTimeout"},
		{map[string]any{"leaderElection": map[string]any{"leaseDuration": "fifteen"}}, "/leaderElection/leaseDuration"},
		{map[string]any{"audit": map[string]any{"enabled": true, "resources": []any{map[string]any{"resources": []any{"deployments"}}}}}, "apiGroups"},
		{map[string]any{"apiserverSignal": map[string]any{"enabled": true}}, "apiserverSignal"},
		{map[string]any{"remediation": map[string]any{"enabled": true}}, "remediation.enabled needs remediation.resources"},
		{map[string]any{"remediation": map[string]any{"enabled": true, "roll": "yes"}}, "/remediation/roll"},
		{map[string]any{"breakers": map[string]any{"a": map[string]any{"target": map[string]any{"kind": "Deployment", "configurationName": "a", "webhookName": "w"}}}}, "/breakers/a/target/kind"},
	} {
		err := helmTemplateErr(t, namespace, tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %v: %v, want a schema error naming %s", tc.values, err, tc.want)
		}
	}
	notes := helmNotes(t, map[string]any{"approvedWebhookConfigurations": map[string]any{"mutating": []any{"sidecar-injector"}}})
	for _, want := range []string{"sidecar-injector", "allowAdmissionWithoutMutation: true", "runs `tripswitch standdown`", "tripswitch standdown --namespace " + namespace + " --force", "helm uninstall --no-hooks"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
}

// TestChartUninstallHook: the pre-delete hook runs `tripswitch standdown`
// for this release's Deployment, in the release namespace, as the
// controller's ServiceAccount, naming helm uninstall as who restored, and
// the only rights it adds are scaling that one Deployment and deleting the
// leader Lease. Turned off, NOTES say what to run instead.
func TestChartUninstallHook(t *testing.T) {
	const ns = "platform-guards"
	acc, err := helmRender(t, ns, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	var hooks []*unstructured.Unstructured
	for _, h := range acc.Hooks() {
		ha, err := release.NewHookAccessor(h)
		if err != nil {
			t.Fatal(err)
		}
		hooks = append(hooks, decode(t, []byte(ha.Manifest()))...)
	}
	if len(hooks) != 3 {
		t.Fatalf("%d hook objects, want a Role, a RoleBinding and a Job", len(hooks))
	}
	for _, o := range hooks {
		if o.GetAnnotations()["helm.sh/hook"] != "pre-delete" || o.GetNamespace() != ns {
			t.Errorf("%s: hook %q in %q, want pre-delete in %s", key(o), o.GetAnnotations()["helm.sh/hook"], o.GetNamespace(), ns)
		}
	}
	job := find(hooks, "Job", "tripswitch-standdown")
	if job == nil {
		t.Fatal("no Job tripswitch-standdown")
	}
	sa, _, _ := unstructured.NestedString(job.Object, "spec", "template", "spec", "serviceAccountName")
	containers, _, _ := unstructured.NestedSlice(job.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	want := []string{"standdown", "--namespace=" + ns, "--deployment=tripswitch", "--lease=tripswitch.dev", "--timeout=1m", "--by=helm uninstall"}
	// An image that never pulls must fail the hook well before Helm's
	// default --timeout of 5m, and a stand-down must fit in it.
	if deadline, _, _ := unstructured.NestedFieldNoCopy(job.Object, "spec", "activeDeadlineSeconds"); fmt.Sprint(deadline) != "120" {
		t.Errorf("the hook's activeDeadlineSeconds is %v, want 120: under Helm's default --timeout of 5m, with room for the 1m lease wait", deadline)
	}
	if sa != serviceAccount || strings.Join(args, " ") != strings.Join(want, " ") {
		t.Errorf("job runs %v as %s, want %v as %s", args, sa, want, serviceAccount)
	}
	role := find(hooks, "Role", "tripswitch-standdown")
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	if data, _ := json.Marshal(rules); string(data) != `[{"apiGroups":["apps"],"resourceNames":["tripswitch"],"resources":["deployments/scale"],"verbs":["get","patch"]},`+
		`{"apiGroups":["coordination.k8s.io"],"resourceNames":["tripswitch.dev"],"resources":["leases"],"verbs":["delete"]}]` {
		t.Errorf("the hook's Role grants %s", data)
	}
	off, err := helmRender(t, ns, map[string]any{"uninstallHook": map[string]any{"enabled": false}})
	if err != nil {
		t.Fatal(err)
	}
	if len(off.Hooks()) != 0 || !strings.Contains(off.Notes(), "tripswitch standdown --namespace "+ns+" --deployment tripswitch") {
		t.Errorf("hook off: %d hooks, NOTES:\n%s", len(off.Hooks()), off.Notes())
	}
}

// guardedUsers returns the users the admission guard constrains: the
// ServiceAccounts named by the ClusterRoleBindings its policy bindings
// select as params (nil when a policy binding selects nothing, or when a
// policy's binding is missing).
func guardedUsers(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	var users []string
	policies := ofKind(objs, "ValidatingAdmissionPolicy")
	if len(policies) != 2 {
		t.Fatalf("%d admission guard policies, want 2", len(policies))
	}
	for _, p := range policies {
		var binding *unstructured.Unstructured
		for _, b := range ofKind(objs, "ValidatingAdmissionPolicyBinding") {
			if name, _, _ := unstructured.NestedString(b.Object, "spec", "policyName"); name == p.GetName() {
				binding = b
			}
		}
		if binding == nil {
			t.Errorf("no binding of policy %s", p.GetName())
			return nil
		}
		match, _, _ := unstructured.NestedStringMap(binding.Object, "spec", "paramRef", "selector", "matchLabels")
		if len(match) == 0 {
			t.Errorf("binding %s selects no params", binding.GetName())
			return nil
		}
		for _, crb := range ofKind(objs, "ClusterRoleBinding") {
			l := crb.GetLabels()
			selected := true
			for k, v := range match {
				selected = selected && l[k] == v
			}
			if !selected {
				continue
			}
			subjects, _, _ := unstructured.NestedSlice(crb.Object, "subjects")
			for _, s := range subjects {
				m := s.(map[string]any)
				users = append(users, fmt.Sprintf("%s: system:serviceaccount:%s:%s", p.GetName(), m["namespace"], m["name"]))
			}
		}
	}
	slices.Sort(users)
	return users
}

// TestKustomizeOverlayMatchesChart: an overlay of config/default with
// `namespace: platform-guard` and `namePrefix: guard-` renders what the
// chart renders for release "guard" in platform-guard with the
// ServiceAccount guard-tripswitch: every binding's subject, the events RBAC
// (cluster-scoped, so no namespace moves it) and the admission guard's
// constrained user follow the overlay; nothing names tripswitch-system.
func TestKustomizeOverlayMatchesChart(t *testing.T) {
	const ns, sa = "platform-guard", "guard-tripswitch"
	k := overlay(t, "namespace: "+ns+"\nnamePrefix: guard-\nresources:\n  - {{config}}/default\n")
	values := chartValues()
	values["serviceAccount"] = map[string]any{"name": sa}
	acc, err := helmRenderRelease(t, "guard", ns, values)
	if err != nil {
		t.Fatal(err)
	}
	h := decode(t, []byte(acc.Manifest()))

	for _, o := range k {
		if data, _ := o.MarshalJSON(); strings.Contains(string(data), "tripswitch-system") {
			t.Errorf("the overlay's %s still names tripswitch-system", key(o))
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			if m := s.(map[string]any); m["namespace"] != ns || m["name"] != sa {
				t.Errorf("the overlay's %s binds %v/%v, want %s/%s", key(o), m["namespace"], m["name"], ns, sa)
			}
		}
	}
	want := []string{"guard-tripswitch-guard-mutating: system:serviceaccount:" + ns + ":" + sa,
		"guard-tripswitch-guard-validating: system:serviceaccount:" + ns + ":" + sa}
	if got := guardedUsers(t, k); !slices.Equal(got, want) {
		t.Errorf("the overlay's admission guard constrains %v, want %v", got, want)
	}
	if got := guardedUsers(t, h); !slices.Equal(got, want) {
		t.Errorf("the chart's admission guard constrains %v, want %v", got, want)
	}
	for _, name := range []string{"guard-tripswitch-events"} {
		for _, kind := range []string{"ClusterRole", "ClusterRoleBinding"} {
			if find(k, kind, name) == nil {
				t.Errorf("the overlay has no %s %s", kind, name)
			}
		}
	}

	// The optional components' bindings follow the overlay too.
	withComponents := overlay(t, "namespace: "+ns+"\nnamePrefix: guard-\nresources:\n  - {{config}}/default\n"+
		"components:\n  - {{config}}/endpoint-probing\n  - {{config}}/audit\n  - {{config}}/apiserver-signal\n  - {{config}}/remediation\n")
	bound := 0
	for _, o := range withComponents {
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			bound++
			if m := s.(map[string]any); m["namespace"] != ns || m["name"] != sa {
				t.Errorf("with the components, %s binds %v/%v, want %s/%s", key(o), m["namespace"], m["name"], ns, sa)
			}
		}
	}
	if bound < 8 {
		t.Errorf("with the components, only %d subjects", bound)
	}

	// Beyond those: the same objects, as in TestChartMatchesKustomize.
	ko, ho := stripLabels(without(k, "Namespace")), stripLabels(h)
	var kk, hk []string
	for n := range ko {
		kk = append(kk, n)
	}
	for n := range ho {
		hk = append(hk, n)
	}
	slices.Sort(kk)
	slices.Sort(hk)
	if !slices.Equal(kk, hk) {
		t.Fatalf("different objects:\nkustomize: %v\nhelm:      %v", kk, hk)
	}
	for _, n := range kk {
		if !reflect.DeepEqual(ko[n].Object, ho[n].Object) {
			ky, _ := yaml.Marshal(ko[n].Object)
			hy, _ := yaml.Marshal(ho[n].Object)
			t.Errorf("%s differs:\n--- kustomize\n%s\n--- helm\n%s", n, ky, hy)
		}
	}
}

// TestTwoReleasesDoNotCollide: two releases of the chart (each in its own
// namespace) share no cluster-scoped object but the CRD: the admission
// guard's policies and bindings are named after the release too.
func TestTwoReleasesDoNotCollide(t *testing.T) {
	names := map[string]string{}
	for _, rel := range []string{"alpha", "beta"} {
		acc, err := helmRenderRelease(t, rel, rel+"-system", chartValues())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range decode(t, []byte(acc.Manifest())) {
			if o.GetNamespace() != "" || o.GetKind() == "CustomResourceDefinition" {
				continue
			}
			k := o.GetKind() + "/" + o.GetName()
			if other, ok := names[k]; ok {
				t.Errorf("releases %s and %s both render %s", other, rel, k)
			}
			names[k] = rel
			if o.GetKind() == "ValidatingAdmissionPolicyBinding" {
				if p, _, _ := unstructured.NestedString(o.Object, "spec", "policyName"); !strings.HasPrefix(p, rel+"-tripswitch-guard-") {
					t.Errorf("release %s's %s binds policy %s", rel, o.GetName(), p)
				}
			}
		}
	}
	if names["ValidatingAdmissionPolicy/alpha-tripswitch-guard-mutating"] != "alpha" {
		t.Errorf("no policy alpha-tripswitch-guard-mutating: %v", names)
	}
}

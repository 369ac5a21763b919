package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/check"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/ownersim"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestMain lets a test run this package's main as a process of its own
// (TRIPSWITCH_TEST_MAIN=1), so that its exit code is what is checked.
func TestMain(m *testing.M) {
	if os.Getenv("TRIPSWITCH_TEST_MAIN") == "1" {
		os.Args = append([]string{"tripswitch"}, strings.Fields(os.Getenv("TRIPSWITCH_TEST_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs `tripswitch args...` as a process and returns its stdout,
// stderr and exit code.
func runMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TRIPSWITCH_TEST_MAIN=1", "TRIPSWITCH_TEST_ARGS="+strings.Join(args, " "))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run tripswitch %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// TestCheckFindsEveryBrokenBreaker runs `tripswitch check` as a process
// against a real API server holding a deliberately broken set of breakers,
// each with one thing wrong, and one that is fine.
func TestCheckFindsEveryBrokenBreaker(t *testing.T) {
	env, kubeconfig := cluster(t)
	ctx, c := t.Context(), env.Client
	server, err := slowhook.Start() // the fine breaker's webhook, for --probe
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close() })
	hook := func(name string, policy admissionregistrationv1.FailurePolicyType) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name: name, ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/")},
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
			FailurePolicy: ptr.To(policy),
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tripswitch.test/never": "true"}},
		}
	}
	served := hook("w1.example.com", admissionregistrationv1.Fail)
	served.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To(server.URL + "/mutate"), CABundle: server.CABundle}
	for name, hooks := range map[string][]admissionregistrationv1.MutatingWebhook{
		"good":       {served, hook("w2.example.com", admissionregistrationv1.Fail), hook("w3.example.com", admissionregistrationv1.Fail), hook("w4.example.com", admissionregistrationv1.Fail)},
		"ignored":    {hook("w.example.com", admissionregistrationv1.Ignore)},
		"unapproved": {hook("w.example.com", admissionregistrationv1.Fail)},
	} {
		if err := c.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: hooks}); err != nil {
			t.Fatal(err)
		}
	}
	// What the chart renders for approvedWebhookConfigurations.mutating={good,ignored}.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "tripswitch-webhook-configurations"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{admissionregistrationv1.GroupName}, Resources: []string{"mutatingwebhookconfigurations"},
		ResourceNames: []string{"good", "ignored"}, Verbs: []string{"get", "list", "watch", "patch"},
	}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tripswitch-webhook-configurations"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "tripswitch", Namespace: "tripswitch-system"}}}
	for _, obj := range []client.Object{role, binding} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	breaker := func(name, cfg, webhook string, mutate func(*v1alpha1.WebhookCircuitBreaker)) *v1alpha1.WebhookCircuitBreaker {
		t.Helper()
		b := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: cfg, WebhookName: webhook},
			AllowAdmissionWithoutMutation: true, OpenAction: v1alpha1.OpenActionBypass,
		}}
		if mutate != nil {
			mutate(b)
		}
		if err := c.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	setStatus := func(b *v1alpha1.WebhookCircuitBreaker, s v1alpha1.WebhookCircuitBreakerStatus) {
		t.Helper()
		b.Status = s
		if err := c.Status().Update(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	healthy := v1alpha1.WebhookCircuitBreakerStatus{Probe: v1alpha1.ProbeStatus{LastResult: string(probe.Healthy), LastReason: "200 OK"}}

	setStatus(breaker("fine", "good", "w1.example.com", nil), healthy)
	orig := breaker("orig", "good", "w2.example.com", nil)
	setStatus(orig, healthy)
	for orig.CreationTimestamp.Add(time.Second).After(time.Now()) { // the copy is newer
		time.Sleep(100 * time.Millisecond)
	}
	setStatus(breaker("a-copy", "good", "w2.example.com", nil), healthy)
	setStatus(breaker("typo", "goood", "w1.example.com", nil), healthy)
	setStatus(breaker("not-approved", "unapproved", "w.example.com", nil), healthy)
	setStatus(breaker("already-ignore", "ignored", "w.example.com", func(b *v1alpha1.WebhookCircuitBreaker) { b.Spec.OpenAction = v1alpha1.OpenActionIgnore }), healthy)
	setStatus(breaker("signal", "good", "w3.example.com", func(b *v1alpha1.WebhookCircuitBreaker) {
		b.Spec.OpenAction = v1alpha1.OpenActionIgnore
		b.Spec.APIServerSignal = &v1alpha1.APIServerSignalSpec{Enabled: true}
	}), healthy)
	setStatus(breaker("unprobeable", "good", "w4.example.com", nil), v1alpha1.WebhookCircuitBreakerStatus{
		Probe: v1alpha1.ProbeStatus{LastResult: string(probe.Unknown), LastReason: "caBundle holds no PEM certificate"},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionProbeUnsupported, Status: metav1.ConditionTrue, Reason: policy.ReasonProbeUnsupported,
			Message: "caBundle holds no PEM certificate", LastTransitionTime: metav1.Now()}},
	})

	stdout, stderr, code := runMain(t, "check", "--kubeconfig", kubeconfig, "-o", "json")
	if code != 1 || !strings.Contains(stderr, "6 problems found") {
		t.Fatalf("check exited %d, stderr %q; want 1 and 6 problems\n%s", code, stderr, stdout)
	}
	var rep check.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("check -o json: %v\n%s", err, stdout)
	}
	if rep.Problems != 6 || len(rep.Breakers) != 8 || rep.Controller != "system:serviceaccount:tripswitch-system:tripswitch" {
		t.Fatalf("report: %d problems, %d breakers, controller %s; want 6, 8, the default ServiceAccount\n%s", rep.Problems, len(rep.Breakers), rep.Controller, stdout)
	}
	byName := map[string]check.Breaker{}
	for _, b := range rep.Breakers {
		byName[b.Name] = b
	}
	for name, want := range map[string]struct {
		check, says string
	}{
		"a-copy":         {check.CheckConflict, "breaker orig names the same webhook and is older"},
		"typo":           {check.CheckTarget, "goood not found"},
		"not-approved":   {check.CheckApproval, "approved: good, ignored"},
		"already-ignore": {check.CheckFailOpen, "already Ignore"},
		"signal":         {check.CheckPermission, "/metrics"},
		"unprobeable":    {check.CheckProbe, "caBundle holds no PEM certificate"},
	} {
		b := byName[name]
		var problems []check.Finding
		for _, f := range b.Findings {
			if f.Result == check.Problem {
				problems = append(problems, f)
			}
		}
		if len(problems) != 1 || problems[0].Check != want.check || !strings.Contains(problems[0].Message, want.says) {
			t.Errorf("%s: problems %+v, want one %s problem saying %q", name, problems, want.check, want.says)
		}
	}
	if w := byName["typo"].Findings; !strings.Contains(w[0].Message, "did you mean good?") {
		t.Errorf("typo: %q does not suggest good", w[0].Message)
	}
	for _, name := range []string{"fine", "orig"} {
		if b := byName[name]; b.Worst() == check.Problem {
			t.Errorf("%s: %+v, want no problem", name, b.Findings)
		}
	}
	// The chain of webhooks that match the same requests fits the deadline.
	if f := byName["fine"].Findings; !slices.ContainsFunc(f, func(f check.Finding) bool {
		return f.Check == check.CheckDeadline && f.Result == check.OK && strings.Contains(f.Message, "within the API server's request deadline of 1m0s")
	}) {
		t.Errorf("fine: no deadline finding within 1m0s: %+v", f)
	}

	var table bytes.Buffer
	if err := dispatch([]string{"check", "--kubeconfig", kubeconfig}, &table); !errors.Is(err, errProblems) || !strings.Contains(table.String(), "did you mean good?") {
		t.Errorf("check (table): %v, want %v\n%s", err, errProblems, table.String())
	}
	t.Logf("tripswitch check:\n%s", table.String())

	// Only the fine breaker, probed from here too: exit 0, and a table.
	stdout, stderr, code = runMain(t, "check", "--kubeconfig", kubeconfig, "--probe", "fine")
	if code != 0 || !strings.Contains(stdout, "1 breakers checked") || !strings.Contains(stdout, "0 problems") || !strings.Contains(stdout, "probed from here: healthy") {
		t.Fatalf("check fine: exit %d, stderr %q\n%s", code, stderr, stdout)
	}
	if _, _, code := runMain(t, "check", "--kubeconfig", kubeconfig, "no-such-breaker"); code != 1 {
		t.Errorf("check of a breaker that does not exist exited %d, want 1", code)
	}
}

// TestCheckSaysWhoOwnsTheTarget runs `tripswitch check` against
// configurations that controllers own, each written by a simulator of its
// pattern with the project's field manager: a problem where the owner undoes
// the breaker's open (with the owner's own fail-open setting), a warning
// where it may, nothing where it keeps the open or touches only the caBundle
// or where only people's tools wrote.
func TestCheckSaysWhoOwnsTheTarget(t *testing.T) {
	env, kubeconfig := cluster(t)
	ctx, c := t.Context(), env.Client
	hook := func(name string) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name: name, ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/" + name), CABundle: []byte("ca")},
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tripswitch.test/never": "true"}},
		}
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kyverno:admission-controller:webhook"}}
	if err := c.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		name, manager string
		pattern       ownersim.Pattern
		installer     bool
		ownerRef      bool
		// again: the owner writes again a second later, as Argo CD syncs.
		again bool
	}{
		{name: "kyverno-resource-validating-webhook-cfg", manager: "kyverno", pattern: ownersim.WholeUpdate, ownerRef: true},
		{name: "platform-webhooks", manager: "platform-operator", pattern: ownersim.ApplyForce},
		{name: "tenant-webhooks", manager: "tenant-operator", pattern: ownersim.WholeUpdate, ownerRef: true},
		{name: "cert-injected", manager: "cert-manager-cainjector", pattern: ownersim.CABundleApply, installer: true},
		{name: "hand-made", manager: "kubectl-client-side-apply", pattern: ownersim.WholeUpdate},
		{name: "argocd-webhooks", manager: "argocd-controller", pattern: ownersim.ClientSideApply, again: true},
	} {
		want := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: o.name},
			Webhooks: []admissionregistrationv1.MutatingWebhook{hook("w.example.com")}}
		if o.ownerRef {
			want.OwnerReferences = []metav1.OwnerReference{{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: role.Name, UID: role.UID}}
		}
		owner, err := ownersim.New(env.Config, env.Scheme, o.pattern, o.manager, want)
		if err != nil {
			t.Fatal(err)
		}
		if !o.installer {
			if err := owner.Create(ctx); err != nil {
				t.Fatal(err)
			}
			if o.again { // managedFields keep seconds: a second later it came back
				time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
				owner.SetCABundle([]byte("synced-ca"))
				if err := owner.Write(ctx); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		if err := owner.CreateAs(ctx, "helm"); err != nil {
			t.Fatal(err)
		}
		owner.SetCABundle([]byte("injected-ca"))
		if err := owner.Write(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []struct {
		name, cfg string
		action    v1alpha1.OpenAction
	}{
		{"kyverno", "kyverno-resource-validating-webhook-cfg", v1alpha1.OpenActionIgnore},
		{"platform-ignore", "platform-webhooks", v1alpha1.OpenActionIgnore},
		{"platform-bypass", "platform-webhooks", v1alpha1.OpenActionBypass},
		{"tenant", "tenant-webhooks", v1alpha1.OpenActionBypass},
		{"cert-injected", "cert-injected", v1alpha1.OpenActionIgnore},
		{"hand-made", "hand-made", v1alpha1.OpenActionIgnore},
		{"argocd-bypass", "argocd-webhooks", v1alpha1.OpenActionBypass},
		{"argocd-ignore", "argocd-webhooks", v1alpha1.OpenActionIgnore},
	} {
		wcb := &v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: b.name}, Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: b.cfg, WebhookName: "w.example.com"},
			AllowAdmissionWithoutMutation: true, OpenAction: b.action,
		}}
		if err := c.Create(ctx, wcb); err != nil {
			t.Fatal(err)
		}
	}

	stdout, _, _ := runMain(t, "check", "--kubeconfig", kubeconfig, "-o", "json")
	var rep check.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("check -o json: %v\n%s", err, stdout)
	}
	for name, want := range map[string]struct {
		result check.Result
		says   []string
	}{
		"kyverno":         {check.Problem, []string{"Kyverno (field manager kyverno)", "undoes openAction Ignore", "--forceFailurePolicyIgnore"}},
		"platform-ignore": {check.Warning, []string{"field manager platform-operator", "server-side apply", "applying with force", "Use openAction Bypass"}},
		"platform-bypass": {check.OK, []string{"openAction Bypass holds"}},
		"tenant":          {check.Warning, []string{"field manager tenant-operator", "if it writes the whole entry"}},
		"cert-injected":   {check.OK, []string{"cert-manager (field manager cert-manager-cainjector) writes only the caBundle"}},
		"hand-made":       {check.OK, []string{"kubectl-client-side-apply is a person's tool"}},
		// Client-side apply merges by key: it keeps tripswitch's
		// matchCondition, and puts back the failurePolicy its manifest sets.
		"argocd-bypass": {check.OK, []string{"Argo CD (field manager argocd-controller)", "openAction Bypass holds"}},
		"argocd-ignore": {check.Problem, []string{"Argo CD (field manager argocd-controller)", "undoes openAction Ignore"}},
	} {
		var found *check.Finding
		for _, b := range rep.Breakers {
			for i, f := range b.Findings {
				if b.Name == name && f.Check == check.CheckOwner {
					found = &b.Findings[i]
				}
			}
		}
		if found == nil || found.Result != want.result {
			t.Errorf("%s: owner finding %+v, want %s", name, found, want.result)
			continue
		}
		for _, s := range want.says {
			if !strings.Contains(found.Message, s) {
				t.Errorf("%s: %q lacks %q", name, found.Message, s)
			}
		}
	}
	var table bytes.Buffer
	_ = dispatch([]string{"check", "--kubeconfig", kubeconfig}, &table)
	var owned []string
	for _, line := range strings.Split(table.String(), "\n") {
		if strings.Contains(line, " owner ") || strings.HasPrefix(line, "BREAKER") || strings.Contains(line, "breakers checked") {
			owned = append(owned, line)
		}
	}
	t.Logf("tripswitch check, the owner findings:\n%s", strings.Join(owned, "\n"))
}

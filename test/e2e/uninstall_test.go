package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/breakglass"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// kubelet plays the node for one namespace: it runs the controller binary
// as the Deployment's process while the Deployment exists with replicas
// above zero (and stops it with SIGTERM, as a pod's termination does,
// otherwise), and runs each Job's container as a process, then records its
// outcome in the Job's status as the Job controller would. Each process
// authenticates with a token of the pod's ServiceAccount.
type kubelet struct {
	t          *testing.T
	cs         kubernetes.Interface
	cfg        *rest.Config
	ns, deploy string

	mu         sync.Mutex
	controller *exec.Cmd
	exited     chan struct{}
	jobsRun    map[string]bool
	logs       []string
}

func (k *kubelet) run(ctx context.Context) {
	defer k.stopController()
	for ctx.Err() == nil {
		k.syncDeployment(ctx)
		k.syncJobs(ctx)
		time.Sleep(200 * time.Millisecond)
	}
}

// kubeconfig writes a kubeconfig that authenticates as a ServiceAccount.
func (k *kubelet) kubeconfig(ctx context.Context, sa string) (string, error) {
	tr, err := k.cs.CoreV1().ServiceAccounts(k.ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s: %w", sa, err)
	}
	return kubeconfigFile(k.t, &rest.Config{Host: k.cfg.Host, TLSClientConfig: rest.TLSClientConfig{CAData: k.cfg.CAData}, BearerToken: tr.Status.Token}), nil
}

func (k *kubelet) syncDeployment(ctx context.Context) {
	d, err := k.cs.AppsV1().Deployments(k.ns).Get(ctx, k.deploy, metav1.GetOptions{})
	want := err == nil && d.DeletionTimestamp == nil && ptr.Deref(d.Spec.Replicas, 1) > 0
	k.mu.Lock()
	running := k.controller != nil
	k.mu.Unlock()
	switch {
	case want && !running:
		spec := d.Spec.Template.Spec
		kc, err := k.kubeconfig(ctx, spec.ServiceAccountName)
		if err != nil {
			k.t.Error(err)
			return
		}
		// The container's own arguments; then what differs off a node.
		args := append(append([]string(nil), spec.Containers[0].Args...),
			"--metrics-bind-address=0", "--health-probe-bind-address=0", "--leader-election-namespace="+k.ns)
		cmd := k.command("controller", kc, args)
		if err := cmd.Start(); err != nil {
			k.t.Error(err)
			return
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		k.mu.Lock()
		k.controller, k.exited = cmd, exited
		k.mu.Unlock()
	case !want && running:
		k.stopController()
	}
}

// stopController terminates the pod: SIGTERM, then SIGKILL after the
// chart's 30 s grace period.
func (k *kubelet) stopController() {
	k.mu.Lock()
	cmd, exited := k.controller, k.exited
	k.controller = nil
	k.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (k *kubelet) running() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.controller != nil
}

func (k *kubelet) syncJobs(ctx context.Context) {
	jobs, err := k.cs.BatchV1().Jobs(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, j := range jobs.Items {
		key := string(j.UID)
		k.mu.Lock()
		done := k.jobsRun[key]
		k.jobsRun[key] = true
		k.mu.Unlock()
		if done {
			continue
		}
		go k.runJob(ctx, j)
	}
}

func (k *kubelet) runJob(ctx context.Context, j batchv1.Job) {
	spec := j.Spec.Template.Spec
	kc, err := k.kubeconfig(ctx, spec.ServiceAccountName)
	if err != nil {
		k.t.Error(err)
		return
	}
	start := metav1.Now()
	cmd := k.command("job-"+j.Name, kc, spec.Containers[0].Args)
	runErr := cmd.Run()
	end := metav1.Now()
	if end.Equal(&start) {
		end = metav1.NewTime(start.Add(time.Second))
	}
	status := batchv1.JobStatus{StartTime: &start, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0),
		UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{}}
	if runErr == nil {
		status.Succeeded, status.CompletionTime = 1, &end
		status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastProbeTime: end, LastTransitionTime: end, Reason: "CompletionsReached"},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastProbeTime: end, LastTransitionTime: end, Reason: "CompletionsReached"},
		}
	} else {
		status.Failed = 1
		status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastProbeTime: end, LastTransitionTime: end, Reason: "BackoffLimitExceeded"},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastProbeTime: end, LastTransitionTime: end, Reason: "BackoffLimitExceeded", Message: runErr.Error()},
		}
	}
	j.Status = status
	if _, err := k.cs.BatchV1().Jobs(k.ns).UpdateStatus(ctx, &j, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
		k.t.Errorf("record job %s's outcome: %v", j.Name, err)
	}
}

// command runs the binary as a container would, logging to the test's
// temp directory.
func (k *kubelet) command(name, kubeconfig string, args []string) *exec.Cmd {
	logPath := filepath.Join(k.t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		k.t.Fatal(err)
	}
	k.mu.Lock()
	k.logs = append(k.logs, logPath)
	k.mu.Unlock()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = f, f
	return cmd
}

func (k *kubelet) dumpLogs() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.logs {
		if data, err := os.ReadFile(p); err == nil {
			k.t.Logf("%s (last 3000 bytes):\n%s", filepath.Base(p), tail(data, 3000))
		}
	}
}

// TestHelmUninstallWhileCircuitsAreOpen installs the chart with the Helm
// SDK into a namespace of its own, with one breaker in its `breakers:`
// value and one created outside the chart, opens both circuits (their
// webhooks refuse connections), and uninstalls. Helm's pre-delete hook must
// stop the controller, restore both webhooks and release both breakers
// before it deletes the controller, its RBAC and the chart's breaker:
// afterwards no webhook is failed open, both configurations are what they
// were, nothing hangs on a finalizer, and the controller has stopped.
func TestHelmUninstallWhileCircuitsAreOpen(t *testing.T) {
	const ns, release = "guards", "tripswitch"
	env := testenv.Start(t, testenv.Options{AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A webhook server that is down: its address refuses connections, its CA is real.
	hook, err := slowhook.Start()
	if err != nil {
		t.Fatal(err)
	}
	if err := hook.Close(); err != nil {
		t.Fatal(err)
	}
	dead := admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.URL + "/refused"), CABundle: hook.CABundle}
	rules := []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}
	never := &metav1.LabelSelector{MatchLabels: map[string]string{"tripswitch.e2e/never": "true"}}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "injector"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "inject.example.com", ClientConfig: dead, Rules: rules, NamespaceSelector: never,
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}}},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "policy"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "validate.example.com", ClientConfig: dead, Rules: rules, NamespaceSelector: never,
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}}},
	}
	for _, o := range []client.Object{mutating, validating} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	snapshot := func() string {
		var m admissionregistrationv1.MutatingWebhookConfiguration
		var v admissionregistrationv1.ValidatingWebhookConfiguration
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "injector"}, &m); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "policy"}, &v); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal([]any{m.Annotations, m.Webhooks, v.Annotations, v.Webhooks})
		return string(data)
	}
	before := snapshot()

	// Helm, as `helm install` would run it, with an administrator's kubeconfig.
	kc, err := env.AdminKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kcPath, ptr.To(ns)
	hc := action.NewConfiguration()
	if err := hc.Init(flags, ns, "secret"); err != nil {
		t.Fatal(err)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	chrt, err := loader.Load(filepath.Join(root, "charts", "tripswitch"))
	if err != nil {
		t.Fatal(err)
	}
	probe := map[string]any{"interval": "200ms", "timeout": "100ms", "failureThreshold": 2, "successThreshold": 2}
	values := map[string]any{
		"replicas":                      1,
		"approvedWebhookConfigurations": map[string]any{"mutating": []any{"injector"}, "validating": []any{"policy"}},
		"leaderElection":                map[string]any{"leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "500ms"},
		"breakers": map[string]any{"chart-guarded": map[string]any{
			"target":                        map[string]any{"kind": "MutatingWebhookConfiguration", "configurationName": "injector", "webhookName": "inject.example.com"},
			"allowAdmissionWithoutMutation": true, "openAction": "Bypass", "probe": probe,
		}},
	}
	install := action.NewInstall(hc)
	install.ReleaseName, install.Namespace = release, ns
	install.WaitStrategy, install.Timeout = kube.HookOnlyStrategy, 2*time.Minute
	install.ServerSideApply = true
	if _, err := install.RunWithContext(ctx, chrt, values); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	user := &v1alpha1.WebhookCircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: "user-guarded"},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:     v1alpha1.Target{Kind: v1alpha1.ValidatingWebhookConfiguration, ConfigurationName: "policy", WebhookName: "validate.example.com"},
			OpenAction: v1alpha1.OpenActionIgnore, AllowAdmissionWithoutValidation: true,
			Probe: v1alpha1.ProbeSpec{Interval: &metav1.Duration{Duration: 200 * time.Millisecond}, Timeout: &metav1.Duration{Duration: 100 * time.Millisecond},
				FailureThreshold: 2, SuccessThreshold: 2},
		},
	}
	if err := env.Client.Create(ctx, user); err != nil {
		t.Fatal(err)
	}

	node := &kubelet{t: t, cs: cs, cfg: env.Config, ns: ns, deploy: release, jobsRun: map[string]bool{}}
	nodeCtx, stopNode := context.WithCancel(ctx)
	nodeDone := make(chan struct{})
	go func() { node.run(nodeCtx); close(nodeDone) }()
	t.Cleanup(func() {
		stopNode()
		<-nodeDone
		if t.Failed() {
			node.dumpLogs()
		}
	})

	// Both circuits open.
	eventually(t, 90*time.Second, "both circuits open", func(ctx context.Context) (bool, error) {
		for _, name := range []string{"chart-guarded", "user-guarded"} {
			var b v1alpha1.WebhookCircuitBreaker
			if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &b); err != nil {
				return false, err
			}
			if b.Status.State != v1alpha1.StateOpen {
				return false, fmt.Errorf("%s is %s", name, b.Status.State)
			}
		}
		return true, nil
	})
	if snapshot() == before {
		t.Fatal("the circuits are open but the configurations did not change")
	}

	uninstall := action.NewUninstall(hc)
	uninstall.WaitStrategy, uninstall.Timeout = kube.HookOnlyStrategy, 3*time.Minute
	began := time.Now()
	if _, err := uninstall.Run(release); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	t.Logf("helm uninstall took %v", time.Since(began).Round(time.Millisecond))

	if after := snapshot(); after != before {
		t.Errorf("a webhook is left changed after the uninstall:\nbefore %s\nafter  %s", before, after)
	}
	eventually(t, 30*time.Second, "the chart's breaker deleted", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Name: "chart-guarded"}, &v1alpha1.WebhookCircuitBreaker{})
		return apierrors.IsNotFound(err), err
	})
	var kept v1alpha1.WebhookCircuitBreaker
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "user-guarded"}, &kept); err != nil {
		t.Fatalf("the breaker made outside the chart: %v", err)
	}
	if len(kept.Finalizers) > 0 {
		t.Errorf("the breaker made outside the chart still has finalizers %v: deleting it would hang", kept.Finalizers)
	}
	if c := meta.FindStatusCondition(kept.Status.Conditions, v1alpha1.ConditionCircuitOpen); c == nil || c.Reason != breakglass.StandDownReason ||
		!strings.HasPrefix(c.Message, "restored by the stand-down before an uninstall (helm uninstall) at ") {
		t.Errorf("the kept breaker's CircuitOpen: %+v; want reason %s, restored by the stand-down of helm uninstall", c, breakglass.StandDownReason)
	}
	if _, err := cs.CoordinationV1().Leases(ns).Get(ctx, "tripswitch.dev", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the leader Lease after helm uninstall: %v; want it deleted by the stand-down", err)
	}
	if err := env.Client.Delete(ctx, &kept); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the user's breaker deleted without a controller", func(ctx context.Context) (bool, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Name: "user-guarded"}, &v1alpha1.WebhookCircuitBreaker{})
		return apierrors.IsNotFound(err), err
	})
	eventually(t, 10*time.Second, "the controller stopped", func(context.Context) (bool, error) { return !node.running(), nil })
	jobs, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if !strings.HasSuffix(j.Name, "-standdown") || j.DeletionTimestamp == nil {
			t.Errorf("job %s left behind", j.Name)
		}
	}
}

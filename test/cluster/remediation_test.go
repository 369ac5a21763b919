package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/hack/cluster"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/defaulthook"
)

// testRemediation: a Deployment's Pods admitted while the Pod-mutating
// webhook was bypassed are rolled by `tripswitch remediate --apply`, run as
// the Job that `tripswitch remediate --job` prints (from the release image,
// under the least-privilege ClusterRole it prints, applied with the pinned
// kubectl): each is
// evicted through the Eviction API, the disruption controller holds the PDB,
// and the ReplicaSet recreates the Pod through the recovered webhook. All end
// mutated, and the number of Ready Pods never drops below minAvailable.
func testRemediation(t *testing.T) {
	installTripswitch(t, nil)
	const target, replicas, minAvailable = "remediate-target", 3, 2
	hook := deployWebhook(t, "remediate-webhook", "hook")
	ensureNamespace(t, target, "tripswitch.test/remediate")
	hook.configuration(t, remediateHook, "pods", "tripswitch.test/remediate")
	b := breaker(t, remediateHook, v1alpha1.OpenActionBypass, v1alpha1.ProbeSpec{}, func(s *v1alpha1.WebhookCircuitBreakerSpec) {
		s.Audit = &v1alpha1.AuditSpec{Enabled: true}
	})
	waitState(t, b.Name, v1alpha1.StateClosed, time.Minute)
	hook.setDelay(t, time.Hour)
	waitState(t, b.Name, v1alpha1.StateOpen, time.Minute)

	labels := map[string]string{"app": "shop"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: target},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers:                    []corev1.Container{{Name: "app", Image: cluster.PauseImage, ImagePullPolicy: corev1.PullNever}},
			}}}}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: target},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(minAvailable)), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	for _, o := range []client.Object{dep, pdb} {
		if err := env.client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 2*time.Minute, "the Deployment's Pods Ready, admitted without the webhook", func(ctx context.Context) (bool, error) {
		ready, mutated, err := shopPods(ctx, target)
		return ready == replicas && mutated == 0, fmt.Errorf("%d Ready, %d mutated (%v)", ready, mutated, err)
	})
	hook.setDelay(t, 0)
	waitState(t, b.Name, v1alpha1.StateClosed, 2*time.Minute)

	// Watch the budget while remediate rolls the Pods.
	var mu sync.Mutex
	lowest := replicas
	ctx, stopWatch := context.WithCancel(t.Context())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ctx.Err() == nil {
			if ready, _, err := shopPods(ctx, target); err == nil {
				mu.Lock()
				lowest = min(lowest, ready)
				mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	out, err := remediationJob(t, b.Name, "--apply", "--eviction-timeout", "3m")
	t.Logf("tripswitch remediate %s --apply (the Job of --job):\n%s", b.Name, out)
	if err != nil {
		t.Fatalf("remediate: %v", err)
	}
	eventually(t, 3*time.Minute, "every Pod recreated through the webhook", func(ctx context.Context) (bool, error) {
		ready, mutated, err := shopPods(ctx, target)
		return ready == replicas && mutated == replicas, fmt.Errorf("%d Ready, %d mutated (%v)", ready, mutated, err)
	})
	stopWatch()
	<-watched
	if lowest < minAvailable {
		t.Errorf("Ready Pods fell to %d during the roll: the PodDisruptionBudget (minAvailable %d) was violated", lowest, minAvailable)
	}
	t.Logf("all %d Pods recreated mutated; Ready Pods never below %d (minAvailable %d)", replicas, lowest, minAvailable)
}

// shopPods counts the Deployment's Ready Pods and those the webhook mutated.
func shopPods(ctx context.Context, ns string) (ready, mutated int, err error) {
	pods, err := env.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=shop"})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || !podReady(p) {
			continue
		}
		ready++
		if p.Labels[defaulthook.InjectedLabel] == "true" {
			mutated++
		}
	}
	return ready, mutated, nil
}

// remediationJob prints `tripswitch remediate BREAKER ARGS --job` with the
// CLI built from this checkout, as an operator would, applies what it
// prints with the cluster's kubectl, waits for the Job and returns its log.
// The Job runs in the cluster: it re-reviews objects by calling the webhook
// at <svc>.<ns>.svc, a name only the cluster's DNS resolves; and it runs
// with the printed ClusterRole alone.
func remediationJob(t testing.TB, breaker string, args ...string) (string, error) {
	t.Helper()
	ctx := t.Context()
	const ns = "tripswitch-cli"
	ensureNamespace(t, ns)
	cli := filepath.Join(env.scratch, "tripswitch")
	build := exec.Command("go", "build", "-o", cli, "./cmd/tripswitch")
	build.Dir = env.root
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the CLI: %v\n%s", err, b)
	}
	printJob := exec.Command(cli, append(append([]string{"remediate", breaker}, args...),
		"--job", "--job-image", imageRepository+":"+imageTag, "--job-namespace", ns, "--kubeconfig", env.layout.Kubeconfig())...)
	manifest, err := printJob.Output()
	if err != nil {
		t.Fatalf("tripswitch remediate --job: %v", err)
	}
	t.Logf("tripswitch remediate %s %s --job printed:\n%s", breaker, strings.Join(args, " "), manifest)
	kubectl := func(stdin []byte, args ...string) {
		t.Helper()
		cmd := exec.Command(env.layout.Bin("kubectl"), append([]string{"--kubeconfig", env.layout.Kubeconfig()}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	kubectl(manifest, "apply", "-f", "-")
	t.Cleanup(func() { kubectl(manifest, "delete", "--wait", "-f", "-") })
	name := "tripswitch-remediate-" + breaker
	var failed bool
	eventually(t, 10*time.Minute, "job "+name+" finished", func(ctx context.Context) (bool, error) {
		var j batchv1.Job
		if err := env.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &j); err != nil {
			return false, err
		}
		failed = j.Status.Failed > 0
		return j.Status.Succeeded > 0 || failed, fmt.Errorf("active %d", j.Status.Active)
	})
	pods, err := env.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + name})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("the Pod of job %s: %v", name, err)
	}
	log, err := env.cs.CoreV1().Pods(ns).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("the log of job %s: %v", name, err)
	}
	if failed {
		return string(log), fmt.Errorf("job %s failed", name)
	}
	return string(log), nil
}

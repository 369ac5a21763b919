package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// testHelmLifecycle: a breaker from the chart's `breakers:` value opens;
// `helm upgrade` (a changed flag, so both Pods are replaced) keeps the
// circuit open with its record untouched; `helm uninstall` while it is open
// runs the pre-delete hook Job as a Pod, which restores the configuration
// byte for byte, and leaves nothing of the release in the cluster.
func testHelmLifecycle(t *testing.T) {
	hook := deployWebhook(t, "lifecycle-webhook", "hook")
	hook.configuration(t, lifecycleHook, "configmaps", "tripswitch.test/lifecycle")
	before := snapshot(t, lifecycleHook)
	chartBreaker := map[string]any{"breakers": map[string]any{lifecycleHook: map[string]any{
		"target":                        map[string]any{"kind": "MutatingWebhookConfiguration", "configurationName": lifecycleHook, "webhookName": webhookName(lifecycleHook)},
		"allowAdmissionWithoutMutation": true, "openAction": "Bypass",
	}}}
	installTripswitch(t, chartBreaker)
	waitState(t, lifecycleHook, v1alpha1.StateClosed, time.Minute)
	hook.setDelay(t, time.Hour)
	waitState(t, lifecycleHook, v1alpha1.StateOpen, time.Minute)
	open := snapshot(t, lifecycleHook)

	// The circuit must stay open through the upgrade's rollout.
	var mu sync.Mutex
	var left []string
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if b, err := state(ctx, lifecycleHook); err == nil && b.Status.State != v1alpha1.StateOpen {
				mu.Lock()
				left = append(left, fmt.Sprintf("%s at %s", b.Status.State, time.Now().Format("15:04:05.000")))
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	upgraded := chartBreaker
	upgraded["maxOpenCircuits"] = 10
	oldPods, _ := controllerPods(t.Context())
	upgradeTripswitch(t, upgraded)
	newPods, _ := controllerPods(t.Context())
	stop()
	<-done
	if len(left) > 0 {
		t.Errorf("the circuit left Open during helm upgrade: %v", left)
	}
	if s := snapshot(t, lifecycleHook); s != open {
		t.Errorf("helm upgrade changed the open configuration:\nopen  %s\nafter %s", open, s)
	}
	for _, o := range oldPods {
		for _, n := range newPods {
			if o.Name == n.Name {
				t.Errorf("Pod %s survived the upgrade: the rollout did not replace the controller", o.Name)
			}
		}
	}

	// Uninstall while open: the hook Job's Pod must run.
	var hookPods sync.Map
	ctx, stop = context.WithCancel(t.Context())
	done = make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if pods, err := env.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + release + "-standdown"}); err == nil {
				for _, p := range pods.Items {
					hookPods.Store(p.Name, string(p.Status.Phase))
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	un := action.NewUninstall(helmConfig(t))
	un.WaitStrategy, un.Timeout = kube.HookOnlyStrategy, 3*time.Minute
	began := time.Now()
	if _, err := un.Run(release); err != nil {
		stop()
		<-done
		t.Fatalf("helm uninstall: %v\n%s", err, podsReport(releaseNS))
	}
	stop()
	<-done
	t.Logf("helm uninstall took %v", time.Since(began).Round(100*time.Millisecond))
	ran := 0
	hookPods.Range(func(name, phase any) bool {
		t.Logf("stand-down Pod %s: last seen %s", name, phase)
		if phase == "Succeeded" || phase == "Running" {
			ran++
		}
		return true
	})
	if ran == 0 {
		t.Error("no Pod of the stand-down Job was seen running: the hook did not run as a Pod")
	}
	if after := snapshot(t, lifecycleHook); after != before {
		t.Errorf("the configuration is not what it was before the outage:\nbefore %s\nafter  %s", before, after)
	}
	eventually(t, time.Minute, "nothing of the release left", func(ctx context.Context) (bool, error) {
		left, err := releaseObjects(ctx)
		return len(left) == 0, fmt.Errorf("left: %v (%v)", left, err)
	})
	if _, err := state(t.Context(), lifecycleHook); err == nil {
		t.Error("the chart's breaker is still there after the uninstall")
	}
}

// releaseObjects lists every object labelled as the release's, in its
// namespace and cluster-wide, of the kinds the chart makes.
func releaseObjects(ctx context.Context) ([]string, error) {
	dyn, err := dynamic.NewForConfig(env.config)
	if err != nil {
		return nil, err
	}
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
	kinds := []schema.GroupVersionResource{
		{Group: "apps", Version: "v1", Resource: "deployments"}, {Group: "apps", Version: "v1", Resource: "replicasets"},
		{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "services"}, {Version: "v1", Resource: "serviceaccounts"},
		{Version: "v1", Resource: "configmaps"}, {Group: "batch", Version: "v1", Resource: "jobs"},
		{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
		{Group: "tripswitch.dev", Version: "v1alpha1", Resource: "webhookcircuitbreakers"},
	}
	var left []string
	for _, k := range kinds {
		list, err := dyn.Resource(k).List(ctx, sel)
		if err != nil {
			return left, fmt.Errorf("list %s: %w", k.Resource, err)
		}
		for _, o := range list.Items {
			left = append(left, k.Resource+"/"+o.GetNamespace()+"/"+o.GetName())
		}
	}
	pods, err := controllerPods(ctx)
	for _, p := range pods {
		left = append(left, "pods/"+p.Namespace+"/"+p.Name)
	}
	return left, err
}

package cluster_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/demo"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/selfsigned"
)

// The release every test shares, in its namespace.
const (
	release   = "tripswitch"
	releaseNS = "tripswitch-system"
)

// helmConfig is Helm's action configuration, as `helm` builds it from the
// administrator's kubeconfig.
func helmConfig(t testing.TB) *action.Configuration {
	t.Helper()
	kc := env.layout.Kubeconfig()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kc, ptr.To(releaseNS)
	hc := action.NewConfiguration()
	if err := hc.Init(flags, releaseNS, "secret"); err != nil {
		t.Fatal(err)
	}
	return hc
}

// chartValues are the chart's values for these tests: the image built here
// (never pulled), the webhook configurations the tests make approved, the
// optional permissions the tests use, and a lease short enough that a
// failover does not dominate the run; extra is merged on top.
func chartValues(extra map[string]any) map[string]any {
	pods := []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}}}
	v := map[string]any{
		"image": map[string]any{"repository": imageRepository, "tag": imageTag, "pullPolicy": "Never"},
		"approvedWebhookConfigurations": map[string]any{"mutating": []any{
			demo.Configuration, probeHook, failoverHook, remediateHook, lifecycleHook, starveHook}},
		"endpointProbing": map[string]any{"enabled": true},
		"apiServerSignal": map[string]any{"enabled": true},
		"audit":           map[string]any{"enabled": true, "resources": pods},
		"leaderElection":  map[string]any{"leaseDuration": "8s", "renewDeadline": "6s", "retryPeriod": "1s"},
		// Two replicas and the webhooks share 2 cores with the tests.
		"resources": map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "64Mi"}, "limits": map[string]any{"memory": "512Mi"}},
	}
	for k, x := range extra {
		v[k] = x
	}
	return v
}

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	c, err := loader.Load(filepath.Join(env.root, "charts", "tripswitch"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// installTripswitch installs the release if it is not installed (Helm waits
// for its Deployment's rollout), then waits until both Pods are Ready.
func installTripswitch(t testing.TB, extra map[string]any) {
	t.Helper()
	hc := helmConfig(t)
	if _, err := action.NewGet(hc).Run(release); err == nil {
		upgradeTripswitch(t, extra)
		return
	}
	install := action.NewInstall(hc)
	install.ReleaseName, install.Namespace, install.CreateNamespace = release, releaseNS, true
	install.WaitStrategy, install.Timeout = kube.StatusWatcherStrategy, 3*time.Minute
	install.ServerSideApply = true
	if _, err := install.RunWithContext(t.Context(), loadChart(t), chartValues(extra)); err != nil {
		t.Fatalf("helm install: %v\n%s", err, podsReport(releaseNS))
	}
	waitControllerReady(t)
}

// upgradeTripswitch runs `helm upgrade` with these values and waits for the
// rollout.
func upgradeTripswitch(t testing.TB, extra map[string]any) {
	t.Helper()
	up := action.NewUpgrade(helmConfig(t))
	up.Namespace = releaseNS
	up.WaitStrategy, up.Timeout = kube.StatusWatcherStrategy, 3*time.Minute
	up.ServerSideApply = "true"
	if _, err := up.RunWithContext(t.Context(), release, loadChart(t), chartValues(extra)); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, podsReport(releaseNS))
	}
	waitControllerReady(t)
}

// waitControllerReady waits until the Deployment's two Pods are Ready and
// one of them holds the lease.
func waitControllerReady(t testing.TB) {
	t.Helper()
	eventually(t, 3*time.Minute, "both controller Pods Ready and one leading", func(ctx context.Context) (bool, error) {
		pods, err := controllerPods(ctx)
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range pods {
			if podReady(p) {
				ready++
			}
		}
		if ready != 2 || len(pods) != 2 {
			return false, fmt.Errorf("%d of %d Pods Ready", ready, len(pods))
		}
		_, err = leader(ctx)
		return err == nil, err
	})
}

func controllerPods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := env.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=tripswitch"})
	if err != nil {
		return nil, err
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Labels["app.kubernetes.io/component"] != "standdown" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// leader is the Pod that holds the controller's lease, as its holder
// identity names it (controller-runtime: <pod name>_<uuid>).
func leader(ctx context.Context) (string, error) {
	leases, err := env.cs.CoordinationV1().Leases(releaseNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	pods, err := controllerPods(ctx)
	if err != nil {
		return "", err
	}
	for _, l := range leases.Items {
		if holder := leaseHolder(l); holder != "" {
			for _, p := range pods {
				if len(holder) > len(p.Name) && holder[:len(p.Name)+1] == p.Name+"_" {
					return p.Name, nil
				}
			}
			return "", fmt.Errorf("lease %s is held by %q, none of the running Pods", l.Name, holder)
		}
	}
	return "", fmt.Errorf("no lease held in %s", releaseNS)
}

func leaseHolder(l coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return ""
	}
	if time.Since(l.Spec.RenewTime.Time) > time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// podsReport describes the namespace's Pods and their last events, for a
// failure message.
func podsReport(ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b bytes.Buffer
	pods, _ := env.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s ready=%v\n", p.Name, p.Status.Phase, podReady(p))
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "  %s: restarts %d state %+v\n", cs.Name, cs.RestartCount, cs.State)
		}
	}
	events, _ := env.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	sort.Slice(events.Items, func(i, j int) bool { return events.Items[i].LastTimestamp.Before(&events.Items[j].LastTimestamp) })
	items := events.Items
	if len(items) > 20 {
		items = items[len(items)-20:]
	}
	for _, e := range items {
		fmt.Fprintf(&b, "event %s %s: %s\n", e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}

// webhook is a hookserver Deployment behind a Service, and the CA its
// serving certificate was signed by.
type webhook struct {
	ns, name string
	caBundle []byte
}

// deployWebhook runs hookserver in ns: a Secret with a certificate for
// <name>.<ns>.svc, a Deployment of 2 replicas, a Service (443 → 8443) and a
// PodDisruptionBudget minAvailable 1; it waits until both replicas are Ready
// and the Service has both endpoints.
func deployWebhook(t testing.TB, ns, name string) *webhook {
	t.Helper()
	ctx := t.Context()
	ensureNamespace(t, ns)
	ca, cert, err := selfsigned.Pair(name+"-ca", name+"."+ns+".svc", name+"."+ns+".svc.cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := marshalKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-tls", Namespace: ns}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		}}
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532)},
					Containers: []corev1.Container{{
						Name: "hook", Image: hookImage, ImagePullPolicy: corev1.PullNever,
						Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}, {Name: "control", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8443)}},
							PeriodSeconds: 1},
						Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: mustQuantity("10m")}},
						VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret.Name}}}},
				},
			},
		},
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)}}}}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	for _, o := range []client.Object{secret, dep, svc, pdb} {
		if err := env.client.Create(ctx, o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	w := &webhook{ns: ns, name: name, caBundle: ca.PEM}
	w.waitReady(t, 2)
	return w
}

// waitReady waits until n replicas are Ready and the Service has n ready
// endpoints.
func (w *webhook) waitReady(t testing.TB, n int) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("webhook %s/%s: %d Pods Ready behind its Service", w.ns, w.name, n), func(ctx context.Context) (bool, error) {
		ips, err := w.podIPs(ctx)
		if err != nil || len(ips) != n {
			return false, fmt.Errorf("%d ready Pods (%v)", len(ips), err)
		}
		eps, err := w.readyEndpoints(ctx)
		return eps == n, err
	})
}

func (w *webhook) readyEndpoints(ctx context.Context) (int, error) {
	slices, err := env.cs.DiscoveryV1().EndpointSlices(w.ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + w.name})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if ptr.Deref(e.Conditions.Ready, false) {
				n++
			}
		}
	}
	return n, nil
}

// pods are the webhook's Pods that are Ready.
func (w *webhook) pods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := env.cs.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + w.name})
	if err != nil {
		return nil, err
	}
	var ready []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && podReady(p) && p.Status.PodIP != "" {
			ready = append(ready, p)
		}
	}
	return ready, nil
}

func (w *webhook) podIPs(ctx context.Context) ([]string, error) {
	pods, err := w.pods(ctx)
	var ips []string
	for _, p := range pods {
		ips = append(ips, p.Status.PodIP)
	}
	return ips, err
}

// setDelay makes every ready replica answer after d (a large d hangs it),
// through each Pod's control port on its own address.
func (w *webhook) setDelay(t testing.TB, d time.Duration) {
	t.Helper()
	ips, err := w.podIPs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(ips) == 0 {
		t.Fatalf("webhook %s/%s has no ready Pod to set a delay on", w.ns, w.name)
	}
	for _, ip := range ips {
		setPodDelay(t, ip, d)
	}
}

func setPodDelay(t testing.TB, ip string, d time.Duration) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, fmt.Sprintf("http://%s:8080/delay?d=%s", ip, d), nil)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("set delay on %s: %v", ip, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("set delay on %s: %s: %s", ip, resp.Status, body)
	}
}

// configuration makes a MutatingWebhookConfiguration with one webhook that
// calls this Service's /mutate for CREATE of resource in namespaces
// labelled for it: failurePolicy Fail, timeoutSeconds 1.
func (w *webhook) configuration(t testing.TB, name, resource, nsLabel string) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: webhookName(name),
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: w.ns, Name: w.name, Path: ptr.To("/mutate"), Port: ptr.To[int32](443)},
				CABundle: w.caBundle,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{nsLabel: "true"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](1),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		}},
	}
	if err := env.client.Create(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), cfg) })
	return cfg
}

func webhookName(configuration string) string { return configuration + ".tripswitch.test" }

// snapshot is the configuration's annotations and webhooks as JSON: what a
// restore must give back byte for byte.
func snapshot(t testing.TB, name string) string {
	t.Helper()
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := env.client.Get(t.Context(), client.ObjectKey{Name: name}, &cfg); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal([]any{cfg.Annotations, cfg.Webhooks})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// breaker approves failing the configuration's webhook open, probing it
// with the seed's thresholds (1 s, 250 ms, 3, 5) unless probe says otherwise.
func breaker(t testing.TB, configuration string, action v1alpha1.OpenAction, probe v1alpha1.ProbeSpec, opts ...func(*v1alpha1.WebhookCircuitBreakerSpec)) *v1alpha1.WebhookCircuitBreaker {
	t.Helper()
	b := &v1alpha1.WebhookCircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: configuration},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: configuration, WebhookName: webhookName(configuration)},
			AllowAdmissionWithoutMutation: true,
			OpenAction:                    action,
			Probe:                         probe,
		},
	}
	for _, o := range opts {
		o(&b.Spec)
	}
	if err := env.client.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = env.client.Delete(ctx, b)
		for ctx.Err() == nil {
			if err := env.client.Get(ctx, client.ObjectKeyFromObject(b), &v1alpha1.WebhookCircuitBreaker{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	return b
}

// state reads a breaker's circuit state.
func state(ctx context.Context, name string) (v1alpha1.WebhookCircuitBreaker, error) {
	var b v1alpha1.WebhookCircuitBreaker
	err := env.client.Get(ctx, client.ObjectKey{Name: name}, &b)
	return b, err
}

// waitState waits until the breaker reports want and returns when it saw it.
func waitState(t testing.TB, name string, want v1alpha1.CircuitState, limit time.Duration) time.Time {
	t.Helper()
	eventually(t, limit, fmt.Sprintf("breaker %s %s", name, want), func(ctx context.Context) (bool, error) {
		b, err := state(ctx, name)
		if err != nil {
			return false, err
		}
		return b.Status.State == want, fmt.Errorf("state %q", b.Status.State)
	})
	return time.Now()
}

func ensureNamespace(t testing.TB, ns string, labels ...string) {
	t.Helper()
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{}}}
	for _, l := range labels {
		obj.Labels[l] = "true"
	}
	err := env.client.Create(t.Context(), obj)
	if apierrors.IsAlreadyExists(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndWait(t, obj) })
}

// deleteAndWait deletes o and waits until it is gone, so that the next run
// (or test) can make it again.
func deleteAndWait(t testing.TB, o client.Object) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := env.client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete %s: %v", o.GetName(), err)
		return
	}
	for ctx.Err() == nil {
		if err := env.client.Get(ctx, client.ObjectKeyFromObject(o), o); apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Errorf("%s %s still there after 3 minutes", o.GetObjectKind().GroupVersionKind().Kind, o.GetName())
}

// The webhook configurations the tests make, each approved in the chart.
const (
	probeHook     = "probe-hook"
	failoverHook  = "failover-hook"
	remediateHook = "remediate-hook"
	lifecycleHook = "lifecycle-hook"
	starveHook    = "starve-hook"
)

func marshalKey(key any) ([]byte, error) { return x509.MarshalPKCS8PrivateKey(key) }

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

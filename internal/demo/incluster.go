package demo

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/internal/fixtures/defaulthook"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/selfsigned"
)

// The webhook's Deployment, Service and PodDisruptionBudget in a cluster.
const (
	HookNamespace = "demo-webhook"
	HookName      = "slow-mutator"
	// HookControlPort is the webhook Pods' plain-HTTP control port:
	// PUT /delay?d=2s, on each Pod's own address.
	HookControlPort = 8080
)

// ClusterOptions configure the environment of `make demo-cluster`.
type ClusterOptions struct {
	// Config is an administrator's configuration for the cluster's API
	// server.
	Config *rest.Config
	// HookImage is test/cluster/hookserver's image, in the node's image store
	// (pulled Never).
	HookImage string
	// Out receives progress lines.
	Out io.Writer
}

// Cluster is the environment of `make demo-cluster` and test/cluster: a
// real cluster, tripswitch installed in it (by Helm), and the webhook as a
// Deployment of 2 behind a Service with a PodDisruptionBudget, called by the
// API server through the cluster's Service network and made slow on each
// Pod through its control port.
type Cluster struct {
	c        client.Client
	caBundle []byte
	http     *http.Client
}

var _ Environment = (*Cluster)(nil)

// StartCluster deploys the webhook and waits until both replicas are Ready
// behind its Service. tripswitch must be installed: it says so if no
// controller Pod is Ready.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(opts.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", opts.Config.Host, err)
	}
	k := &Cluster{c: c, http: &http.Client{Timeout: 10 * time.Second}}
	if err := k.controllerReady(ctx); err != nil {
		return nil, err
	}
	logf(opts.Out, "deploying the webhook %s/%s (%s): 2 replicas behind a Service, a PodDisruptionBudget", HookNamespace, HookName, opts.HookImage)
	if err := k.deploy(ctx, opts.HookImage); err != nil {
		k.Close()
		return nil, err
	}
	return k, nil
}

// controllerReady checks that a tripswitch controller Pod is Ready.
func (k *Cluster) controllerReady(ctx context.Context) error {
	var pods corev1.PodList
	if err := k.c.List(ctx, &pods, client.MatchingLabels{"app.kubernetes.io/name": "tripswitch", "app.kubernetes.io/component": "controller"}); err != nil {
		return fmt.Errorf("find tripswitch's controller: %w", err)
	}
	for _, p := range pods.Items {
		if podReady(p) {
			return nil
		}
	}
	return fmt.Errorf("no Ready tripswitch controller Pod in the cluster: install it first (make demo-cluster does, with the chart; approve %s)", Configuration)
}

func (k *Cluster) deploy(ctx context.Context, image string) error {
	host := HookName + "." + HookNamespace + ".svc"
	ca, cert, err := selfsigned.Pair(HookName+"-ca", host, host+".cluster.local")
	if err != nil {
		return err
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return err
	}
	k.caBundle = ca.PEM
	labels := map[string]string{"app": HookName}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: HookNamespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: HookName + "-tls", Namespace: HookNamespace}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{
				corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
				corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}),
			}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: HookName, Namespace: HookNamespace}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532)},
				Containers: []corev1.Container{{
					Name: "hook", Image: image, ImagePullPolicy: corev1.PullNever,
					Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}, {Name: "control", ContainerPort: HookControlPort}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8443)}},
						PeriodSeconds: 1},
					VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}},
				}},
				Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: HookName + "-tls"}}}},
			}},
		}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: HookName, Namespace: HookNamespace},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)}}}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: HookName, Namespace: HookNamespace},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}}},
	}
	for _, o := range objs {
		if err := k.c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ips, err := k.podIPs(ctx)
		eps, eerr := k.readyEndpoints(ctx)
		if err == nil && eerr == nil && len(ips) == 2 && eps == 2 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("webhook %s/%s: %d Pods Ready, %d ready endpoints after 3 minutes (%v, %v)", HookNamespace, HookName, len(ips), eps, err, eerr)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Close deletes the webhook's namespace and waits until it is gone.
func (k *Cluster) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: HookNamespace}}
	if err := k.c.Delete(ctx, ns); err != nil {
		return
	}
	for ctx.Err() == nil {
		if err := k.c.Get(ctx, client.ObjectKeyFromObject(ns), ns); apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// podIPs are the addresses of the webhook's Ready Pods.
func (k *Cluster) podIPs(ctx context.Context) ([]string, error) {
	var pods corev1.PodList
	if err := k.c.List(ctx, &pods, client.InNamespace(HookNamespace), client.MatchingLabels{"app": HookName}); err != nil {
		return nil, err
	}
	var ips []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && podReady(p) && p.Status.PodIP != "" {
			ips = append(ips, p.Status.PodIP)
		}
	}
	return ips, nil
}

func (k *Cluster) readyEndpoints(ctx context.Context) (int, error) {
	var slices discoveryv1.EndpointSliceList
	if err := k.c.List(ctx, &slices, client.InNamespace(HookNamespace), client.MatchingLabels{discoveryv1.LabelServiceName: HookName}); err != nil {
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

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Client implements Environment.
func (k *Cluster) Client() client.Client { return k.c }

// ClientConfig implements Environment: the Service, and the CA that signed
// the Pods' certificate.
func (k *Cluster) ClientConfig() admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: HookNamespace, Name: HookName, Path: ptr.To("/mutate"), Port: ptr.To[int32](443)},
		CABundle: k.caBundle,
	}
}

// SetDelay implements Environment: PUT /delay on each Ready Pod's control
// port (Pod addresses are reachable from the node).
func (k *Cluster) SetDelay(ctx context.Context, d time.Duration) error {
	ips, err := k.podIPs(ctx)
	if err != nil {
		return fmt.Errorf("webhook Pods: %w", err)
	}
	if len(ips) == 0 {
		return fmt.Errorf("webhook %s/%s has no Ready Pod to set a delay on", HookNamespace, HookName)
	}
	for _, ip := range ips {
		url := fmt.Sprintf("http://%s:%d/delay?d=%s", ip, HookControlPort, d)
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, nil)
		if err != nil {
			return err
		}
		resp, err := k.http.Do(req)
		if err != nil {
			return fmt.Errorf("set the webhook's delay: %w", err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("set the webhook's delay: PUT %s: %s", url, resp.Status)
		}
	}
	return nil
}

// Called implements Environment: the webhook labels what it reviews.
func (k *Cluster) Called(_ context.Context, cm *corev1.ConfigMap) bool {
	return cm.Labels[defaulthook.InjectedLabel] == "true"
}

// Mutates implements Environment.
func (k *Cluster) Mutates() bool { return true }

func (k *Cluster) String() string {
	return "in the cluster: the webhook " + HookNamespace + "/" + HookName + " (2 replicas, a Service, a PodDisruptionBudget), tripswitch as installed"
}

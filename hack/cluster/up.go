package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Up starts the cluster and returns once the node is Ready and the cluster
// DNS answers, logging each step with its time to w. The processes outlive
// the caller; Down stops them. A cluster that is already up is left as it is.
func Up(ctx context.Context, l Layout, w io.Writer) error {
	began := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(w, "%6.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	if Running(l) {
		step("a cluster is already up (%s); `make cluster-down` stops it", l.Data)
		return nil
	}
	if err := CheckHost(l); err != nil {
		return err
	}
	for _, dir := range []string{l.Data, l.State} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := writePKI(l); err != nil {
		return err
	}
	if err := writeConfigs(l); err != nil {
		return err
	}
	if err := makeCgroupParent(); err != nil {
		return err
	}
	if err := upNetwork(l); err != nil {
		return err
	}
	step("PKI, configuration, network (%s %s, Services %s on %s)", Bridge, PodCIDR, ServiceCIDR, ServiceDevice)

	for _, c := range controlPlane(l) {
		if err := start(l, c); err != nil {
			return err
		}
		if c.name == "etcd" {
			if err := waitFor(ctx, l, "etcd", 30*time.Second, etcdHealthy); err != nil {
				return err
			}
			step("etcd healthy")
		}
		if c.name == "kube-apiserver" {
			if err := waitFor(ctx, l, "kube-apiserver", 60*time.Second, apiServerReady(l)); err != nil {
				return err
			}
			step("kube-apiserver ready at %s", APIServerURL())
		}
	}
	if err := start(l, containerd(l)); err != nil {
		return err
	}
	if err := waitFor(ctx, l, "containerd", 30*time.Second, func(context.Context) error {
		return run(l.Bin("ctr"), "--address", l.containerdSocket(), "version")
	}); err != nil {
		return err
	}
	step("containerd %s serving", ContainerdVersion)
	if err := importSystemImages(l); err != nil {
		return err
	}
	step("images imported: %s, %s", PauseImage, CoreDNSImage)
	for _, c := range node(l) {
		if err := start(l, c); err != nil {
			return err
		}
	}
	cs, err := Client(l)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, l, "kubelet", 60*time.Second, nodeReady(cs)); err != nil {
		return err
	}
	step("node %s Ready", NodeName)
	if err := kubectl(l, strings.NewReader(dnsManifest()), "apply", "--server-side", "-f", "-"); err != nil {
		return fmt.Errorf("cluster DNS: %w", err)
	}
	if err := waitFor(ctx, l, "kubelet", 60*time.Second, dnsAnswers); err != nil {
		return fmt.Errorf("cluster DNS: %w", err)
	}
	step("CoreDNS answers at %s: kubernetes.default.svc.%s is %s", DNSServiceIP, ClusterDomain, KubernetesServiceIP)
	step("up; export KUBECONFIG=%s", l.Kubeconfig())
	return nil
}

// Client is a clientset with the administrator's credentials.
func Client(l Layout) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w (is the cluster up? make cluster)", l.Kubeconfig(), err)
	}
	return kubernetes.NewForConfig(cfg)
}

// Running reports whether the cluster's API server and kubelet are running.
func Running(l Layout) bool {
	_, api := running(l, "kube-apiserver")
	_, kubelet := running(l, "kubelet")
	return api && kubelet
}

func controlPlane(l Layout) []component {
	pki := l.pki
	kc := func(n string) string { return filepath.Join(l.Data, n+".kubeconfig") }
	return []component{
		{name: "etcd", bin: l.Bin("etcd"), args: []string{
			"--name=tripswitch", "--data-dir=" + filepath.Join(l.Data, "etcd"),
			"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
			"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
			"--initial-cluster=tripswitch=http://127.0.0.1:2380", "--listen-metrics-urls=",
			"--unsafe-no-fsync", // a throwaway cluster on a disk shared with builds
		}},
		{name: "kube-apiserver", bin: l.Bin("kube-apiserver"), args: []string{
			"--etcd-servers=http://127.0.0.1:2379",
			"--bind-address=" + NodeIP.String(), "--advertise-address=" + NodeIP.String(), fmt.Sprintf("--secure-port=%d", APIServerPort),
			"--tls-cert-file=" + pki("apiserver.crt"), "--tls-private-key-file=" + pki("apiserver.key"),
			"--client-ca-file=" + pki("ca.crt"),
			"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"), "--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
			"--service-account-key-file=" + pki("sa.pub"), "--service-account-signing-key-file=" + pki("sa.key"),
			"--service-account-issuer=https://kubernetes.default.svc." + ClusterDomain,
			"--service-cluster-ip-range=" + ServiceCIDR.String(),
			"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
			"--allow-privileged=true", "--profiling=false",
			// The node has no DNS name this host resolves: reach the kubelet
			// (logs, exec) at its InternalIP, NodeIP.
			"--kubelet-preferred-address-types=InternalIP",
		}},
		{name: "kube-controller-manager", bin: l.Bin("kube-controller-manager"), args: []string{
			"--kubeconfig=" + kc("controller-manager"), "--authentication-kubeconfig=" + kc("controller-manager"),
			"--authorization-kubeconfig=" + kc("controller-manager"),
			"--bind-address=127.0.0.1", "--secure-port=10257", "--leader-elect=false",
			"--use-service-account-credentials=true", "--service-account-private-key-file=" + pki("sa.key"),
			"--root-ca-file=" + pki("ca.crt"), "--cluster-cidr=" + PodCIDR.String(), "--allocate-node-cidrs=false",
			"--service-cluster-ip-range=" + ServiceCIDR.String(), "--profiling=false",
		}},
		{name: "kube-scheduler", bin: l.Bin("kube-scheduler"), args: []string{
			"--kubeconfig=" + kc("scheduler"), "--authentication-kubeconfig=" + kc("scheduler"),
			"--authorization-kubeconfig=" + kc("scheduler"),
			"--bind-address=127.0.0.1", "--secure-port=10259", "--leader-elect=false", "--profiling=false",
		}},
	}
}

// containerd runs with the shim next to it and the host's runc on its PATH.
func containerd(l Layout) component {
	return component{name: "containerd", bin: l.Bin("containerd"),
		args: []string{"--config", l.componentConfig("containerd.toml")},
		env:  []string{"PATH=" + filepath.Dir(l.Bin("containerd")) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
}

func node(l Layout) []component {
	return []component{
		{name: "kubelet", bin: l.Bin("kubelet"), args: []string{
			"--config=" + l.componentConfig("kubelet.yaml"), "--kubeconfig=" + filepath.Join(l.Data, "kubelet.kubeconfig"),
			"--root-dir=" + filepath.Join(l.Data, "kubelet"), "--hostname-override=" + NodeName, "--node-ip=" + NodeIP.String(),
			// Its serving certificate and key: under /var/lib/kubelet/pki
			// otherwise, whatever --root-dir says.
			"--cert-dir=" + l.pki("kubelet"),
		}},
		{name: "kube-proxy", bin: l.Bin("kube-proxy"), args: []string{"--config=" + l.componentConfig("kube-proxy.yaml")}},
	}
}

// importSystemImages builds the pause and CoreDNS images from their cached
// binaries and imports them.
func importSystemImages(l Layout) error {
	dir := filepath.Join(l.Data, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, im := range []Image{
		{Ref: PauseImage, Files: map[string]string{"/pause": l.Bin("pause")}, Entrypoint: []string{"/pause"}, User: "65535:65535"},
		{Ref: CoreDNSImage, Files: map[string]string{"/coredns": l.Bin("coredns")}, Entrypoint: []string{"/coredns"}, User: "65532:65532"},
	} {
		if err := BuildAndImport(l, dir, im); err != nil {
			return err
		}
	}
	return nil
}

// kubectl runs the cached kubectl as the administrator, its discovery and
// HTTP caches under State (else ~/.kube/cache).
func kubectl(l Layout, stdin io.Reader, args ...string) error {
	cmd := exec.Command(l.Bin("kubectl"), append([]string{"--kubeconfig", l.Kubeconfig(), "--cache-dir", l.KubeCacheDir()}, args...)...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// waitFor polls check every 200 ms until it passes or timeout; a failure
// names the component and ends with the last lines of its log.
func waitFor(ctx context.Context, l Layout, name string, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		if _, ok := running(l, name); !ok {
			return fmt.Errorf("%s exited: %v\n%s", name, last, logTail(l, name))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v: %v\n%s", name, timeout, last, logTail(l, name))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func logTail(l Layout, name string) string {
	b, _ := os.ReadFile(l.log(name))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return fmt.Sprintf("last lines of %s:\n  %s", l.log(name), strings.Join(lines, "\n  "))
}

func etcdHealthy(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:2379/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd /health: %s", resp.Status)
	}
	return nil
}

func apiServerReady(l Layout) func(context.Context) error {
	return func(ctx context.Context) error {
		cs, err := Client(l)
		if err != nil {
			return err
		}
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("/readyz: %w: %s", err, body)
		}
		return nil
	}
}

func nodeReady(cs kubernetes.Interface) func(context.Context) error {
	return func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s: Ready=%s: %s", NodeName, c.Status, c.Message)
			}
		}
		return fmt.Errorf("node %s has no Ready condition yet", NodeName)
	}
}

// dnsAnswers asks the cluster DNS, through its Service address, for the API
// server's Service.
func dnsAnswers(ctx context.Context) error {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(DNSServiceIP.String(), "53"))
	}}
	addrs, err := r.LookupHost(ctx, "kubernetes.default.svc."+ClusterDomain)
	if err != nil {
		return err
	}
	if len(addrs) != 1 || addrs[0] != KubernetesServiceIP.String() {
		return fmt.Errorf("kubernetes.default.svc is %v, want %s", addrs, KubernetesServiceIP)
	}
	return nil
}

package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PauseImage is the sandbox image containerd pins: Kubernetes' pause, built
// here from the release's own source.
const PauseImage = "registry.k8s.io/pause:" + PauseVersion

// CoreDNSImage is the cluster DNS image, built here from CoreDNS's module.
const CoreDNSImage = "registry.k8s.io/coredns/coredns:" + CoreDNSVersion

// writeConfigs writes containerd's configuration, the CNI network, the
// kubelet's and kube-proxy's configuration files.
func writeConfigs(l Layout) error {
	for _, dir := range []string{l.componentConfig(""), l.componentConfig("cni"), filepath.Join(l.Data, "logs")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	files := map[string]string{
		"containerd.toml":            containerdConfig(l),
		"cni/10-tripswitch.conflist": strings.Replace(cniConfig, "@IPAM@", filepath.Join(l.State, "ipam"), 1),
		"kubelet.yaml":               kubeletConfig(l),
		"kube-proxy.yaml":            kubeProxyConfig(l),
	}
	for name, body := range files {
		if err := os.WriteFile(l.componentConfig(name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	return nil
}

// containerdConfig roots containerd's content and state in the cluster's
// directories, runs containers with the host's runc (cgroupfs: there is no
// systemd here), and points CRI at the cluster's CNI configuration. Plugins
// that would touch other paths of the host (/opt, NRI's socket) are off.
// restrict_oom_score_adj: this machine's root lacks CAP_SYS_RESOURCE, so no
// process may lower its oom_score_adj below its parent's; without it runc
// fails every sandbox ("failed to update /proc/self/oom_score_adj:
// Permission denied" for the pause container's -998), and with it each
// container keeps at least containerd's own score.
func containerdConfig(l Layout) string {
	r := strings.NewReplacer(
		"@ROOT@", filepath.Join(l.Data, "containerd"),
		"@STATE@", filepath.Join(l.State, "containerd"),
		"@SOCKET@", l.containerdSocket(),
		"@RUNC_ROOT@", filepath.Join(l.State, "runc"),
		"@CNI_CONF@", l.componentConfig("cni"),
		"@PAUSE@", PauseImage,
	)
	return r.Replace(`version = 3
root = "@ROOT@"
state = "@STATE@"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.nri.v1.nri",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "@SOCKET@"

[ttrpc]
  address = "@SOCKET@.ttrpc"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "@PAUSE@"

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = "@RUNC_ROOT@"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "@CNI_CONF@"
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`)
}

// cniConfig is the pod network: the bridge (which upNetwork made, with
// NodeIP as the gateway) and addresses from PodCIDR. No ipMasq: a Pod's
// packets are never rewritten to leave the machine.
var cniConfig = fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "rangeStart": "10.244.0.10", "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
`, cniNetwork, Bridge, "@IPAM@", PodCIDR.String(), NodeIP.String())

// kubeletConfig: cgroup v1 allowed (this host is v1), cgroupfs, the Pods'
// cgroups under CgroupParent, its server on NodeIP with client certificates
// and webhook authorization, and no image garbage collection (the images
// were imported; there is no registry to pull them again from).
func kubeletConfig(l Layout) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: /%s
containerRuntimeEndpoint: unix://%s
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization:
  mode: Webhook
clusterDNS: [%s]
clusterDomain: %s
resolvConf: ""
failSwapOn: false
rotateCertificates: false
serverTLSBootstrap: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%%
  imagefs.available: 2%%
  nodefs.inodesFree: 2%%
evictionPressureTransitionPeriod: 30s
serializeImagePulls: false
shutdownGracePeriod: 0s
podLogsDir: %s
`, CgroupParent, l.containerdSocket(), NodeIP, l.pki("ca.crt"), DNSServiceIP, ClusterDomain, filepath.Join(l.Data, "pod-logs"))
}

// kubeProxyConfig: iptables mode (this kernel has no IPVS), the pod network
// as the cluster CIDR so traffic from outside it is masqueraded, its ports
// on loopback, and conntrack's host-wide limits and timeouts left as they are
// (0 means "leave it").
func kubeProxyConfig(l Layout) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: %s
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clientConnection:
  kubeconfig: %s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, PodCIDR, NodeName, NodeIP, filepath.Join(l.Data, "kube-proxy.kubeconfig"))
}

package cluster

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
)

// Versions of what the cluster runs. The Kubernetes and etcd binaries come
// from hack/tools' cache, keyed by these. Each is a pin of
// hack/versions/versions.env, whose test fails when one differs.
const (
	KubeVersion       = "v1.37.2"
	ContainerdVersion = "v2.4.2"
	CoreDNSVersion    = "v1.15.0"
	// PauseVersion is the tag of Kubernetes' own pause image of this release
	// (build/pause in k8s.io/kubernetes, kubeadm's PauseVersion).
	PauseVersion = "3.10.2"
)

// The cluster's addresses. None of them is on this host's own networks
// (192.0.2.0/24 on eth0 and loopback when this was chosen); each is routed to
// an interface the cluster made, and the TS-CLUSTER chains drop any packet to
// or from them that would leave through another one.
var (
	// PodCIDR is the whole pod network, on the bridge: one node holds all of it.
	PodCIDR = netip.MustParsePrefix("10.244.0.0/16")
	// NodeIP is the bridge's address: the Pods' gateway, the node's
	// InternalIP, and where the API server and the kubelet listen.
	NodeIP = netip.MustParseAddr("10.244.0.1")
	// ServiceCIDR holds the ClusterIPs, routed to a device of their own.
	ServiceCIDR = netip.MustParsePrefix("10.96.0.0/16")
	// KubernetesServiceIP is the first address of ServiceCIDR, the API
	// server's Service.
	KubernetesServiceIP = netip.MustParseAddr("10.96.0.1")
	// DNSServiceIP is the cluster DNS Service's ClusterIP.
	DNSServiceIP = netip.MustParseAddr("10.96.0.10")
)

// Names the cluster gives to what it makes on the host.
const (
	// NodeName is the one node's name.
	NodeName = "tripswitch-node"
	// Bridge is the pods' bridge, which holds NodeIP.
	Bridge = "ts-cluster0"
	// ServiceDevice receives ServiceCIDR. kube-proxy's IPVS mode uses a
	// dummy interface for this; this kernel has no dummy driver
	// (CONFIG_DUMMY is not set), and a bridge without ports routes the same
	// way: nothing it is given leaves the machine.
	ServiceDevice = "ts-cluster-svc"
	// Chain is the prefix of the iptables chains the cluster adds.
	Chain = "TS-CLUSTER"
	// CgroupParent is the cgroup, in every v1 hierarchy, under which the
	// kubelet puts its Pods (cgroupRoot).
	CgroupParent = "tripswitch-cluster"
	// APIServerPort is the API server's secure port on NodeIP.
	APIServerPort = 6443
	// ClusterDomain is the DNS domain of Services.
	ClusterDomain = "cluster.local"
)

// Layout is where the cluster keeps its files, and where the binaries it runs
// are.
type Layout struct {
	// Data holds what lasts while the cluster exists: PKI, kubeconfigs,
	// etcd, containerd's content, the kubelet's root, logs.
	Data string
	// State holds what lives only while the processes run: sockets, pid
	// files, runc's state, network namespaces.
	State string
	// Cache is the per-user build cache of hack/tools (…/.cache/tripswitch).
	Cache string
	// Root is prefixed to the paths fixed in the components' code that
	// Down cleans and Leftovers checks (/var/lib/kubelet/…,
	// /var/log/containers, …); "" is the host's /. Tests set it.
	Root string
}

// DefaultLayout is /var/lib/tripswitch-cluster and /run/tripswitch-cluster,
// with TRIPSWITCH_CLUSTER_DIR and TRIPSWITCH_CLUSTER_STATE overriding them,
// and hack/tools' cache (TRIPSWITCH_CACHE_DIR, else XDG_CACHE_HOME or
// ~/.cache, then /tripswitch).
func DefaultLayout() (Layout, error) {
	l := Layout{
		Data:  envOr("TRIPSWITCH_CLUSTER_DIR", "/var/lib/tripswitch-cluster"),
		State: envOr("TRIPSWITCH_CLUSTER_STATE", "/run/tripswitch-cluster"),
		Cache: os.Getenv("TRIPSWITCH_CACHE_DIR"),
	}
	if l.Cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return l, fmt.Errorf("find the build cache: %w (set TRIPSWITCH_CACHE_DIR)", err)
			}
			base = filepath.Join(home, ".cache")
		}
		l.Cache = filepath.Join(base, "tripswitch")
	}
	return l, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// KubeCacheDir is where kubectl and Helm keep their discovery and HTTP
// caches of this cluster (KUBECACHEDIR; by default ~/.kube/cache), so that
// they go with it.
func (l Layout) KubeCacheDir() string { return filepath.Join(l.State, "kube-cache") }

// Kubeconfig is the administrator's kubeconfig (system:masters).
func (l Layout) Kubeconfig() string { return filepath.Join(l.Data, "admin.kubeconfig") }

// Bin is the path of a cached binary: the Kubernetes ones and etcd under
// k8s/<version>, containerd's under containerd/<version>, CoreDNS and pause
// under theirs.
func (l Layout) Bin(name string) string {
	switch name {
	case "containerd", "containerd-shim-runc-v2", "ctr":
		return filepath.Join(l.Cache, "containerd", ContainerdVersion, name)
	case "coredns":
		return filepath.Join(l.Cache, "coredns", CoreDNSVersion, name)
	case "pause":
		return filepath.Join(l.Cache, "pause", PauseVersion, name)
	default:
		return filepath.Join(l.Cache, "k8s", KubeVersion, name)
	}
}

// host is a path fixed in a component's code, under Root.
func (l Layout) host(path string) string { return filepath.Join("/", l.Root, path) }

func (l Layout) pki(name string) string     { return filepath.Join(l.Data, "pki", name) }
func (l Layout) log(name string) string     { return filepath.Join(l.Data, "logs", name+".log") }
func (l Layout) pidFile(name string) string { return filepath.Join(l.State, "pids", name) }
func (l Layout) containerdSocket() string {
	return filepath.Join(l.State, "containerd", "containerd.sock")
}
func (l Layout) componentConfig(n string) string { return filepath.Join(l.Data, "config", n) }

// sysctlFile keeps the sysctls' values from before the cluster, in Data so
// that a reboot (which empties State) still finds them.
func (l Layout) sysctlFile() string { return filepath.Join(l.Data, "sysctls.before") }

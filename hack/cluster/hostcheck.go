package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
)

// ErrCannotRun wraps every reason this machine cannot run the cluster, so a
// caller (make test) can say how to go on without one.
var ErrCannotRun = errors.New("this machine cannot run the cluster")

// hostTools are the host's programs the cluster uses, and the Debian package
// of each.
var hostTools = map[string]string{
	"runc":      "runc",
	"iptables":  "iptables",
	"conntrack": "conntrack",
	"ip":        "iproute2",
}

// cniPlugins are the CNI plugins the pod network uses (Debian's
// containernetworking-plugins puts them in /usr/lib/cni).
var cniPlugins = []string{"bridge", "host-local", "loopback"}

// ports the cluster listens on, on loopback.
var loopbackPorts = []int{2379, 2380, 10248, 10249, 10256, 10257, 10259}

// CheckHost says what keeps this machine from running the cluster: not
// root, a missing binary or host tool, cgroup v1 controllers missing, a port
// or a name the cluster uses already taken. Each problem is listed with what
// fixes it.
func CheckHost(l Layout) error {
	var problems []string
	if os.Geteuid() != 0 {
		problems = append(problems, "not root: the kubelet, containerd and the pod network need root (run as root, or CLUSTER=skip make test)")
	}
	for tool, pkg := range hostTools {
		if _, err := exec.LookPath(tool); err != nil {
			problems = append(problems, fmt.Sprintf("no %s on PATH (apt-get install -y %s)", tool, pkg))
		}
	}
	for _, p := range cniPlugins {
		if _, err := os.Stat("/usr/lib/cni/" + p); err != nil {
			problems = append(problems, fmt.Sprintf("no CNI plugin /usr/lib/cni/%s (apt-get install -y containernetworking-plugins)", p))
		}
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "containerd", "containerd-shim-runc-v2", "ctr", "coredns", "pause"} {
		if _, err := os.Stat(l.Bin(b)); err != nil {
			problems = append(problems, fmt.Sprintf("no %s at %s (make cluster-tools builds it)", b, l.Bin(b)))
		}
	}
	for _, c := range []string{"cpu", "cpuacct", "cpuset", "memory", "pids"} {
		if !cgroupMounted(c) {
			problems = append(problems, fmt.Sprintf("the cgroup controller %s is not mounted under /sys/fs/cgroup", c))
		}
	}
	for _, port := range loopbackPorts {
		if err := portFree("127.0.0.1", port); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, dev := range []string{Bridge, ServiceDevice} {
		if linkExists(dev) {
			problems = append(problems, fmt.Sprintf("the link %s exists: a cluster was not taken down (make cluster-down)", dev))
		}
	}
	if out, err := exec.Command("ip", "route", "show", "match", NodeIP.String()).Output(); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" && !strings.HasPrefix(line, "default") {
				problems = append(problems, fmt.Sprintf("%s is already routed on this host (%s): the cluster's addresses would collide", NodeIP, line))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w:\n  - %s", ErrCannotRun, strings.Join(problems, "\n  - "))
	}
	return nil
}

func portFree(host string, port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		return fmt.Errorf("port %s:%d is taken (the cluster needs it): %v", host, port, err)
	}
	return ln.Close()
}

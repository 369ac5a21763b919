package cluster

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The paths a component writes whatever its flags and configuration say:
// fixed in its code, so the cluster cannot move them into its own
// directories. Down removes what the cluster put there, and each of them
// once it is empty; Leftovers looks at every one.
const (
	// shimSocketDir is where containerd's runc shims put their sockets
	// (containerd's defaults.DefaultStateDir + "/s").
	shimSocketDir = "/run/containerd/s"
	// containerLogLinks is where the kubelet links each container's log
	// (kubelet.ContainerLogsDir); the links point into Data.
	containerLogLinks = "/var/log/containers"
	// devicePluginSocket is the kubelet's device-plugin registration socket
	// (pluginapi.KubeletSocket), whatever --root-dir says.
	devicePluginSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"
	// defaultKubeletCertDir is the kubelet's --cert-dir default, whatever
	// --root-dir says: its self-signed serving certificate and key go there
	// unless --cert-dir or tlsCertFile say otherwise (the cluster sets
	// --cert-dir; a cluster of an earlier version did not).
	defaultKubeletCertDir = "/var/lib/kubelet/pki"
	// cniResults is libcni's cache of each attachment's result (containerd's
	// CNI), one file per Pod named after the network: tripswitch-<id>-<if>.
	cniResults = "/var/lib/cni/results"
)

// fixedDirs are the directories of those paths and their parents, deepest
// first: each goes once it is empty, since nothing but the cluster made it
// on this host (its Pods and kubelet are the only ones here).
var fixedDirs = []string{
	shimSocketDir, filepath.Dir(shimSocketDir),
	containerLogLinks,
	filepath.Dir(devicePluginSocket), defaultKubeletCertDir, "/var/lib/kubelet",
	"/var/lib/cni/networks/" + cniNetwork, "/var/lib/cni/networks", cniResults, "/var/lib/cni",
	// util-linux's mount, which the kubelet runs for volumes, keeps its
	// table of userspace mount options there.
	"/run/mount",
}

// cniNetwork is the pod network's name in its CNI configuration.
const cniNetwork = "tripswitch"

// Down stops the cluster and removes everything it made: its Pods (through
// the CRI, so each sandbox's network is torn down by CNI), its processes,
// mounts, cgroups, iptables rules, links and files; the sysctls it changed
// get their values back. Each step runs even if an earlier one failed; the
// error lists all that failed. Leftovers then finds nothing.
func Down(ctx context.Context, l Layout, w io.Writer) error {
	began := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(w, "%6.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	var errs []error
	for _, name := range []string{"kube-proxy", "kubelet"} {
		errs = append(errs, stop(l, name, 10*time.Second))
	}
	if _, ok := running(l, "containerd"); ok {
		n, err := removeSandboxes(ctx, l)
		errs = append(errs, err)
		step("%d pod sandboxes stopped and removed through the CRI", n)
	}
	errs = append(errs, stop(l, "containerd", 10*time.Second))
	for _, pid := range processesMentioning(l.containerdSocket()) {
		errs = append(errs, terminate(pid, 5*time.Second))
	}
	for _, name := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"} {
		errs = append(errs, stop(l, name, 10*time.Second))
	}
	step("processes stopped")
	errs = append(errs, removeCgroupParent())
	errs = append(errs, unmountUnder(l.State, l.Data))
	errs = append(errs, downNetwork(l))
	for _, dir := range []string{l.State, l.Data} {
		errs = append(errs, os.RemoveAll(dir))
	}
	errs = append(errs, removeFixedPaths(l))
	step("mounts, cgroups, iptables rules, links and files removed")
	if left := Leftovers(l); len(left) > 0 {
		errs = append(errs, fmt.Errorf("left behind:\n  - %s", strings.Join(left, "\n  - ")))
	}
	return errors.Join(errs...)
}

// removeSandboxes stops and removes every pod sandbox through containerd's
// CRI, as the kubelet would: CNI DEL for each network, then the sandbox.
func removeSandboxes(ctx context.Context, l Layout) (int, error) {
	conn, err := grpc.NewClient("unix://"+l.containerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, fmt.Errorf("CRI: %w", err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("CRI: list sandboxes: %w", err)
	}
	var errs []error
	for _, s := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("CRI: stop sandbox %s/%s: %w", s.Metadata.GetNamespace(), s.Metadata.GetName(), err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("CRI: remove sandbox %s/%s: %w", s.Metadata.GetNamespace(), s.Metadata.GetName(), err))
		}
	}
	return len(list.Items), errors.Join(errs...)
}

// mountsUnder lists the mount points under any of dirs, deepest first.
func mountsUnder(dirs ...string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		for _, d := range dirs {
			if p == d || strings.HasPrefix(p, d+"/") {
				points = append(points, p)
			}
		}
	}
	slices.SortFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return slices.Compact(points)
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// unmountUnder unmounts everything under dirs: the kubelet's volumes,
// containerd's snapshots and network namespaces, if a process did not.
func unmountUnder(dirs ...string) error {
	var errs []error
	for range 3 { // a mount can be stacked on another at the same point
		points := mountsUnder(dirs...)
		if len(points) == 0 {
			return nil
		}
		for _, p := range points {
			if err := syscall.Unmount(p, 0); err != nil {
				if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
					errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
				}
			}
		}
	}
	if left := mountsUnder(dirs...); len(left) > 0 {
		errs = append(errs, fmt.Errorf("still mounted: %v", left))
	}
	return errors.Join(errs...)
}

// removeFixedPaths removes what the cluster's components wrote at paths
// fixed in their code (fixedDirs), then each of those directories that is
// empty. Nothing else there is touched.
func removeFixedPaths(l Layout) error {
	var errs []error
	for _, p := range clusterFilesAtFixedPaths(l) {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	for _, dir := range fixedDirs {
		if err := syscall.Rmdir(l.host(dir)); err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			errs = append(errs, fmt.Errorf("remove %s: %w", l.host(dir), err))
		}
	}
	return errors.Join(errs...)
}

// clusterFilesAtFixedPaths lists the files a cluster's components wrote at
// the fixed paths: log links into Data, the device-plugin socket, CNI
// results of the cluster's network, and a kubelet serving certificate and
// key issued to the cluster's node (its subject is the node's name, then @).
func clusterFilesAtFixedPaths(l Layout) []string {
	var files []string
	if entries, err := os.ReadDir(l.host(containerLogLinks)); err == nil {
		for _, e := range entries {
			p := filepath.Join(l.host(containerLogLinks), e.Name())
			if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, l.Data+"/") {
				files = append(files, p)
			}
		}
	}
	if fi, err := os.Lstat(l.host(devicePluginSocket)); err == nil && fi.Mode()&os.ModeSocket != 0 {
		files = append(files, l.host(devicePluginSocket))
	}
	if entries, err := os.ReadDir(l.host(cniResults)); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), cniNetwork+"-") {
				files = append(files, filepath.Join(l.host(cniResults), e.Name()))
			}
		}
	}
	// kubectl's discovery cache of the cluster's API server, named for its
	// address, where a kubectl run without KUBECACHEDIR keeps it.
	if home, err := os.UserHomeDir(); err == nil {
		d := filepath.Join(l.host(home), ".kube", "cache", "discovery", strings.ReplaceAll(net.JoinHostPort(NodeIP.String(), fmt.Sprint(APIServerPort)), ":", "_"))
		if _, err := os.Stat(d); err == nil {
			files = append(files, d)
		}
	}
	crt := filepath.Join(l.host(defaultKubeletCertDir), "kubelet.crt")
	if issuedToNode(crt) {
		files = append(files, crt, filepath.Join(l.host(defaultKubeletCertDir), "kubelet.key"))
	}
	return files
}

// issuedToNode reports whether the PEM certificate at path is a kubelet's
// self-signed serving certificate for the cluster's node: the kubelet names
// it <node name>@<unix time>.
func issuedToNode(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return false
	}
	c, err := x509.ParseCertificate(block.Bytes)
	return err == nil && strings.HasPrefix(c.Subject.CommonName, NodeName+"@")
}

// Leftovers lists what of a cluster is still on this machine: processes of
// its binaries, mounts under its directories, network namespaces and veth
// links it made, iptables chains and rules of its own, kube-proxy's or the
// kubelet's, its cgroups, its directories, and at the paths fixed in its
// components' code (fixedDirs) its files and those directories left empty.
// Empty after Down.
func Leftovers(l Layout) []string {
	var left []string
	for _, pid := range processesMentioning(l.Data, l.State) {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		left = append(left, fmt.Sprintf("process %d (%s)", pid, exe))
	}
	for _, root := range cgroupRoots() {
		dir := filepath.Join(root, CgroupParent)
		if _, err := os.Stat(dir); err == nil {
			left = append(left, "cgroup "+dir)
		}
	}
	for _, p := range mountsUnder(l.Data, l.State, "/run/containerd", "/run/netns", "/var/run/netns") {
		left = append(left, "mount "+p)
	}
	for _, dir := range []string{l.Data, l.State} {
		if _, err := os.Stat(dir); err == nil {
			left = append(left, "directory "+dir)
		}
	}
	if entries, err := os.ReadDir(l.host(shimSocketDir)); err == nil && len(entries) > 0 && len(processesMentioning("containerd-shim")) == 0 {
		left = append(left, fmt.Sprintf("%d shim sockets in %s", len(entries), l.host(shimSocketDir)))
	}
	for _, p := range clusterFilesAtFixedPaths(l) {
		left = append(left, "file "+p)
	}
	for _, dir := range fixedDirs {
		if entries, err := os.ReadDir(l.host(dir)); err == nil && len(entries) == 0 {
			left = append(left, "empty directory "+l.host(dir))
		}
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "cni-") {
				left = append(left, "network namespace /run/netns/"+e.Name())
			}
		}
	}
	if out, err := output("ip", "-o", "link", "show"); err == nil {
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if name == Bridge || name == ServiceDevice || strings.HasPrefix(name, "veth") {
				left = append(left, "link "+name)
			}
		}
	}
	for _, table := range kubeTables {
		out, err := output("iptables", "-w", "-t", table, "-S")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, Chain) || strings.Contains(line, "KUBE-") || strings.Contains(line, "CNI-") {
				left = append(left, fmt.Sprintf("iptables -t %s: %s", table, line))
			}
		}
	}
	if _, err := os.Stat(l.sysctlFile()); err == nil {
		left = append(left, "sysctls not restored ("+l.sysctlFile()+")")
	}
	return left
}

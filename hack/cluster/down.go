package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// shimSocketDir is where containerd's runc shims put their sockets: a path
// fixed in containerd (defaults.DefaultStateDir + "/s").
const shimSocketDir = "/run/containerd/s"

// ContainerLogLinks is where the kubelet links each container's log (a path
// fixed in the kubelet); Down removes the links that point into Data.
const ContainerLogLinks = "/var/log/containers"

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
	errs = append(errs, removeLogLinks(l))
	for _, dir := range []string{l.State, l.Data} {
		errs = append(errs, os.RemoveAll(dir))
	}
	// The shims' sockets live in /run/containerd/s whatever the state
	// directory; the directories go if the cluster's were the only ones.
	for _, dir := range []string{shimSocketDir, filepath.Dir(shimSocketDir)} {
		_ = syscall.Rmdir(dir)
	}
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

func removeLogLinks(l Layout) error {
	entries, err := os.ReadDir(ContainerLogLinks)
	if err != nil {
		return nil
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(ContainerLogLinks, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, l.Data+"/") {
			errs = append(errs, os.Remove(p))
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists what of a cluster is still on this machine: processes of
// its binaries, mounts under its directories, network namespaces and veth
// links it made, iptables chains and rules of its own, kube-proxy's or the
// kubelet's, its cgroups, its directories, log links. Empty after Down.
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
	for _, dir := range []string{l.Data, l.State, "/var/lib/cni/networks/tripswitch"} {
		if _, err := os.Stat(dir); err == nil {
			left = append(left, "directory "+dir)
		}
	}
	if entries, err := os.ReadDir(shimSocketDir); err == nil && len(entries) > 0 && len(processesMentioning("containerd-shim")) == 0 {
		left = append(left, fmt.Sprintf("%d shim sockets in %s", len(entries), shimSocketDir))
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
	if entries, err := os.ReadDir(ContainerLogLinks); err == nil {
		for _, e := range entries {
			if target, err := os.Readlink(filepath.Join(ContainerLogLinks, e.Name())); err == nil && strings.HasPrefix(target, l.Data+"/") {
				left = append(left, "log link "+filepath.Join(ContainerLogLinks, e.Name()))
			}
		}
	}
	if _, err := os.Stat(l.sysctlFile()); err == nil {
		left = append(left, "sysctls not restored ("+l.sysctlFile()+")")
	}
	return left
}

package stall

import (
	"slices"
	"testing"
)

// Mountinfo and /proc/self/cgroup as read on this project's cgroup v1 host
// and, on the same host, inside a container the kubelet of `make cluster`
// started (runc, no cgroup namespace on v1: the host's paths, and no
// unified mount), cut to the lines that matter and shortened ids.
const (
	hostMountinfo = `35 27 0:30 / /sys/fs/cgroup/cpu rw,relatime shared:10 - cgroup cgroup rw,cpu
36 27 0:31 / /sys/fs/cgroup/cpuacct rw,relatime shared:11 - cgroup cgroup rw,cpuacct
44 27 0:39 / /sys/fs/cgroup/unified rw,relatime shared:19 - cgroup2 cgroup2 rw`
	containerMountinfo = `1290 1288 0:30 /tripswitch-cluster/kubepods/burstable/pod7f3e/0a1b2c /sys/fs/cgroup/cpu ro,nosuid,nodev,noexec,relatime master:10 - cgroup cgroup rw,cpu
1291 1288 0:31 /tripswitch-cluster/kubepods/burstable/pod7f3e/0a1b2c /sys/fs/cgroup/cpuacct ro,nosuid,nodev,noexec,relatime master:11 - cgroup cgroup rw,cpuacct`
	containerCgroup = `2:cpuacct:/tripswitch-cluster/kubepods/burstable/pod7f3e/0a1b2c
1:cpu:/tripswitch-cluster/kubepods/burstable/pod7f3e/0a1b2c
0::/tripswitch-cluster/kubepods/burstable/pod7f3e/0a1b2c`
)

func TestCPUStatPaths(t *testing.T) {
	for _, tc := range []struct {
		name, self, mountinfo string
		want                  []string
	}{{
		name:      "a process on a v1 host reads its cgroup below the hierarchy's mount",
		self:      "2:cpu:/user.slice/job\n0::/user.slice/job",
		mountinfo: hostMountinfo,
		want:      []string{"/sys/fs/cgroup/cpu/user.slice/job/cpu.stat", "/sys/fs/cgroup/unified/user.slice/job/cpu.stat"},
	}, {
		name:      "a container on a v1 node reads the mount itself: it is the container's cgroup",
		self:      containerCgroup,
		mountinfo: containerMountinfo,
		want:      []string{"/sys/fs/cgroup/cpu/cpu.stat"},
	}, {
		name:      "a combined cpu,cpuacct hierarchy counts as cpu",
		self:      "4:cpu,cpuacct:/kubepods/pod1/c1",
		mountinfo: "30 25 0:27 /kubepods/pod1/c1 /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct",
		want:      []string{"/sys/fs/cgroup/cpu,cpuacct/cpu.stat"},
	}, {
		name:      "a cgroup v2 container with its own cgroup namespace",
		self:      "0::/",
		mountinfo: "40 30 0:26 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw",
		want:      []string{"/sys/fs/cgroup/cpu.stat"},
	}, {
		name:      "a cgroup outside the mount's root is not reachable from here",
		self:      "2:cpu:/kubepods-other/c2",
		mountinfo: "30 25 0:27 /kubepods /sys/fs/cgroup/cpu ro - cgroup cgroup rw,cpu",
		want:      nil,
	}, {
		name: "without mountinfo the usual mount points, as on a host",
		self: "2:cpu:/a\n0::/a",
		want: []string{"/sys/fs/cgroup/cpu/a/cpu.stat", "/sys/fs/cgroup/cpu,cpuacct/a/cpu.stat", "/sys/fs/cgroup/cpuacct,cpu/a/cpu.stat",
			"/sys/fs/cgroup/a/cpu.stat", "/sys/fs/cgroup/unified/a/cpu.stat"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cpuStatPaths(tc.self, tc.mountinfo); !slices.Equal(got, tc.want) {
				t.Errorf("cpuStatPaths:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

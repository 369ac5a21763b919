package stall

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Throttling is a cgroup's CPU throttling so far: of Periods enforcement
// periods with a quota, Throttled ran out of quota, for Time in all.
type Throttling struct {
	Periods, Throttled int64
	Time               time.Duration
}

// cgroupCPU reads one cgroup's cpu.stat. v2 names the fields nr_periods,
// nr_throttled and throttled_usec; v1 (cpu,cpuacct) throttled_time in
// nanoseconds.
type cgroupCPU struct{ path string }

func (c *cgroupCPU) read() (Throttling, bool) {
	b, err := os.ReadFile(c.path)
	if err != nil {
		return Throttling{}, false
	}
	return parseCPUStat(b)
}

func parseCPUStat(b []byte) (Throttling, bool) {
	var t Throttling
	found := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "nr_periods":
			t.Periods, found = n, true
		case "nr_throttled":
			t.Throttled = n
		case "throttled_usec":
			t.Time = time.Duration(n) * time.Microsecond
		case "throttled_time":
			t.Time = time.Duration(n)
		}
	}
	return t, found
}

// findCgroupCPU finds the process's own cgroup's cpu.stat: the v1 cpu
// controller's where there is one (on a hybrid host the quota is the v1
// controller's), else the unified (v2) hierarchy's.
func findCgroupCPU() *cgroupCPU {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	// A v2 cpu.stat without nr_periods belongs to a cgroup without the cpu
	// controller: it can say nothing about a quota.
	for _, p := range cpuStatPaths(string(self), string(mounts)) {
		if c := (&cgroupCPU{path: p}); c.readable() {
			return c
		}
	}
	return nil
}

// cpuStatPaths lists where the cgroup that /proc/self/cgroup names may keep
// its cpu.stat, v1 first. /proc/self/cgroup gives a path from the
// hierarchy's root; mountinfo says where that hierarchy is mounted and which
// of its cgroups the mount shows as its root. On a host that is the root
// itself (/sys/fs/cgroup/cpu is the cpu hierarchy's "/"). In a container on
// a cgroup v1 node there is no cgroup namespace: /proc/self/cgroup still
// names the host's path (/kubepods/burstable/pod…/<container>), while the
// container's /sys/fs/cgroup/cpu is that very cgroup, mounted with the same
// path as its root. So the file is the mount point joined with the path
// below the mount's root; a cgroup outside the mount is not reachable from
// here. Without mountinfo, the usual mount points are tried with the whole
// path, as on a host.
func cpuStatPaths(self, mountinfo string) []string {
	var v1, v2 []cgroupMount
	for line := range strings.SplitSeq(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		m := cgroupMount{root: unescapeMountinfo(f[3]), point: unescapeMountinfo(f[4])}
		switch {
		case g[0] == "cgroup2":
			v2 = append(v2, m)
		case g[0] == "cgroup" && hasController(g[2], "cpu"):
			v1 = append(v1, m)
		}
	}
	if len(v1)+len(v2) == 0 {
		v1 = []cgroupMount{{"/", "/sys/fs/cgroup/cpu"}, {"/", "/sys/fs/cgroup/cpu,cpuacct"}, {"/", "/sys/fs/cgroup/cpuacct,cpu"}}
		v2 = []cgroupMount{{"/", "/sys/fs/cgroup"}, {"/", "/sys/fs/cgroup/unified"}}
	}
	var first, second []string
	for line := range strings.SplitSeq(strings.TrimSpace(self), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			second = append(second, under(v2, parts[2])...)
		case hasController(parts[1], "cpu"):
			first = append(first, under(v1, parts[2])...)
		}
	}
	return append(first, second...)
}

// cgroupMount is a mounted cgroup hierarchy: the cgroup shown as its root,
// and where.
type cgroupMount struct{ root, point string }

// under joins each mount point with the part of path below the mount's
// root, for the mounts whose root holds path.
func under(mounts []cgroupMount, path string) []string {
	var out []string
	for _, m := range mounts {
		rel, ok := strings.CutPrefix(path, m.root)
		if m.root == "/" {
			rel, ok = path, true
		} else if ok && rel != "" && rel[0] != '/' {
			ok = false // /kubepods-x is not below /kubepods
		}
		if ok {
			out = append(out, filepath.Join(m.point, rel, "cpu.stat"))
		}
	}
	return out
}

// unescapeMountinfo undoes mountinfo's octal escapes of space, tab, newline
// and backslash.
func unescapeMountinfo(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

func (c *cgroupCPU) readable() bool { _, ok := c.read(); return ok }

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

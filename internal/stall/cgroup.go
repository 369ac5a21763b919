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
// controller's), else the unified (v2) hierarchy's. Inside a container the
// cgroup namespace makes its own cgroup the root, which the paths in
// /proc/self/cgroup then say.
func findCgroupCPU() *cgroupCPU {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	var v1, v2 []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = append(v2, filepath.Join("/sys/fs/cgroup", parts[2], "cpu.stat"),
				filepath.Join("/sys/fs/cgroup/unified", parts[2], "cpu.stat"))
		case hasController(parts[1], "cpu"):
			for _, dir := range []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"} {
				v1 = append(v1, filepath.Join("/sys/fs/cgroup", dir, parts[2], "cpu.stat"))
			}
		}
	}
	// A v2 cpu.stat without nr_periods belongs to a cgroup without the cpu
	// controller: it can say nothing about a quota.
	for _, p := range append(v1, v2...) {
		if c := (&cgroupCPU{path: p}); c.readable() {
			return c
		}
	}
	return nil
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

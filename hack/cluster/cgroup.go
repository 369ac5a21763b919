package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// cgroupRoots are this host's v1 hierarchies (and the unified one of a
// hybrid host), each of which gets the CgroupParent directory.
func cgroupRoots() []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var roots []string
	for _, e := range entries {
		if e.IsDir() {
			roots = append(roots, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return roots
}

func cgroupMounted(controller string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		_, after, ok := strings.Cut(line, " - cgroup ")
		if !ok {
			continue
		}
		f := strings.Fields(after)
		if len(f) >= 2 && slices.Contains(strings.Split(f[1], ","), controller) {
			return true
		}
	}
	return false
}

// makeCgroupParent creates CgroupParent in every hierarchy; the kubelet wants
// its cgroupRoot to exist. A new cpuset cgroup has no CPUs or memory nodes
// until it is given its parent's.
func makeCgroupParent() error {
	for _, root := range cgroupRoots() {
		dir := filepath.Join(root, CgroupParent)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(root, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("cgroup %s: %w", dir, err)
				}
			}
		}
	}
	return nil
}

// removeCgroupParent kills whatever is left in CgroupParent's tree (the
// containers, once their shims are gone) and removes it, deepest first.
func removeCgroupParent() error {
	var errs []error
	for _, root := range cgroupRoots() {
		top := filepath.Join(root, CgroupParent)
		if _, err := os.Stat(top); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for _, d := range dirs {
			for _, pid := range cgroupProcs(d) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		slices.Reverse(dirs)
		for _, d := range dirs {
			var err error
			for range 50 {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, os.ErrNotExist) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// component is one process of the cluster.
type component struct {
	name string
	bin  string
	args []string
	env  []string
}

// start runs c detached from the caller (a session of its own, output to
// Data/logs/<name>.log), so it outlives `make cluster`, and records its pid.
func start(l Layout, c component) error {
	if err := os.MkdirAll(filepath.Dir(l.pidFile(c.name)), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(l.log(c.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log: %w", c.name, err)
	}
	defer logf.Close()
	cmd := exec.Command(c.bin, c.args...)
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = l.Data
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.name, err)
	}
	pid := cmd.Process.Pid
	// Nobody waits for it: it is reparented to init when this program exits.
	if err := cmd.Process.Release(); err != nil {
		return err
	}
	return os.WriteFile(l.pidFile(c.name), []byte(strconv.Itoa(pid)+"\n"+c.bin+"\n"), 0o644)
}

// running reports the pid of a component whose pid file names a process
// that is still the binary it started.
func running(l Layout, name string) (int, bool) {
	b, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return 0, false
	}
	pidStr, bin, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	pid, err := strconv.Atoi(pidStr)
	if err != nil {
		return 0, false
	}
	return pid, isBinary(pid, bin)
}

// isBinary reports whether pid runs bin (and so was not reused by another
// process since the pid file was written).
func isBinary(pid int, bin string) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && strings.TrimSuffix(exe, " (deleted)") == bin
}

// stop sends SIGTERM to the component and waits up to grace for it to exit,
// then SIGKILL; the pid file goes.
func stop(l Layout, name string, grace time.Duration) error {
	pid, ok := running(l, name)
	defer os.Remove(l.pidFile(name))
	if !ok {
		return nil
	}
	return terminate(pid, grace)
}

func terminate(pid int, grace time.Duration) error {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	for range 100 {
		if !alive(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("process %d survived SIGKILL", pid)
}

// alive: the process exists and is not a zombie waiting for its parent.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// processesMentioning lists the pids whose command line names any of
// paths: the cluster's own processes, and the shims, which containerd starts
// detached with its socket's path and which outlive it. The Kubernetes
// binaries are shared with envtest, so what a process runs says nothing of
// whose it is; its arguments do.
func processesMentioning(paths ...string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		cmdline := string(b)
		for _, p := range paths {
			if strings.Contains(cmdline, p) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

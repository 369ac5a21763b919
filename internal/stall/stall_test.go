package stall

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseCPUStat(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Throttling
		ok       bool
	}{
		{"cgroup v2", "usage_usec 123\nuser_usec 100\nsystem_usec 23\nnr_periods 50\nnr_throttled 7\nthrottled_usec 420000\n",
			Throttling{Periods: 50, Throttled: 7, Time: 420 * time.Millisecond}, true},
		{"cgroup v1", "nr_periods 1824\nnr_throttled 1821\nthrottled_time 170000000000\n",
			Throttling{Periods: 1824, Throttled: 1821, Time: 170 * time.Second}, true},
		{"v2 without the cpu controller", "usage_usec 123\nuser_usec 100\nsystem_usec 23\n", Throttling{}, false},
		{"garbage", "nr_periods x\n\n:::\n", Throttling{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseCPUStat([]byte(tc.in))
			if ok != tc.ok || got != tc.want {
				t.Fatalf("parseCPUStat = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestPercentile99(t *testing.T) {
	// Buckets: [0, 1ms), [1ms, 10ms), [10ms, 100ms), [100ms, +Inf).
	buckets := []float64{0, 0.001, 0.010, 0.100, math.Inf(1)}
	for _, tc := range []struct {
		name         string
		prev, counts []uint64
		want         time.Duration
	}{
		{"all fast", []uint64{0, 0, 0, 0}, []uint64{1000, 0, 0, 0}, 0},
		{"one percent slow is the tail, not the 99th", []uint64{0, 0, 0, 0}, []uint64{990, 0, 10, 0}, 0},
		{"a crowded run queue", []uint64{0, 0, 0, 0}, []uint64{500, 0, 300, 200}, 100 * time.Millisecond},
		{"only the events since the last read count", []uint64{0, 0, 0, 5000}, []uint64{1000, 0, 0, 5000}, 0},
		{"too few events to say", []uint64{0, 0, 0, 0}, []uint64{0, 0, 0, 19}, 0},
		{"most waited 10-100 ms", []uint64{10, 10, 10, 10}, []uint64{10, 10, 110, 10}, 10 * time.Millisecond},
	} {
		if got := percentile99(tc.prev, tc.counts, buckets); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestStalledAddsOverlaps(t *testing.T) {
	w := New(Options{CPUStat: "-"})
	base := time.Now()
	w.started = true
	w.lastBeat = base.Add(time.Hour) // no stall in progress
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	for _, iv := range []interval{{at(0), at(90)}, {at(100), at(190)}, {at(300), at(310)}} {
		w.all.add(iv)
	}
	for _, tc := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 250, 180 * time.Millisecond},
		{50, 150, 90 * time.Millisecond},
		{190, 300, 0},
		{305, 400, 5 * time.Millisecond},
		{400, 500, 0},
		{80, 80, 0},
	} {
		if got := w.Stalled(at(tc.from), at(tc.to)); got != tc.want {
			t.Errorf("Stalled(%d ms, %d ms) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
	// A late beat and the run queue's latency of one throttled period
	// overlap: they are one stall, not two.
	w.all.add(interval{at(400), at(490)})
	w.all.add(interval{at(420), at(495)})
	if got := w.Stalled(at(400), at(500)); got != 95*time.Millisecond {
		t.Errorf("two overlapping stalls of one period: %v, want their union, 95ms", got)
	}
	// The scheduler's latencies are stalls, not pauses: the process ran.
	if got := w.Paused(at(0), at(500)); got != 0 {
		t.Errorf("Paused counted %v of stalls that were no pause", got)
	}
	w.paused.add(interval{at(0), at(90)})
	if got := w.Paused(at(50), at(150)); got != 40*time.Millisecond {
		t.Errorf("Paused(50 ms, 150 ms) = %v, want 40ms", got)
	}
	var nilWatch *Watch
	if got := nilWatch.Stalled(base, at(100)); got != 0 {
		t.Errorf("a nil Watch measured %v", got)
	}
}

// TestRanFindsAStretchWithoutPauses: Ran looks for a stretch of d between
// the pauses anywhere in [from, to], not only one that ends at to; a pause
// still in progress (the heartbeat not run since) counts; the scheduler's
// latencies do not (the process ran).
func TestRanFindsAStretchWithoutPauses(t *testing.T) {
	w := New(Options{CPUStat: "-"})
	base := time.Now().Add(-time.Hour)
	w.started = true
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	w.lastBeat = at(1000) // a pause in progress since the beat due at 1010 ms (now is an hour later)
	for _, iv := range []interval{{at(0), at(90)}, {at(100), at(190)}, {at(200), at(250)}, {at(260), at(400)}} {
		w.paused.add(iv)
	}
	w.all.add(interval{at(400), at(900)}) // run-queue latency only
	ms := time.Millisecond
	for _, tc := range []struct {
		from, to int
		d        time.Duration
		want     bool
	}{
		{0, 250, 10 * ms, true},      // 90–100 and 190–200
		{0, 250, 11 * ms, false},     // no gap that long
		{190, 250, 10 * ms, true},    // 190–200, at the start
		{195, 255, 10 * ms, false},   // 195–200 and 250–255: neither long enough
		{195, 259, 9 * ms, true},     // 250–259
		{95, 105, 6 * ms, false},     // 95–100 only
		{300, 1000, 600 * ms, true},  // 400–1000: the run queue was long, the process ran
		{300, 1020, 611 * ms, false}, // 400–1010, then the pause in progress
		{1010, 5000, 1 * ms, false},  // all of it in the pause in progress
		{260, 400, 1 * ms, false},    // inside a pause
		{410, 420, 10 * ms, true},    // all of it clear
		{410, 420, 11 * ms, false},   // shorter than d
	} {
		if got := w.Ran(at(tc.from), at(tc.to), tc.d); got != tc.want {
			t.Errorf("Ran(%d ms, %d ms, %v) = %v, want %v", tc.from, tc.to, tc.d, got, tc.want)
		}
	}
	var nilWatch *Watch
	if !nilWatch.Ran(base, at(10), 10*ms) || nilWatch.Ran(base, at(9), 10*ms) {
		t.Error("a nil Watch: Ran is whether the span is long enough")
	}
}

// The child half of the process tests: a Watch that reports, for each line
// "from to" (Unix nanoseconds) it reads, how long it was stalled then.
func TestMain(m *testing.M) {
	if os.Getenv("STALL_CHILD") == "1" {
		child()
		return
	}
	os.Exit(m.Run())
}

func child() {
	w := New(Options{})
	go func() { _ = w.Start(context.Background()) }()
	if os.Getenv("STALL_BUSY") == "1" {
		go func() {
			//lint:ignore SA5002 the child spends its CPU quota on purpose
			for {
			}
		}()
	}
	if n, _ := strconv.Atoi(os.Getenv("STALL_SPIN")); n > 0 {
		for range n {
			go func() {
				//lint:ignore SA5002 the goroutines keep the run queue full on purpose
				for {
				}
			}()
		}
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		from, _ := strconv.ParseInt(f[0], 10, 64)
		to, _ := strconv.ParseInt(f[1], 10, 64)
		// The parent's wall-clock times, read back on this process's clock:
		// both are the same machine's.
		th, ok := w.Throttling()
		fmt.Println(int64(w.Stalled(time.Unix(0, from), time.Unix(0, to))), th.Throttled, ok)
	}
}

type childProc struct {
	cmd *exec.Cmd
	in  *os.File
	out *bufio.Scanner
}

func startChild(t *testing.T, env ...string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, "STALL_CHILD=1")...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := &childProc{cmd: cmd, in: stdin.(*os.File), out: bufio.NewScanner(stdout)}
	if !c.out.Scan() || c.out.Text() != "ready" {
		t.Fatalf("child did not start: %q", c.out.Text())
	}
	return c
}

func (c *childProc) ask(t *testing.T, from, to time.Time) (stalled time.Duration, throttled int64) {
	t.Helper()
	if _, err := fmt.Fprintf(c.in, "%d %d\n", from.UnixNano(), to.UnixNano()); err != nil {
		t.Fatal(err)
	}
	if !c.out.Scan() {
		t.Fatal("child gave no answer")
	}
	var ok bool
	var ns int64
	if _, err := fmt.Sscan(c.out.Text(), &ns, &throttled, &ok); err != nil {
		t.Fatalf("child answered %q: %v", c.out.Text(), err)
	}
	return time.Duration(ns), throttled
}

// TestPausedProcessIsStalled: a process stopped with SIGSTOP for 400 ms
// measures, after SIGCONT, most of that as stalled. (How little a running
// process measures depends on how busy the machine is: on a loaded one it
// is not scheduled promptly either, which is a stall too.)
func TestPausedProcessIsStalled(t *testing.T) {
	c := startChild(t)
	time.Sleep(100 * time.Millisecond) // let the heartbeat run
	quiet := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if got, _ := c.ask(t, quiet, after); got < 300*time.Millisecond {
		t.Errorf("stopped for 400 ms: measured %v stalled, want most of it", got)
	}
}

// TestCrowdedSchedulerIsStalled: a process whose one CPU is shared by 40
// goroutines that never block runs a goroutine that becomes ready (a
// probe's, when its answer arrives) only after the others' time slices:
// the scheduler's latencies show it, even when the timer-woken heartbeat
// itself is served first.
func TestCrowdedSchedulerIsStalled(t *testing.T) {
	c := startChild(t, "STALL_SPIN=40", "GOMAXPROCS=1")
	from := time.Now()
	time.Sleep(time.Second)
	if got, _ := c.ask(t, from, time.Now()); got < 300*time.Millisecond {
		t.Errorf("40 spinning goroutines on one CPU for 1 s: measured %v stalled, want most of it", got)
	}
}

// TestThrottledProcessIsStalled: a busy process in a cgroup with a 10 %
// CPU quota (a Kubernetes limit of 100m) is stalled most of the time, and
// reads its throttling from cpu.stat. Needs root and a cgroup v1 cpu
// controller or a v2 hierarchy with the cpu controller enabled.
func TestThrottledProcessIsStalled(t *testing.T) {
	dir, err := newCPUCgroup(t, 10_000, 100_000)
	if err != nil {
		t.Skipf("no cgroup with a CPU quota can be made here: %v", err)
	}
	c := startChild(t, "STALL_BUSY=1", "GOMAXPROCS=1")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(c.cmd.Process.Pid)), 0o644); err != nil {
		t.Skipf("cannot move the child into %s: %v", dir, err)
	}
	from := time.Now()
	time.Sleep(time.Second)
	to := time.Now()
	got, throttled := c.ask(t, from, to)
	if got < 500*time.Millisecond {
		t.Errorf("10%% of a core for 1 s: measured %v stalled, want most of it", got)
	}
	if throttled == 0 {
		t.Errorf("cpu.stat shows no throttled period")
	}
}

// newCPUCgroup makes a cgroup with quota/period (microseconds), removed at
// the end of the test.
func newCPUCgroup(t *testing.T, quota, period int) (string, error) {
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("not root")
	}
	name := fmt.Sprintf("tripswitch-stall-test-%d", os.Getpid())
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil {
		dir := filepath.Join("/sys/fs/cgroup/cpu", name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", err
		}
		t.Cleanup(func() { _ = os.Remove(dir) })
		if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(period)), 0o644); err != nil {
			return "", err
		}
		return dir, os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(quota)), 0o644)
	}
	dir := filepath.Join("/sys/fs/cgroup", name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	return dir, os.WriteFile(filepath.Join(dir, "cpu.max"), fmt.Appendf(nil, "%d %d", quota, period), 0o644)
}

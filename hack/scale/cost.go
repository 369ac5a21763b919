package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	eventsv1 "k8s.io/api/events/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// The cost scenario: what the controller's steady state costs against a
// plain Go program doing the same probes (hack/scale/plainclient), measured
// in one run on the same webhook servers, one after the other so that they
// never compete for the CPU: the plain client, then the controller at N
// breakers, then the plain client again (the two plain measurements bracket
// the controller's, so drift in the machine's load shows as their spread).
// Each is measured over -steady after -warmup, from /proc/<pid>/stat; the
// servers count the connections they accept meanwhile, which says whether
// the probes kept theirs alive.

// sample is one process's counters at one moment.
type sample struct {
	at                  time.Time
	cpu                 float64 // seconds
	probes, alloc, reqs float64
	conns, served       int64
	goroutines, rss     float64
	anon                float64 // MiB of RSS that is not the binary's mapped pages
	healthy             float64
	// byKind: the controller's probe results by result, and its API
	// requests by method.
	byKind map[string]float64
}

// cost is one process's steady state over a window.
type cost struct {
	name                       string
	secs, cpu, probes, healthy float64
	allocPerProbe, reqs        float64
	conns, served              int64
	rss, anon, goroutines      float64
}

func (c cost) cpuShare() float64    { return c.cpu / c.secs }
func (c cost) usPerProbe() float64  { return 1e6 * c.cpu / c.probes }
func (c cost) probeRate() float64   { return c.probes / c.secs }
func (c cost) healthyRate() float64 { return c.healthy / c.secs }

func between(name string, a, b sample) cost {
	return cost{name: name, secs: b.at.Sub(a.at).Seconds(), cpu: b.cpu - a.cpu, probes: b.probes - a.probes,
		healthy: b.healthy - a.healthy, allocPerProbe: (b.alloc - a.alloc) / (b.probes - a.probes), reqs: b.reqs - a.reqs,
		conns: b.conns - a.conns, served: b.served - a.served, rss: b.rss, anon: b.anon, goroutines: b.goroutines}
}

func runCost(o options) error {
	ctx := context.Background()
	env, err := testenv.New(testenv.Options{CRDs: true, AddToScheme: scheme})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	configs := (o.n + o.perConfig - 1) / o.perConfig
	nServers := configs
	if o.servers == "webhook" {
		nServers = o.n
	}
	var down atomic.Bool
	addrs, caPEM, stopHook, err := webhookServers(nServers, &down, o.fault)
	if err != nil {
		return err
	}
	defer stopHook()
	plain, err := buildPlainClient(o, addrs, caPEM)
	if err != nil {
		return err
	}
	kind := probeKind
	if kind == "" {
		kind = v1alpha1.ProbeHTTPGet
	}
	fmt.Printf("load average at the start: %s\n", loadavg())
	fmt.Printf("cost: %d probe loops (%s, every %s, 250ms timeout) on %d TLS servers; warm-up %s, window %s each\n",
		o.n, kind, interval, nServers, o.warmup, o.steady)

	before, err := plain.measure(o)
	if err != nil {
		return err
	}
	report(before)

	ctrlProc, metricsAddr, err := startController(env)
	if err != nil {
		return err
	}
	stopCtrl := func() { _ = ctrlProc.Process.Kill(); _, _ = ctrlProc.Process.Wait() }
	defer stopCtrl()
	ready, err := newCounter(ctx, env, &v1alpha1.WebhookCircuitBreaker{}, readyCount)
	if err != nil {
		return err
	}
	if _, err := createAll(ctx, env.Client, o, addrs, caPEM); err != nil {
		return err
	}
	created := time.Now()
	_, readyAfter, err := ready.until(created, 5*time.Minute, func(total int) bool { return total == o.n })
	if err != nil {
		return fmt.Errorf("breakers never all Ready: %w", err)
	}
	fmt.Printf("controller: %d breakers Closed and healthy %.1f s after the last create\n", o.n, readyAfter.Seconds())
	pid := ctrlProc.Process.Pid
	ctrlSample := func() sample {
		s := sample{at: time.Now(), cpu: cpuSeconds(pid), conns: serverConns.Load(), served: serverRequests.Load(), rss: rssMiB(pid), anon: anonMiB(pid), byKind: map[string]float64{}}
		scrapeMetrics(metricsAddr, func(line string) {
			name, rest, _ := strings.Cut(line, "{")
			i := strings.LastIndexByte(line, ' ')
			v, _ := strconv.ParseFloat(line[i+1:], 64)
			switch {
			case name == "tripswitch_probe_results_total":
				s.probes += v
				if strings.Contains(rest, `result="Healthy"`) {
					s.healthy += v
				}
				s.byKind[label(rest, "result")] += v
			case name == "rest_client_requests_total":
				s.reqs += v
				s.byKind[label(rest, "method")] += v
			case strings.HasPrefix(line, "go_memstats_alloc_bytes_total "):
				s.alloc = v
			case strings.HasPrefix(line, "go_goroutines "):
				s.goroutines = v
			}
		})
		return s
	}
	time.Sleep(o.warmup)
	a := ctrlSample()
	time.Sleep(o.steady)
	b := ctrlSample()
	ctrl := between("controller", a, b)
	report(ctrl)
	for _, k := range []string{"Healthy", "Unhealthy", "Discarded", "Unknown", "GET", "LIST", "PATCH", "PUT", "POST"} {
		if d := b.byKind[k] - a.byKind[k]; d > 0 {
			fmt.Printf("    %s %.0f", k, d)
		}
	}
	fmt.Println()
	if err := printEvents(ctx, env, a.at, b.at); err != nil {
		return err
	}
	if *pprofAddr != "" {
		// After the window, so that profiling does not cost the measure.
		if err := saveProfiles(*pprofAddr, o.steady); err != nil {
			return err
		}
	}
	stopCtrl()
	time.Sleep(2 * time.Second) // the servers see its connections close

	after, err := plain.measure(o)
	if err != nil {
		return err
	}
	report(after)

	fmt.Printf("load average at the end: %s (this run's processes included)\n", loadavg())
	base := (before.cpuShare() + after.cpuShare()) / 2
	fmt.Printf("\n| probe | breakers | servers | plain client CPU (before / after) | plain µs/probe | controller CPU | controller µs/probe | ratio (goal ≤ 2) | requests/s at the servers, plain / controller | controller RSS (anonymous) | goroutines (per breaker) | API req/s | alloc/probe plain / controller | new connections in windows (plain / controller / plain) |\n")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	fmt.Printf("| %s | %d | %d | %.1f / %.1f %% | %.0f | %.1f %% | %.0f | %.1f× | %.0f / %.0f | %.0f MiB (%.0f) | %.0f (%.2f) | %.2f | %.1f / %.1f KiB | %d / %d / %d |\n",
		kind, o.n, nServers, 100*before.cpuShare(), 100*after.cpuShare(), 1e6*(before.cpu+after.cpu)/(before.probes+after.probes),
		100*ctrl.cpuShare(), ctrl.usPerProbe(), ctrl.cpuShare()/base, float64(before.served+after.served)/(before.secs+after.secs), float64(ctrl.served)/ctrl.secs,
		ctrl.rss, ctrl.anon, ctrl.goroutines, ctrl.goroutines/float64(o.n),
		ctrl.reqs/ctrl.secs, (before.allocPerProbe+after.allocPerProbe)/2/1024, ctrl.allocPerProbe/1024, before.conns, ctrl.conns, after.conns)
	return nil
}

func report(c cost) {
	fmt.Printf("  %-10s %5.1f %% of a core, %4.0f µs/probe, %6.1f probes/s (%6.1f healthy), %.0f requests/s served, %.1f KiB allocated/probe, RSS %.0f MiB (%.0f anonymous), %.0f goroutines, %d new server connections, %.0f API requests\n",
		c.name, 100*c.cpuShare(), c.usPerProbe(), c.probeRate(), c.healthyRate(), float64(c.served)/c.secs, c.allocPerProbe/1024, c.rss, c.anon, c.goroutines, c.conns, c.reqs)
}

// plainClient is the built baseline and its arguments.
type plainClient struct {
	bin  string
	args []string
}

func buildPlainClient(o options, addrs []string, caPEM []byte) (*plainClient, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tripswitch-cost-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "plainclient")
	build := exec.Command("go", "build", "-o", bin, "./hack/scale/plainclient")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build plain client: %w\n%s", err, out)
	}
	// The controller's probe URLs: the health path for HTTPGet, the
	// webhook's own for AdmissionReview; one loop per breaker.
	path, kind := "/healthz", "HTTPGet"
	if probeKind == v1alpha1.ProbeAdmissionReview {
		path, kind = "/mutate", string(probeKind)
	}
	var urls strings.Builder
	configs := (o.n + o.perConfig - 1) / o.perConfig
	for i := range configs {
		for j := range min(o.perConfig, o.n-i*o.perConfig) {
			fmt.Fprintf(&urls, "https://%s%s\n", serverOf(o, addrs, i, j), path)
		}
	}
	targets, ca := filepath.Join(dir, "targets"), filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(targets, []byte(urls.String()), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(ca, caPEM, 0o600); err != nil {
		return nil, err
	}
	return &plainClient{bin: bin, args: []string{"-targets", targets, "-ca", ca, "-kind", kind,
		"-interval", interval.String(), "-timeout", "250ms"}}, nil
}

// measure runs the plain client, measures its window and stops it.
func (p *plainClient) measure(o options) (cost, error) {
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), controllerEnv...) // the same GOMAXPROCS, GOMEMLIMIT
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return cost{}, err
	}
	if err := cmd.Start(); err != nil {
		return cost{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(out)
	pid := cmd.Process.Pid
	read := func() (sample, error) {
		s := sample{at: time.Now(), cpu: cpuSeconds(pid), conns: serverConns.Load(), served: serverRequests.Load(), rss: rssMiB(pid), anon: anonMiB(pid)}
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			return s, err
		}
		if !lines.Scan() {
			return s, fmt.Errorf("plain client: no counters (%v)", lines.Err())
		}
		for _, kv := range strings.Fields(lines.Text()) {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "probes":
				s.probes = f
			case "healthy":
				s.healthy = f
			case "goroutines":
				s.goroutines = f
			case "alloc":
				s.alloc = f
			}
		}
		return s, nil
	}
	time.Sleep(o.warmup)
	a, err := read()
	if err != nil {
		return cost{}, err
	}
	time.Sleep(o.steady)
	b, err := read()
	if err != nil {
		return cost{}, err
	}
	return between("plain", a, b), nil
}

// loadavg is the machine's load: 1, 5 and 15 minute averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// printEvents prints the reasons of the events the controller sent between
// from and to: what its API requests in a window were for.
func printEvents(ctx context.Context, env *testenv.Env, from, to time.Time) error {
	var list eventsv1.EventList
	if err := env.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	by := map[string]int{}
	for _, e := range list.Items {
		if at := e.EventTime.Time; !at.Before(from) && at.Before(to) {
			by[e.Reason+" ("+e.Type+")"]++
		}
	}
	if len(by) == 0 {
		return nil
	}
	reasons := slices.Sorted(maps.Keys(by))
	fmt.Print("    events in the window:")
	for _, r := range reasons {
		fmt.Printf(" %s %d", r, by[r])
	}
	fmt.Println()
	return nil
}

// saveProfiles saves the controller's CPU profile over d, an execution
// trace of 5 s, the allocations since it started (for go tool pprof and go
// tool trace) and its goroutines by stack.
func saveProfiles(addr string, d time.Duration) error {
	dir, err := os.MkdirTemp("", "tripswitch-cost-profiles-")
	if err != nil {
		return err
	}
	for _, p := range []struct{ file, path string }{
		{"cpu.pprof", fmt.Sprintf("profile?seconds=%d", int(d.Seconds()))},
		{"allocs.pprof", "allocs"},
		{"trace.out", "trace?seconds=5"},
		{"goroutines.txt", "goroutine?debug=1"},
	} {
		resp, err := http.Get("http://" + addr + "/debug/pprof/" + p.path)
		if err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(dir, p.file))
		if err == nil {
			_, err = io.Copy(f, resp.Body)
			_ = f.Close()
		}
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
	}
	fmt.Println("  controller profiles (steady state, after the window):", dir)
	return nil
}

// label is the value of one label in a metric line's label set.
func label(labels, name string) string {
	_, v, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, `"`)
	return v
}

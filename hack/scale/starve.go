package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// The starve scenario: N healthy webhooks, the controller as two replicas
// with leader election (the chart's Lease timings), each in a cgroup of
// its own with a CPU quota (what resources.limits.cpu is), through the
// moments a controller is at its busiest or not running at all: the
// breakers' creation, a restart (kill -9 and start again), a leader
// failover, and the leader paused (SIGSTOP) for 2, 5 and 10 s. Every
// circuit opened meanwhile is a false fail-open: the webhooks never
// failed. Then a real outage under the same limit: how long until every
// circuit is open, and after recovery closed.

// replica is one controller process and its cgroup.
type replica struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	metrics string
	pprof   string // with -pprof: where it serves pprof
	cgroup  string
}

// replicas runs the controller's replicas and restarts one that exits, as
// the kubelet restarts a container.
type replicas struct {
	bin, kubeconfig, dir string
	quota                float64 // of one core; 0: no limit

	mu      sync.Mutex
	running []*replica
	stopped atomic.Bool
	starts  int
}

func newReplicas(env *testenv.Env, quota float64) (*replicas, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tripswitch-starve-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "tripswitch")
	build := exec.Command("go", releaseBuild("-o", bin, "./cmd/tripswitch")...) // as `make build` and the image build it
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build controller: %w\n%s", err, out)
	}
	kc, err := env.AdminKubeconfig()
	if err != nil {
		return nil, err
	}
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		return nil, err
	}
	return &replicas{bin: bin, kubeconfig: kcPath, dir: dir, quota: quota}, nil
}

// start starts a replica named name, in a cgroup with the quota.
func (rs *replicas) start(name string) (*replica, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	rs.mu.Lock()
	rs.starts++
	logPath := filepath.Join(rs.dir, fmt.Sprintf("%s-%d.log", name, rs.starts))
	rs.mu.Unlock()
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{"--kubeconfig", rs.kubeconfig, "--metrics-secure=false", "--metrics-bind-address", addr,
		"--health-probe-bind-address=0", "--leader-election-namespace=default", "--zap-time-encoding=rfc3339nano"}, controllerArgs...)
	pprof := ""
	if *pprofAddr != "" {
		pl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		pprof = pl.Addr().String()
		_ = pl.Close()
		args = append(args, "--pprof-bind-address", pprof)
	}
	cmd := exec.Command(rs.bin, args...)
	cmd.Env = append(os.Environ(), controllerEnv...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &replica{name: name, cmd: cmd, done: make(chan struct{}), metrics: addr, pprof: pprof}
	if rs.quota > 0 {
		if r.cgroup, err = cpuCgroup(fmt.Sprintf("tripswitch-starve-%d", cmd.Process.Pid), rs.quota, cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			return nil, err
		}
	}
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(r.done)
		if r.cgroup != "" {
			_ = os.Remove(r.cgroup)
		}
		rs.mu.Lock()
		for i, o := range rs.running {
			if o == r {
				rs.running = append(rs.running[:i], rs.running[i+1:]...)
				break
			}
		}
		rs.mu.Unlock()
		if !rs.stopped.Load() {
			time.Sleep(time.Second) // the kubelet's first restart delay is 10 s; 1 s keeps the run short
			if _, err := rs.start(name); err != nil {
				fmt.Println("restart", name+":", err)
			}
		}
	}()
	rs.mu.Lock()
	rs.running = append(rs.running, r)
	rs.mu.Unlock()
	return r, nil
}

// leader is the replica whose metrics say it leads, or nil.
func (rs *replicas) leader() *replica {
	rs.mu.Lock()
	running := append([]*replica(nil), rs.running...)
	rs.mu.Unlock()
	for _, r := range running {
		lead := false
		scrapeMetrics(r.metrics, func(line string) {
			if strings.HasPrefix(line, "leader_election_master_status{") && strings.HasSuffix(line, " 1") {
				lead = true
			}
		})
		if lead {
			return r
		}
	}
	return nil
}

func (rs *replicas) waitLeader(limit time.Duration) (*replica, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if l := rs.leader(); l != nil {
			return l, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("no leader after %s", limit)
}

func (rs *replicas) stop() {
	rs.stopped.Store(true)
	rs.mu.Lock()
	running := append([]*replica(nil), rs.running...)
	rs.mu.Unlock()
	for _, r := range running {
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// throttling sums the cgroups' cpu.stat of the running replicas.
func (rs *replicas) cpu() (usage float64, periods, throttled int64) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, r := range rs.running {
		usage += cpuSeconds(r.cmd.Process.Pid)
		if r.cgroup == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(r.cgroup, "cpu.stat"))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "nr_periods":
				periods += n
			case "nr_throttled":
				throttled += n
			}
		}
	}
	return usage, periods, throttled
}

// cpuCgroup makes a cgroup with a CPU quota of share cores over 100 ms
// periods (v1 cpu controller, else v2) and moves pid into it.
func cpuCgroup(name string, share float64, pid int) (string, error) {
	quota := int(share * 100_000)
	return cgroupWith(name, pid,
		map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": strconv.Itoa(quota)},
		map[string]string{"cpu.max": fmt.Sprintf("%d 100000", quota)})
}

// weightCgroup makes a cgroup whose CPU weight is shares (v1 cpu.shares,
// 1024 for a whole CPU, as the kubelet sets from a CPU request; v2
// cpu.weight, converted as the kubelet does) and moves pid into it.
func weightCgroup(name string, shares int, pid int) (string, error) {
	weight := 1 + ((shares-2)*9999)/262142
	return cgroupWith(name, pid,
		map[string]string{"cpu.shares": strconv.Itoa(shares)},
		map[string]string{"cpu.weight": strconv.Itoa(weight)})
}

// cgroupWith makes cgroup name under the v1 cpu controller with files v1,
// else under the v2 hierarchy with files v2, and moves pid into it.
func cgroupWith(name string, pid int, v1, v2 map[string]string) (string, error) {
	root, files := "/sys/fs/cgroup", v2
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.shares"); err == nil {
		root, files = "/sys/fs/cgroup/cpu", v1
	}
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	for f, v := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
			_ = os.Remove(dir)
			return "", fmt.Errorf("cgroup %s: %w", f, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("cgroup %s: move %d: %w", dir, pid, err)
	}
	return dir, nil
}

// opens counts every circuit record that appears on a configuration, with
// the phase it appeared in.
type opens struct {
	mu      sync.Mutex
	phase   string
	seen    map[string]map[string]bool // configuration -> record keys present
	byPhase map[string]int
	order   []string
}

func (o *opens) setPhase(p string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.phase = p
	if _, ok := o.byPhase[p]; !ok {
		o.order = append(o.order, p)
		o.byPhase[p] = 0
	}
}

func (o *opens) observe(obj any) {
	m, ok := obj.(client.Object)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := map[string]bool{}
	for k := range m.GetAnnotations() {
		if strings.HasPrefix(k, recordPrefix) {
			now[k] = true
			if !o.seen[m.GetName()][k] {
				o.byPhase[o.phase]++
			}
		}
	}
	o.seen[m.GetName()] = now
}

func (o *opens) report() (total int, parts []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range o.order {
		total += o.byPhase[p]
		if n := o.byPhase[p]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", p, n))
		}
	}
	return total, parts
}

func watchOpens(ctx context.Context, env *testenv.Env) (*opens, error) {
	o := &opens{seen: map[string]map[string]bool{}, byPhase: map[string]int{}}
	o.setPhase("creation")
	ca, err := ctrlcache.New(env.Config, ctrlcache.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, err
	}
	cfgMeta := &metav1.PartialObjectMetadata{}
	cfgMeta.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"))
	inf, err := ca.GetInformer(ctx, cfgMeta)
	if err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: o.observe, UpdateFunc: func(_, n any) { o.observe(n) },
	}); err != nil {
		return nil, err
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		return nil, errors.New("opens: cache never synced")
	}
	return o, nil
}

func runStarve(o options) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := testenv.New(testenv.Options{CRDs: true, AddToScheme: scheme})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	c := env.Client
	n := o.n
	configs := (n + o.perConfig - 1) / o.perConfig
	var down atomic.Bool
	addrs, caPEM, stopHook, err := webhookServers(configs, &down, o.fault)
	if err != nil {
		return err
	}
	defer stopHook()
	opened, err := watchOpens(ctx, env)
	if err != nil {
		return err
	}
	open, err := newCounter(ctx, env, configMeta(), openCount)
	if err != nil {
		return err
	}
	ready, err := newCounter(ctx, env, &v1alpha1.WebhookCircuitBreaker{}, readyCount)
	if err != nil {
		return err
	}
	rs, err := newReplicas(env, o.cpuQuota)
	if err != nil {
		return err
	}
	defer rs.stop()
	fmt.Println("controller logs:", rs.dir)
	for _, name := range []string{"a", "b"} {
		if _, err := rs.start(name); err != nil {
			return err
		}
	}
	if _, err := rs.waitLeader(time.Minute); err != nil {
		return err
	}
	cpu0, periods0, throttled0 := rs.cpu()
	begin := time.Now()

	fmt.Printf("creating %d configurations of %d webhooks, %d breakers (healthy webhooks, CPU quota %.0f%% of a core per replica)...\n", configs, o.perConfig, n, 100*o.cpuQuota)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range configs {
		hooks := min(o.perConfig, n-i*o.perConfig)
		servers := make([]string, hooks)
		for j := range hooks {
			servers[j] = addrs[i]
		}
		g.Go(func() error {
			if err := c.Create(gctx, configuration(i, servers, caPEM)); err != nil {
				return err
			}
			for j := range hooks {
				if err := c.Create(gctx, breaker(i, j)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	created := time.Now()
	step := func(phase string, d time.Duration) {
		opened.setPhase(phase)
		fmt.Printf("  %5.0f s  %s\n", time.Since(begin).Seconds(), phase)
		time.Sleep(d)
	}
	opened.setPhase("creation")
	readyAfter := "not all"
	if _, last, err := ready.until(created, 4*time.Minute, func(t int) bool { return t == n }); err == nil {
		readyAfter = fmt.Sprintf("%.1f s", last.Seconds())
	} else {
		fmt.Println("creation:", err)
	}
	fmt.Printf("  every breaker Closed, Ready and healthy %s after the last create\n", readyAfter)
	step("creation", max(30*time.Second-time.Since(created), 0))
	l, err := rs.waitLeader(time.Minute)
	if err != nil {
		return err
	}
	_ = l.cmd.Process.Kill() // restarted by the supervisor: both replicas race for the Lease
	step("restart", 30*time.Second)
	if l, err = rs.waitLeader(time.Minute); err != nil {
		return err
	}
	_ = l.cmd.Process.Kill()
	step("failover", 40*time.Second)
	for _, pause := range []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second} {
		if l, err = rs.waitLeader(time.Minute); err != nil {
			return err
		}
		_ = l.cmd.Process.Signal(syscall.SIGSTOP)
		opened.setPhase(fmt.Sprintf("paused %s", pause))
		time.Sleep(pause)
		_ = l.cmd.Process.Signal(syscall.SIGCONT)
		step(fmt.Sprintf("paused %s", pause), 25*time.Second)
	}
	healthyFor := time.Since(begin)
	cpu1, periods1, throttled1 := rs.cpu()
	falseOpens, parts := opened.report()
	fmt.Printf("healthy for %.0f s: %d circuits opened on healthy webhooks (%s)\n", healthyFor.Seconds(), falseOpens, strings.Join(parts, ", "))

	// Wait for the circuits a false open left to close before the outage.
	if _, _, err := open.until(time.Now(), 2*time.Minute, func(t int) bool { return t == 0 }); err != nil {
		fmt.Println("open circuits before the outage:", err)
	}
	opened.setPhase("outage")
	fmt.Printf("fault in every webhook (%s)...\n", o.fault)
	lead, err := rs.waitLeader(time.Minute)
	if err != nil {
		return err
	}
	before, results := storm(lead.metrics), probeResults(lead.metrics)
	down.Store(true)
	faultAt := time.Now()
	if lead.pprof != "" {
		// The leader's CPU in the outage's first 12 s, where it decides.
		go func() {
			path := filepath.Join(rs.dir, "outage-cpu.pprof")
			if err := fetch("http://"+lead.pprof+"/debug/pprof/profile?seconds=12", path); err != nil {
				fmt.Println("outage profile:", err)
				return
			}
			fmt.Println("  the leader's CPU profile of the outage's first 12 s:", path)
		}()
	}
	lastOpen := "not all"
	if first, last, err := open.until(faultAt, 3*time.Minute, func(t int) bool { return t == n }); err == nil {
		lastOpen = fmt.Sprintf("%.1f / %.1f s", first.Seconds(), last.Seconds())
	} else {
		fmt.Println("outage:", err)
	}
	if l := rs.leader(); l == lead {
		// What the probes said in the outage, and of the last to open.
		printStorm("outage", before, storm(lead.metrics))
		now := probeResults(lead.metrics)
		for _, cfg := range open.last(3) {
			for b, r := range now {
				if strings.HasPrefix(b, cfg+"-") {
					fmt.Printf("  %s, among the last to open: Unhealthy %.0f, Discarded %.0f, Healthy %.0f\n", b,
						r["Unhealthy"]-results[b]["Unhealthy"], r["Discarded"]-results[b]["Discarded"], r["Healthy"]-results[b]["Healthy"])
				}
			}
		}
	}
	down.Store(false)
	recoverAt := time.Now()
	lastClose := "not all"
	if _, last, err := open.until(recoverAt, 3*time.Minute, func(t int) bool { return t == 0 }); err == nil {
		lastClose = fmt.Sprintf("%.1f s", last.Seconds())
	} else {
		fmt.Println("recovery:", err)
	}
	throttledShare := 0.0
	if periods1 > periods0 {
		throttledShare = 100 * float64(throttled1-throttled0) / float64(periods1-periods0)
	}
	fmt.Printf("\n| CPU limit | breakers | all Closed and healthy after creation | false opens (healthy webhooks, %.0f s: creation, restart, failover, paused 2/5/10 s) | controller CPU used | periods throttled | outage (%s): first / all open after | recovery: all closed after |\n", healthyFor.Seconds(), o.fault)
	fmt.Println("| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
	limit := "none"
	if o.cpuQuota > 0 {
		limit = fmt.Sprintf("%.0f %%", 100*o.cpuQuota)
	}
	detail := ""
	if len(parts) > 0 {
		detail = " (" + strings.Join(parts, ", ") + ")"
	}
	fmt.Printf("| %s | %d | %s | %d%s | %.1f %% | %.0f %% | %s | %s |\n", limit, n, readyAfter, falseOpens, detail,
		100*(cpu1-cpu0)/healthyFor.Seconds(), throttledShare, lastOpen, lastClose)
	if falseOpens > 0 {
		return fmt.Errorf("%d circuits opened on healthy webhooks", falseOpens)
	}
	return nil
}

func configMeta() client.Object {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"))
	return m
}

// fetch saves what url answers in path.
func fetch(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

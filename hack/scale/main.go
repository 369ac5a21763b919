// Command scale measures the controller at scale on a real control plane:
// N breakers on N/per-config webhook configurations of per-config TLS
// webhooks on 127.0.0.1 (timeoutSeconds 1), served by one server per
// configuration or per webhook; probes every 1s with a 250ms deadline, open
// after 3 failures, close after 5 successes. It runs the controller binary
// as a process of its own and prints, as a table: how long until every
// breaker is Closed and healthy, the controller's CPU, RSS, goroutines, open
// files and API requests per second in the steady state, the API server's
// CPU, how long after a fault in every webhook at once the first and last
// circuit opened, how long after recovery they closed, the peaks during the
// storm, and whether every configuration is byte-identical to its original
// afterwards. The fault is a slow webhook (every answer 2s late, past the
// API server's and the probe's timeouts), or -fault 503.
//
//	go run ./hack/scale -n 1000 -per-config 4
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
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
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/selfsigned"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

var (
	pprofAddr     *string
	controllerEnv []string
	// controllerArgs are added to the controller's command line (-flag).
	controllerArgs []string
	// probeKind is every breaker's probe (-probe); empty is the default, HTTPGet.
	probeKind v1alpha1.ProbeKind
)

const (
	interval         = time.Second
	failureThreshold = 3
	successThreshold = 5
	recordPrefix     = "tripswitch.dev/circuit."
)

func main() {
	var o options
	flag.IntVar(&o.n, "n", 200, "breakers (one per webhook)")
	flag.IntVar(&o.perConfig, "per-config", 1, "webhooks per webhook configuration")
	flag.StringVar(&o.servers, "servers", "config", "one webhook server per configuration (config) or per webhook (webhook)")
	flag.StringVar(&o.fault, "fault", "slow", "the fault in every webhook at once: slow (answers 2s late) or 503")
	flag.DurationVar(&o.steady, "steady", 30*time.Second, "how long to measure the steady state")
	flag.StringVar(&o.scenario, "scenario", "storm", "storm: steady state, then a fault in every webhook at once; starve: two replicas under -cpu-quota through creation, a restart, a failover and pauses with healthy webhooks (every open is a false one), then a real fault; cost: the steady state against a plain client doing the same probes (hack/scale/plainclient), in one run")
	flag.DurationVar(&o.warmup, "warmup", 10*time.Second, "cost: how long each process runs before its window")
	flag.Func("probe", "every breaker's probe: HTTPGet (default) or AdmissionReview", func(v string) error {
		if v != string(v1alpha1.ProbeHTTPGet) && v != string(v1alpha1.ProbeAdmissionReview) {
			return fmt.Errorf("want HTTPGet or AdmissionReview, got %q", v)
		}
		probeKind = v1alpha1.ProbeKind(v)
		return nil
	})
	flag.Float64Var(&o.cpuQuota, "cpu-quota", 0, "starve: each replica's CPU limit in cores (0.15 is 150m), as a cgroup quota over 100 ms periods; needs root; 0 means none")
	flag.IntVar(&o.cpuShares, "cpu-shares", 0, "storm: the controller runs in a cgroup of this CPU weight (cpu.shares: 1024 per CPU requested, as the kubelet sets it), so that on this shared machine it gets the CPU a request gives it on a busy node; needs root; 0 means none")
	pprofAddr = flag.String("pprof", "", "if set, the controller serves pprof here (profile the steady state with go tool pprof); starve: any value gives each replica a port of its own and saves the leader's CPU profile of the outage")
	flag.Func("env", "KEY=VALUE added to the controller's environment (repeatable), as a pod spec would set it: GOMAXPROCS=1, GOMEMLIMIT=90MiB", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("want KEY=VALUE, got %q", v)
		}
		controllerEnv = append(controllerEnv, v)
		return nil
	})
	flag.Func("flag", "a flag added to the controller's command line (repeatable): --probe-kernel-evidence=false", func(v string) error {
		if !strings.HasPrefix(v, "--") {
			return fmt.Errorf("want --name=value, got %q", v)
		}
		controllerArgs = append(controllerArgs, v)
		return nil
	})
	flag.Parse()
	ctrllog.SetLogger(logr.Discard()) // the controller's own log is the one to read
	if o.n < 1 || o.perConfig < 1 || (o.servers != "config" && o.servers != "webhook") || (o.fault != "slow" && o.fault != "503") ||
		(o.scenario != "storm" && o.scenario != "starve" && o.scenario != "cost") || o.cpuQuota < 0 || o.cpuShares < 0 || o.cpuShares > 262144 {
		fmt.Fprintln(os.Stderr, "scale: -n and -per-config must be positive, -servers config|webhook, -fault slow|503, -scenario storm|starve|cost, -cpu-quota not negative, -cpu-shares 0 to 262144")
		os.Exit(2)
	}
	run := run
	switch o.scenario {
	case "starve":
		run = runStarve
	case "cost":
		run = runCost
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

type options struct {
	n, perConfig   int
	servers, fault string
	steady, warmup time.Duration
	scenario       string
	cpuQuota       float64
	cpuShares      int
}

// slowBy is how late every answer is during the slow fault: past the
// webhooks' timeoutSeconds (1) and the probes' deadline.
const slowBy = 2 * time.Second

var scheme = []func(*runtime.Scheme) error{v1alpha1.AddToScheme}

func run(o options) error {
	n, steady := o.n, o.steady
	ctx := context.Background()
	env, err := testenv.New(testenv.Options{CRDs: true, AddToScheme: scheme})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	c := env.Client

	configs := (n + o.perConfig - 1) / o.perConfig
	nServers := configs
	if o.servers == "webhook" {
		nServers = n
	}
	var down atomic.Bool
	addrs, caPEM, stopHook, err := webhookServers(nServers, &down, o.fault)
	if err != nil {
		return err
	}
	defer stopHook()

	ctrlProc, metricsAddr, err := startController(env)
	if err != nil {
		return err
	}
	defer func() { _ = ctrlProc.Process.Kill(); _, _ = ctrlProc.Process.Wait() }()
	if o.cpuShares > 0 {
		dir, err := weightCgroup(fmt.Sprintf("tripswitch-scale-%d", ctrlProc.Process.Pid), o.cpuShares, ctrlProc.Process.Pid)
		if err != nil {
			return err
		}
		defer func() { // a cgroup with a process in it cannot be removed
			_ = ctrlProc.Process.Kill()
			_, _ = ctrlProc.Process.Wait()
			_ = os.Remove(dir)
		}()
		fmt.Printf("controller in cgroup %s (CPU weight %d shares)\n", dir, o.cpuShares)
	}

	// Watched, not polled: see counter.
	ready, err := newCounter(ctx, env, &v1alpha1.WebhookCircuitBreaker{}, readyCount)
	if err != nil {
		return err
	}
	cfgMeta := &metav1.PartialObjectMetadata{}
	cfgMeta.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"))
	open, err := newCounter(ctx, env, cfgMeta, openCount)
	if err != nil {
		return err
	}

	fmt.Printf("creating %d webhook configurations of %d webhooks, %d breakers, %d webhook servers...\n", configs, o.perConfig, n, nServers)
	// Created by 16 clients at once, as `kubectl apply` of many objects or a
	// GitOps sync would: the clock for "ready" starts at the last create, so
	// it measures the controller, not this harness's create loop.
	begin := time.Now()
	beforeCreate := storm(metricsAddr)
	originals, err := createAll(ctx, c, o, addrs, caPEM)
	if err != nil {
		return err
	}
	created := time.Now()
	fmt.Printf("created in %.1f s\n", created.Sub(begin).Seconds())

	fmt.Println("waiting for every breaker to be Closed, Ready and past its healthy verdict...")
	_, readyAfter, err := ready.until(created, 5*time.Minute, func(total int) bool { return total == n })
	if err != nil {
		return fmt.Errorf("breakers never all Ready: %w", err)
	}
	printStorm("create", beforeCreate, storm(metricsAddr))
	time.Sleep(2 * interval) // let the last reconciles settle

	apiserver := findProcess("kube-apiserver")
	cpu0, api0, byKind0 := cpuSeconds(ctrlProc.Process.Pid), cpuSeconds(apiserver), requests(metricsAddr)
	time.Sleep(steady)
	cpu1, api1, byKind1 := cpuSeconds(ctrlProc.Process.Pid), cpuSeconds(apiserver), requests(metricsAddr)
	var req0, req1 float64
	for k, v := range byKind1 {
		req0, req1 = req0+byKind0[k], req1+v
		if d := v - byKind0[k]; d > 0 {
			fmt.Printf("  steady-state requests %s: %.0f\n", k, d)
		}
	}
	secs := steady.Seconds()
	rss, anon := rssMiB(ctrlProc.Process.Pid), anonMiB(ctrlProc.Process.Pid)
	steadyG := gauges(metricsAddr)

	fmt.Printf("fault in every webhook (%s)...\n", o.fault)
	peak := watchPeaks(ctrlProc.Process.Pid, metricsAddr)
	before := storm(metricsAddr)
	down.Store(true)
	faultAt := time.Now()
	firstOpen, lastOpen, err := open.until(faultAt, 2*time.Minute, func(open int) bool { return open == n })
	if err != nil {
		return fmt.Errorf("outage: %w", err)
	}
	opened := storm(metricsAddr)
	down.Store(false)
	recoverAt := time.Now()
	firstClose, lastClose, err := open.until(recoverAt, 2*time.Minute, func(open int) bool { return open == 0 })
	if err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	printStorm("outage", before, opened)
	printStorm("recovery", opened, storm(metricsAddr))
	peaks := peak()
	changed, err := compare(ctx, c, originals)
	if err != nil {
		return err
	}

	fmt.Printf("\n| breakers | configurations × webhooks | servers | fault | all Closed+healthy after the last create | controller CPU | API req/s | API server CPU | RSS (anonymous) | goroutines (per breaker) | open files | fault → first / last open (goal %s) | recovery → first / last closed (goal %s) | storm peak RSS / goroutines / files | configurations changed after |\n",
		failureThreshold*interval+2*time.Second, successThreshold*interval+3*time.Second)
	fmt.Println("| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	fmt.Printf("| %d | %d × %d | %d | %s | %.1f s | %.1f %% | %.2f | %.1f %% | %.0f MiB (%.0f) | %.0f (%.1f) | %.0f | %.2f / %.2f s | %.2f / %.2f s | %.0f MiB / %.0f / %.0f | %d |\n",
		n, configs, o.perConfig, nServers, o.fault, readyAfter.Seconds(), 100*(cpu1-cpu0)/secs, (req1-req0)/secs, 100*(api1-api0)/secs, rss, anon,
		steadyG["go_goroutines"], steadyG["go_goroutines"]/float64(n), steadyG["process_open_fds"],
		firstOpen.Seconds(), lastOpen.Seconds(), firstClose.Seconds(), lastClose.Seconds(),
		peaks.rss, peaks.goroutines, peaks.fds, changed)
	if changed > 0 {
		return fmt.Errorf("%d configurations differ from their originals", changed)
	}
	return nil
}

// createAll creates the configurations and their breakers, 16 clients at
// once, and returns each configuration's fingerprint.
func createAll(ctx context.Context, c client.Client, o options, addrs []string, caPEM []byte) (map[string]string, error) {
	configs := (o.n + o.perConfig - 1) / o.perConfig
	originals := map[string]string{}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range configs {
		hooks := min(o.perConfig, o.n-i*o.perConfig)
		servers := make([]string, hooks)
		for j := range hooks {
			servers[j] = serverOf(o, addrs, i, j)
		}
		g.Go(func() error {
			cfg := configuration(i, servers, caPEM)
			if err := c.Create(gctx, cfg); err != nil {
				return err
			}
			mu.Lock()
			originals[cfg.Name] = fingerprint(cfg)
			mu.Unlock()
			for j := range hooks {
				if err := c.Create(gctx, breaker(i, j)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return originals, g.Wait()
}

// serverOf is the address of the server of configuration i's webhook j.
func serverOf(o options, addrs []string, i, j int) string {
	if o.servers == "webhook" {
		return addrs[i*o.perConfig+j]
	}
	return addrs[i%len(addrs)]
}

// serverConns counts the connections the webhook servers accepted, and
// serverRequests the requests they served.
var serverConns, serverRequests atomic.Int64

// answerReview allows an AdmissionReview, answering its UID, as a webhook
// that mutates nothing does.
func answerReview(w http.ResponseWriter, r *http.Request) {
	var review struct {
		Request *struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":%q,"allowed":true}}`, review.Request.UID)
}

// webhookServers serve TLS on n ports of 127.0.0.1, as n real webhook
// services would: an answer at once, or while down a 503 or the same
// answer slowBy late.
func webhookServers(n int, down *atomic.Bool, fault string) (addrs []string, caPEM []byte, stop func(), err error) {
	ca, cert, err := selfsigned.Pair("scale-ca", "127.0.0.1")
	if err != nil {
		return nil, nil, nil, err
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serverRequests.Add(1)
		if down.Load() {
			if fault == "503" {
				http.Error(w, "injected fault", http.StatusServiceUnavailable)
				return
			}
			select {
			case <-time.After(slowBy):
			case <-r.Context().Done():
				return
			}
		}
		if r.Method == http.MethodPost {
			answerReview(w, r)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	var servers []*http.Server
	stop = func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return nil, nil, nil, err
		}
		srv := &http.Server{
			Handler:           handler,
			TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			ReadHeaderTimeout: 5 * time.Second,
			// Counts connections, so that a measurement can say whether
			// its probes reused theirs.
			ConnState: func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					serverConns.Add(1)
				}
			},
		}
		servers = append(servers, srv)
		addrs = append(addrs, l.Addr().String())
		go func() { _ = srv.ServeTLS(l, "", "") }()
	}
	return addrs, ca.PEM, stop, nil
}

func configuration(i int, addrs []string, caPEM []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	name := fmt.Sprintf("scale-%04d", i)
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for j, addr := range addrs {
		cfg.Webhooks = append(cfg.Webhooks, webhook(webhookName(i, j), addr, caPEM))
	}
	return cfg
}

func webhookName(i, j int) string { return fmt.Sprintf("w%d.scale-%04d.tripswitch.test", j, i) }

func webhook(name, addr string, caPEM []byte) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name:                    name,
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + "/mutate"), CABundle: caPEM},
		Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{"CREATE"}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
		FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		TimeoutSeconds:          ptr.To[int32](1),
		// The API server never calls it: only the controller's probes do.
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"scale": "never"}},
	}
}

func breaker(i, j int) *v1alpha1.WebhookCircuitBreaker {
	return &v1alpha1.WebhookCircuitBreaker{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%04d-%d", i, j)},
		Spec: v1alpha1.WebhookCircuitBreakerSpec{
			Target:                        v1alpha1.Target{Kind: v1alpha1.MutatingWebhookConfiguration, ConfigurationName: fmt.Sprintf("scale-%04d", i), WebhookName: webhookName(i, j)},
			AllowAdmissionWithoutMutation: true,
			Probe: v1alpha1.ProbeSpec{
				Interval: &metav1.Duration{Duration: interval}, Timeout: &metav1.Duration{Duration: 250 * time.Millisecond},
				FailureThreshold: failureThreshold, SuccessThreshold: successThreshold,
				Kind: probeKind,
			},
		},
	}
}

// fingerprint is what must come back exactly: the webhooks and annotations.
func fingerprint(cfg *admissionregistrationv1.MutatingWebhookConfiguration) string {
	b, _ := json.Marshal(struct {
		Webhooks    []admissionregistrationv1.MutatingWebhook
		Annotations map[string]string
	}{cfg.Webhooks, cfg.Annotations})
	return string(b)
}

func startController(env *testenv.Env) (*exec.Cmd, string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "tripswitch-scale-")
	if err != nil {
		return nil, "", err
	}
	bin := filepath.Join(dir, "tripswitch")
	build := exec.Command("go", releaseBuild("-o", bin, "./cmd/tripswitch")...) // as `make build` and the image build it
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("build controller: %w\n%s", err, out)
	}
	kc, err := env.AdminKubeconfig()
	if err != nil {
		return nil, "", err
	}
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		return nil, "", err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	metricsAddr := l.Addr().String()
	_ = l.Close()
	logFile, err := os.Create(filepath.Join(dir, "controller.log"))
	if err != nil {
		return nil, "", err
	}
	args := []string{"--kubeconfig", kcPath, "--leader-elect=false", "--metrics-secure=false",
		"--metrics-bind-address", metricsAddr, "--health-probe-bind-address=0",
		// Millisecond timestamps: the storm's timeline is read from this log.
		"--zap-time-encoding=rfc3339nano"}
	if *pprofAddr != "" {
		args = append(args, "--pprof-bind-address", *pprofAddr)
	}
	args = append(args, controllerArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), controllerEnv...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	fmt.Println("controller log:", logFile.Name())
	return cmd, metricsAddr, nil
}

// releaseBuild is `go build` with the flags `make build` and the
// Dockerfile build the controller with (and CGO_ENABLED=0), then args:
// what runs in a cluster is what is measured.
func releaseBuild(args ...string) []string {
	return append([]string{"build", "-trimpath", "-ldflags", "-s -w"}, args...)
}

// counter keeps a count over every object of one kind, from a watch (an
// informer), and the times the count changed: the harness measures the
// controller without loading the API server with repeated lists of 1,000
// objects, and a change is timed when the API server sends it, not at the
// next poll.
type counter struct {
	mu      sync.Mutex
	per     map[string]int
	total   int
	changes []change
	wake    chan struct{} // closed and replaced on every change
}

type change struct {
	at    time.Time
	total int
	name  string // the object whose count changed
}

// newCounter starts an informer on obj's kind in a cache of its own and
// counts count(object) over the objects it holds.
func newCounter(ctx context.Context, env *testenv.Env, obj client.Object, count func(client.Object) int) (*counter, error) {
	c := &counter{per: map[string]int{}, wake: make(chan struct{})}
	ca, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, err
	}
	inf, err := ca.GetInformer(ctx, obj)
	if err != nil {
		return nil, err
	}
	set := func(o any, deleted bool) {
		if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o, deleted = tomb.Obj, true
		}
		obj, ok := o.(client.Object)
		if !ok {
			return
		}
		v := 0
		if !deleted {
			v = count(obj)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.per[obj.GetName()] == v {
			return
		}
		c.total += v - c.per[obj.GetName()]
		c.per[obj.GetName()] = v
		c.changes = append(c.changes, change{at: time.Now(), total: c.total, name: obj.GetName()})
		close(c.wake)
		c.wake = make(chan struct{})
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { set(o, false) },
		UpdateFunc: func(_, o any) { set(o, false) },
		DeleteFunc: func(o any) { set(o, true) },
	}); err != nil {
		return nil, err
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		return nil, errors.New("counter: cache never synced")
	}
	return c, nil
}

// until waits up to limit for done(total), and returns how long after start
// the count first and last changed.
func (c *counter) until(start time.Time, limit time.Duration, done func(total int) bool) (first, last time.Duration, err error) {
	timeout := time.After(limit)
	for {
		c.mu.Lock()
		total, wake := c.total, c.wake
		if done(total) {
			for _, ch := range c.changes {
				if ch.at.After(start) {
					if first == 0 {
						first = ch.at.Sub(start)
					}
					last = ch.at.Sub(start)
				}
			}
			c.mu.Unlock()
			return first, last, nil
		}
		c.mu.Unlock()
		select {
		case <-wake:
		case <-timeout:
			return 0, 0, fmt.Errorf("count %d after %s", total, limit)
		}
	}
}

// readyCount is 1 for a breaker that is Ready, Closed and past its healthy
// verdict (its status write done).
func readyCount(o client.Object) int {
	b, ok := o.(*v1alpha1.WebhookCircuitBreaker)
	if !ok || b.Status.State != v1alpha1.StateClosed || b.Status.Probe.ConsecutiveSuccesses < successThreshold {
		return 0
	}
	if c := meta.FindStatusCondition(b.Status.Conditions, "Ready"); c != nil && c.Status == metav1.ConditionTrue {
		return 1
	}
	return 0
}

// openCount is the number of open circuits a configuration records.
func openCount(o client.Object) int {
	open := 0
	for k := range o.GetAnnotations() {
		if strings.HasPrefix(k, recordPrefix) {
			open++
		}
	}
	return open
}

func compare(ctx context.Context, c client.Client, originals map[string]string) (int, error) {
	var list admissionregistrationv1.MutatingWebhookConfigurationList
	if err := c.List(ctx, &list); err != nil {
		return 0, err
	}
	changed := 0
	for i := range list.Items {
		if want, ok := originals[list.Items[i].Name]; ok && fingerprint(&list.Items[i]) != want {
			changed++
		}
	}
	return changed, nil
}

// cpuSeconds is a process's user+system CPU time from /proc.
func cpuSeconds(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// openFiles is how many files a process has open, from /proc.
func openFiles(pid int) float64 {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return float64(len(fds))
}

// anonMiB is the part of a process's RSS that is its own memory (heap,
// stacks), not the pages of its binary that are mapped from the file.
func anonMiB(pid int) float64 {
	return statusKiB(pid, "RssAnon:") / 1024
}

func rssMiB(pid int) float64 {
	return statusKiB(pid, "VmRSS:") / 1024
}

// statusKiB reads one kB field of /proc/<pid>/status.
func statusKiB(pid int, field string) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb
		}
	}
	return 0
}

// findProcess returns the newest process whose command line starts with name.
func findProcess(name string) int {
	entries, _ := os.ReadDir("/proc")
	best := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.HasSuffix(strings.SplitN(string(cmdline), "\x00", 2)[0], "/"+name) && pid > best {
			best = pid
		}
	}
	return best
}

// scrapeMetrics calls line with every line of the controller's metrics,
// uncompressed: compressing a thousand breakers' series costs the
// controller more CPU than rendering them.
func scrapeMetrics(addr string, line func(string)) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		line(s.Text())
	}
}

// requests reads the controller's client-go request counters, by label set.
func requests(addr string) map[string]float64 {
	out := map[string]float64{}
	scrapeMetrics(addr, func(line string) {
		if rest, ok := strings.CutPrefix(line, "rest_client_requests_total{"); ok {
			i := strings.LastIndexByte(rest, ' ')
			v, _ := strconv.ParseFloat(rest[i+1:], 64)
			out[rest[:i]] += v
		}
	})
	return out
}

// storm reads the counters that say where a storm's time went: the
// controller's API requests by method (controller-runtime exports no
// request latency), its probe results (and why any were discarded), and
// the reconcile queue's wait and work.
func storm(addr string) map[string]float64 {
	out := map[string]float64{}
	scrapeMetrics(addr, func(line string) {
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			return
		}
		switch name {
		case "rest_client_requests_total", "tripswitch_probe_results_total", "tripswitch_probes_discarded_total":
		case "workqueue_queue_duration_seconds_sum", "workqueue_queue_duration_seconds_count",
			"workqueue_work_duration_seconds_sum", "workqueue_work_duration_seconds_count":
			if !strings.Contains(rest, `name="webhookcircuitbreaker"`) {
				return
			}
		default:
			return
		}
		i := strings.LastIndexByte(rest, ' ')
		v, _ := strconv.ParseFloat(rest[i+1:], 64)
		key := name
		for _, l := range []string{"method", "result", "reason"} {
			if v := label(rest, l); v != "" {
				key += " " + v
			}
		}
		out[key] += v
	})
	return out
}

// printStorm prints what a phase of the storm cost: requests by method,
// probe results, reconciles and their mean queue wait and work.
func printStorm(phase string, a, b map[string]float64) {
	d := func(k string) float64 { return b[k] - a[k] }
	fmt.Printf("  %s:", phase)
	for _, m := range []string{"GET", "LIST", "PATCH", "PUT", "POST", "DELETE"} {
		if n := d("rest_client_requests_total " + m); n > 0 {
			fmt.Printf(" %s %.0f", m, n)
		}
	}
	for _, r := range []string{"Healthy", "Unhealthy", "Discarded", "Unknown"} {
		if n := d("tripswitch_probe_results_total " + r); n > 0 {
			fmt.Printf(" %s %.0f", r, n)
		}
	}
	for _, r := range []string{"Starved", "Blocked", "Paced"} {
		if n := d("tripswitch_probes_discarded_total " + r); n > 0 {
			fmt.Printf(" (%s %.0f)", r, n)
		}
	}
	if c := d("workqueue_work_duration_seconds_count"); c > 0 {
		fmt.Printf("; %0.f reconciles, mean queue wait %.0f ms, mean work %.0f ms",
			c, 1000*d("workqueue_queue_duration_seconds_sum")/d("workqueue_queue_duration_seconds_count"), 1000*d("workqueue_work_duration_seconds_sum")/c)
	}
	fmt.Println()
}

// last names the n objects whose count changed last, the latest first.
func (c *counter) last(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for i := len(c.changes) - 1; i >= 0 && len(names) < n; i-- {
		names = append(names, c.changes[i].name)
	}
	return names
}

// probeResults reads each breaker's probe results, by result.
func probeResults(addr string) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	scrapeMetrics(addr, func(line string) {
		rest, ok := strings.CutPrefix(line, "tripswitch_probe_results_total{")
		if !ok {
			return
		}
		i := strings.LastIndexByte(rest, ' ')
		v, _ := strconv.ParseFloat(rest[i+1:], 64)
		b := label(rest, "breaker")
		if out[b] == nil {
			out[b] = map[string]float64{}
		}
		out[b][label(rest, "result")] += v
	})
	return out
}

// gauges reads the controller's process gauges from its metrics.
func gauges(addr string) map[string]float64 {
	out := map[string]float64{}
	scrapeMetrics(addr, func(line string) {
		name, value, ok := strings.Cut(line, " ")
		if ok && (name == "go_goroutines" || name == "process_open_fds") {
			out[name], _ = strconv.ParseFloat(value, 64)
		}
	})
	return out
}

type peaks struct{ rss, goroutines, fds float64 }

// watchPeaks samples the controller until the returned function is
// called, which returns the peaks: its RSS and open files from /proc every
// 250ms, its goroutines from its metrics every 2s (a scrape renders every
// breaker's series: scraped every 500ms, as this harness once did, it cost
// the controller a fifth of its CPU in a storm, fifty times what a
// Prometheus scraping every 30s costs it).
func watchPeaks(pid int, addr string) func() peaks {
	var p peaks
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			if i%8 == 0 {
				p.goroutines = max(p.goroutines, gauges(addr)["go_goroutines"])
			}
			p.rss = max(p.rss, rssMiB(pid))
			p.fds = max(p.fds, openFiles(pid))
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() peaks { close(stop); <-done; return p }
}

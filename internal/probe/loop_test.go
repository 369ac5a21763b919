package probe_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// requests is a prober that records every probe it is asked for.
type requests struct {
	mu     sync.Mutex
	status probe.Status
	got    []probe.Target
}

func (r *requests) Probe(_ context.Context, t probe.Target) probe.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, t)
	return probe.Result{Status: r.status, Reason: "scripted"}
}

// keys is how many distinct probe keys were probed, and how many probes.
func (r *requests) keys() (keys, probes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, tgt := range r.got {
		seen[tgt.Key] = true
	}
	return len(seen), len(r.got)
}

// webhookAt is the settings of a URL webhook at path, probed on /healthz
// (HTTPGet) unless kind says otherwise.
func webhookAt(url string, kind v1alpha1.ProbeKind, failures int32) probe.Settings {
	return probe.Settings{
		Target: probe.Target{ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url), CABundle: []byte("ca")},
			Kind: kind, HealthPath: "/healthz", Timeout: 250 * time.Millisecond, ReviewVersions: []string{"v1"}},
		Interval: time.Second, FailureThreshold: failures, SuccessThreshold: 2,
	}
}

// waitProbes steps the fake clock an interval at a time until every key
// has been notified at least n times more.
func (h *harness) waitProbes(n int, keys ...string) {
	h.t.Helper()
	seen := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		done := true
		for _, k := range keys {
			done = done && seen[k] >= n
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("probes seen %v, want %d of each of %v", seen, n, keys)
		}
		h.clk.Step(time.Second)
		for drained := false; !drained; {
			select {
			case k := <-h.probed:
				seen[k]++
			case <-time.After(5 * time.Millisecond):
				drained = true
			}
		}
	}
}

// Webhooks of one Service probed on its health path are one request: the
// monitor sends it once per interval for all of them, and each judges the
// shared result against its own thresholds.
func TestWebhooksOfOneDestinationShareEachProbe(t *testing.T) {
	p := &requests{status: probe.Unhealthy}
	h := start(t, p)
	h.mon.Ensure("a", webhookAt("https://hooks.example:8443/mutate-pods", v1alpha1.ProbeHTTPGet, 2))
	h.mon.Ensure("b", webhookAt("https://hooks.example:8443/mutate-deployments", v1alpha1.ProbeHTTPGet, 5))
	h.waitProbes(5, "a", "b")
	a, _ := h.mon.Observe("a")
	b, _ := h.mon.Observe("b")
	if a.Verdict != probe.VerdictUnhealthy || b.Verdict != probe.VerdictUnhealthy || a.ConsecutiveFailures != 2 || b.ConsecutiveFailures != 5 {
		t.Fatalf("after 5 shared failures: a %s (%d of 2), b %s (%d of 5); want both Unhealthy at their own thresholds",
			a.Verdict, a.ConsecutiveFailures, b.Verdict, b.ConsecutiveFailures)
	}
	// Each probe served both: the prober saw one request per probe either
	// saw (at most one more, in flight while the test counted).
	if keys, probes := p.keys(); keys != 1 || probes > 6 {
		t.Fatalf("%d requests under %d keys for two webhooks that are one request; want one key, at most 6 requests", probes, keys)
	}
}

// Anything that makes the request or its judgement differ keeps probes
// apart: another port, another trust, another kind, another timeout or
// interval; an AdmissionReview probe goes to each webhook's own path.
func TestProbesThatDifferAreNotShared(t *testing.T) {
	base := webhookAt("https://hooks.example:8443/a", v1alpha1.ProbeHTTPGet, 3)
	variants := map[string]func(probe.Settings) probe.Settings{
		"port": func(s probe.Settings) probe.Settings {
			s.Target.ClientConfig.URL = ptr.To("https://hooks.example:9443/a")
			return s
		},
		"trust": func(s probe.Settings) probe.Settings { s.Target.ClientConfig.CABundle = []byte("other"); return s },
		"timeout": func(s probe.Settings) probe.Settings {
			s.Target.Timeout = time.Second
			return s
		},
		"interval": func(s probe.Settings) probe.Settings { s.Interval = 2 * time.Second; return s },
		"review": func(s probe.Settings) probe.Settings {
			s.Target.Kind = v1alpha1.ProbeAdmissionReview
			return s
		},
		"review-other-path": func(s probe.Settings) probe.Settings {
			s.Target.ClientConfig.URL = ptr.To("https://hooks.example:8443/b")
			return s
		},
		"health-path": func(s probe.Settings) probe.Settings { s.Target.HealthPath = "/livez"; return s },
		"endpoints": func(s probe.Settings) probe.Settings {
			s.Target.EndpointMode, s.Target.Endpoints = true, []string{"10.0.0.1:8443"}
			return s
		},
	}
	// An AdmissionReview probe of the same server at another path: the
	// kind alone must not be what keeps the two apart.
	review := webhookAt("https://hooks.example:8443/a", v1alpha1.ProbeAdmissionReview, 3)
	bases := map[string]probe.Settings{"review-other-path": review}
	for name, vary := range variants {
		t.Run(name, func(t *testing.T) {
			from, ok := bases[name]
			if !ok {
				from = base
			}
			p := &requests{status: probe.Healthy}
			h := start(t, p)
			h.mon.Ensure("base", from)
			h.mon.Ensure("other", vary(from))
			h.waitProbes(2, "base", "other")
			if keys, _ := p.keys(); keys != 2 {
				t.Fatalf("probes under %d keys, want 2 (one each)", keys)
			}
		})
	}
}

// A webhook that cannot be located is probed alone, so that its Unknown
// carries its own reason.
func TestUnlocatableTargetsAreProbedAlone(t *testing.T) {
	p := &requests{status: probe.Unknown}
	h := start(t, p)
	bad := webhookAt("http://hooks.example/a", v1alpha1.ProbeHTTPGet, 3)
	h.mon.Ensure("x", bad)
	h.mon.Ensure("y", bad)
	h.waitProbes(1, "x", "y")
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.got) < 2 || p.got[0].Key == p.got[1].Key {
		t.Fatal("two unlocatable targets shared a probe")
	}
}

// blockedDelivery runs a monitor whose notify blocks on the first delivery
// to block once it is set, and fails the test on any delivery to a key in
// stopped: the deliveries Stop promised would not come.
type blockedDelivery struct {
	t       *testing.T
	clk     *clocktesting.FakeClock
	mon     *probe.Monitor
	mu      sync.Mutex
	block   string
	stopped map[string]bool
	blocked chan struct{} // a delivery to block waits
	release chan struct{}
	seen    chan string
}

func newBlockedDelivery(t *testing.T) *blockedDelivery {
	d := &blockedDelivery{t: t, clk: clocktesting.NewFakeClock(time.Unix(0, 0)), stopped: map[string]bool{},
		blocked: make(chan struct{}, 1), release: make(chan struct{}), seen: make(chan string, 100)}
	p := probe.ProberFunc(func(context.Context, probe.Target) probe.Result { return probe.Result{Status: probe.Healthy} })
	d.mon = probe.NewMonitor(p, d.clk, func(key string, _ probe.Result, _ probe.Change) {
		d.mu.Lock()
		stopped, block := d.stopped[key], d.block == key
		if block {
			d.block = ""
		}
		d.mu.Unlock()
		if stopped {
			t.Errorf("a result was delivered for %s after Stop returned", key)
		}
		if block {
			d.blocked <- struct{}{}
			<-d.release
		}
		d.seen <- key
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.mon.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

// stop stops key and records that nothing may be delivered to it now.
func (d *blockedDelivery) stop(key string) {
	d.mon.Stop(key)
	d.mu.Lock()
	d.stopped[key] = true
	d.mu.Unlock()
}

// stepUntilBlocked steps the clock until the delivery to key blocks.
func (d *blockedDelivery) stepUntilBlocked(key string) {
	d.t.Helper()
	d.mu.Lock()
	d.block = key
	d.mu.Unlock()
	deadline := time.After(10 * time.Second)
	for {
		d.clk.Step(time.Second)
		select {
		case <-d.blocked:
			return
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			d.t.Fatalf("no delivery to %s", key)
		}
	}
}

// Stopping one of the webhooks that share a probe, while that probe's
// result is being delivered, returns without waiting for the delivery to
// the others, delivers nothing to the stopped one afterwards, and leaves
// the other probed.
func TestStopOneOfASharedProbe(t *testing.T) {
	d := newBlockedDelivery(t)
	d.mon.Ensure("b", webhookAt("https://hooks.example/y", v1alpha1.ProbeHTTPGet, 3)) // delivered first
	d.mon.Ensure("a", webhookAt("https://hooks.example/x", v1alpha1.ProbeHTTPGet, 3))
	d.stepUntilBlocked("b") // a's delivery comes next
	stopped := make(chan struct{})
	go func() { d.stop("a"); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop waited for another webhook's delivery")
	}
	if _, ok := d.mon.Observe("a"); ok {
		t.Fatal("a stopped webhook is still observed")
	}
	close(d.release)
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; n < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the other webhook was probed %d more times in 30 s, want 3", n)
		}
		d.clk.Step(time.Second)
		select {
		case k := <-d.seen:
			if k == "b" {
				n++
			}
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// A webhook whose settings moved it to another probe (a rotated caBundle)
// while the probe it left is being delivered: Stop still promises nothing
// more for it, from either.
func TestStopAfterAMove(t *testing.T) {
	d := newBlockedDelivery(t)
	d.mon.Ensure("a", webhookAt("https://hooks.example/x", v1alpha1.ProbeHTTPGet, 3))
	d.stepUntilBlocked("a")
	moved := webhookAt("https://hooks.example/x", v1alpha1.ProbeHTTPGet, 3)
	moved.Target.ClientConfig.CABundle = []byte("rotated")
	d.mon.Ensure("a", moved)
	stopped := make(chan struct{})
	go func() { d.stop("a"); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a delivery to its webhook was under way")
	case <-time.After(50 * time.Millisecond):
	}
	close(d.release)
	<-stopped
	for range 5 {
		d.clk.Step(time.Second)
		time.Sleep(2 * time.Millisecond)
	}
}

// A monitor started again (a new term as leader) while a probe's result is
// being delivered does not probe that group again until the delivery is
// done: a group has one probe at a time, whatever the terms.
func TestStartAgainDuringADelivery(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	first := make(chan struct{}, 1)
	p := probe.ProberFunc(func(context.Context, probe.Target) probe.Result {
		calls.Add(1)
		return probe.Result{Status: probe.Healthy}
	})
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	var blocked atomic.Bool
	mon := probe.NewMonitor(p, clk, func(string, probe.Result, probe.Change) {
		if blocked.CompareAndSwap(false, true) {
			first <- struct{}{}
			<-release
		}
	})
	mon.Ensure("a", webhookAt("https://hooks.example/x", v1alpha1.ProbeHTTPGet, 3))
	ctx1, end1 := context.WithCancel(context.Background())
	done1 := make(chan struct{})
	go func() { _ = mon.Start(ctx1); close(done1) }()
	for waiting := true; waiting; {
		clk.Step(time.Second)
		select {
		case <-first:
			waiting = false
		case <-time.After(5 * time.Millisecond):
		}
	}
	end1()
	<-done1
	ctx2, end2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { _ = mon.Start(ctx2); close(done2) }()
	defer func() { end2(); <-done2 }()
	during := calls.Load()
	for range 5 {
		clk.Step(time.Second)
		time.Sleep(2 * time.Millisecond)
	}
	if n := calls.Load() - during; n > 0 {
		t.Fatalf("%d probes of the group began while its last result was being delivered", n)
	}
	close(release)
	for deadline := time.Now().Add(10 * time.Second); calls.Load() == during; {
		if time.Now().After(deadline) {
			t.Fatal("no probe after the delivery, in the new term")
		}
		clk.Step(time.Second)
		time.Sleep(2 * time.Millisecond)
	}
}

// A Service webhook and a URL webhook that name the same host, path and
// trust are probed apart in endpoint mode: the prober judges a Service's
// endpoints, and cannot for a URL (Unknown, which never opens).
func TestAServiceAndAURLAreNotOneProbe(t *testing.T) {
	p := &requests{status: probe.Healthy}
	h := start(t, p)
	url := webhookAt("https://hook.ns.svc:443/x", v1alpha1.ProbeHTTPGet, 3)
	url.Target.EndpointMode = true
	svc := url
	svc.Target.ClientConfig = admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
		Namespace: "ns", Name: "hook", Path: ptr.To("/x")}, CABundle: url.Target.ClientConfig.CABundle}
	h.mon.Ensure("url", url)
	h.mon.Ensure("svc", svc)
	h.waitProbes(1, "url", "svc")
	if keys, probes := p.keys(); keys != 2 {
		t.Fatalf("%d requests under %d keys: a Service webhook and a URL webhook shared an endpoint-mode probe", probes, keys)
	}
}

// A webhook that joins a shared probe while it is in flight gets none of
// that probe: its first result is from a probe that began after it joined.
func TestAJoinerGetsNoProbeBegunBeforeIt(t *testing.T) {
	release := make(chan struct{})
	began := make(chan struct{}, 10)
	var calls atomic.Int32
	p := probe.ProberFunc(func(context.Context, probe.Target) probe.Result {
		if calls.Add(1) == 1 {
			began <- struct{}{}
			<-release
		}
		return probe.Result{Status: probe.Healthy}
	})
	h := start(t, p)
	h.mon.Ensure("a", webhookAt("https://hooks.example/x", v1alpha1.ProbeHTTPGet, 3))
	for waiting := true; waiting; {
		h.clk.Step(time.Second)
		select {
		case <-began:
			waiting = false
		case <-time.After(5 * time.Millisecond):
		}
	}
	h.mon.Ensure("b", webhookAt("https://hooks.example/y", v1alpha1.ProbeHTTPGet, 3))
	close(release)
	if k := <-h.probed; k != "a" {
		t.Fatalf("the probe begun before b joined was delivered to %q", k)
	}
	select {
	case k := <-h.probed:
		t.Fatalf("the probe begun before b joined was delivered to %q too", k)
	case <-time.After(50 * time.Millisecond):
	}
	h.waitProbes(1, "b")
}

// On the system clock: 200 webhooks on 200 destinations, each probed every
// 100 ms, hold no goroutine each between probes (one scheduler, and a
// goroutine only while a probe runs), and none is probed more often than
// its interval allows or starved of its probes.
func TestManyWebhooksOnTheSystemClock(t *testing.T) {
	const n, every, run = 200, 100 * time.Millisecond, 2 * time.Second
	var mu sync.Mutex
	counts := map[string]int{}
	p := probe.ProberFunc(func(context.Context, probe.Target) probe.Result { return probe.Result{Status: probe.Healthy} })
	mon := probe.NewMonitor(p, clock.RealClock{}, func(key string, _ probe.Result, _ probe.Change) {
		mu.Lock()
		counts[key]++
		mu.Unlock()
	})
	before := runtime.NumGoroutine()
	for i := range n {
		s := webhookAt(fmt.Sprintf("https://hook-%d.example/x", i), v1alpha1.ProbeHTTPGet, 3)
		s.Interval = every
		mon.Ensure(fmt.Sprint(i), s)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	began := time.Now()
	go func() { _ = mon.Start(ctx); close(done) }()
	var extra []int
	for time.Since(began) < run {
		extra = append(extra, runtime.NumGoroutine()-before)
		time.Sleep(7 * time.Millisecond)
	}
	cancel()
	<-done
	elapsed := time.Since(began)
	// The median, not the peak: on a busy machine the probes of one instant
	// wait to run together, but a goroutine per webhook would hold n all
	// the time.
	slices.Sort(extra)
	if median := extra[len(extra)/2]; median > n/4 {
		t.Errorf("%d goroutines more (median; peak %d) while %d webhooks were probed, want a scheduler and the probes in flight (≤ %d)", median, extra[len(extra)-1], n, n/4)
	}
	mu.Lock()
	defer mu.Unlock()
	most := int(elapsed/every) + 2 // a ticker's: one a tick, and the first at once
	for i := range n {
		if c := counts[fmt.Sprint(i)]; c < 2 || c > most {
			t.Errorf("webhook %d probed %d times in %s at %s, want 2..%d", i, c, elapsed.Round(time.Millisecond), every, most)
		}
	}
}

// The probes of one destination shared by four webhooks reach the server
// once per interval, not four times (real server, system clock).
func TestSharedProbesReachTheServerOnce(t *testing.T) {
	var served atomic.Int64
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { served.Add(1) }), "127.0.0.1")
	var mu sync.Mutex
	counts := map[string]int{}
	mon := probe.NewMonitor(&probe.HTTPProber{}, clock.RealClock{}, func(key string, r probe.Result, _ probe.Change) {
		mu.Lock()
		if r.Status == probe.Healthy {
			counts[key]++
		}
		mu.Unlock()
	})
	ctx, cancel := context.WithTimeout(t.Context(), 1100*time.Millisecond)
	defer cancel()
	for i := range 4 {
		tgt := urlTarget(srv, fmt.Sprintf("/mutate-%d", i))
		tgt.Timeout = time.Second
		mon.Ensure(fmt.Sprint(i), probe.Settings{Target: tgt, Interval: 100 * time.Millisecond, FailureThreshold: 3, SuccessThreshold: 1})
	}
	_ = mon.Start(ctx)
	mu.Lock()
	defer mu.Unlock()
	for i := range 4 {
		if int64(counts[fmt.Sprint(i)]) > served.Load() || counts[fmt.Sprint(i)] < 3 {
			t.Errorf("webhook %d: %d healthy probes from %d requests served", i, counts[fmt.Sprint(i)], served.Load())
		}
	}
	if got := served.Load(); got > 12 {
		t.Errorf("%d requests in 1.1 s at 100 ms for four webhooks of one destination, want one per interval (≤ 12)", got)
	}
}

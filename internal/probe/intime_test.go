package probe_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/selfsigned"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/stall"
)

// childHookEnv makes the test binary a webhook in a process of its own: it
// reads "<delay> <id>" lines on stdin, answers each next request after
// that delay, and reports on stdout when it wrote each answer.
const childHookEnv = "TRIPSWITCH_PROBE_CHILD_HOOK"

// TestChildHook is the child process's body; it does nothing in a normal run.
func TestChildHook(t *testing.T) {
	if os.Getenv(childHookEnv) == "" {
		t.Skip("the webhook of TestInTimeAnswersAreNeverTimeouts, run as a child process")
	}
	ca, cert, err := selfsigned.Pair("intime-ca", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	emit := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
	}
	caJSON, _ := json.Marshal(string(ca.PEM))
	emit("addr %s ca %s", ln.Addr(), caJSON)
	type plan struct {
		d  time.Duration
		id string
	}
	plans := make(chan plan, 1)
	srv := &http.Server{ReadHeaderTimeout: time.Minute, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next := <-plans
		time.Sleep(next.d)
		w.WriteHeader(http.StatusOK)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		emit("wrote %s %d", next.id, time.Now().UnixNano())
	})}
	go func() { _ = srv.Serve(ln) }()
	// Until the parent closes stdin.
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var d time.Duration
		var id string
		if _, err := fmt.Sscanf(in.Text(), "%s %s", new(string), &id); err != nil {
			continue
		}
		d, _ = time.ParseDuration(strings.Fields(in.Text())[0])
		plans <- plan{d, id}
	}
}

// childHook starts TestChildHook in a process of its own and returns its
// address, CA, a function that plans the next answer, and the times it
// wrote each answer, by id.
func childHook(t *testing.T) (*server, func(d time.Duration, id string), func() map[string]time.Time) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestChildHook$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childHookEnv+"=1")
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
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	var mu sync.Mutex
	wrote := map[string]time.Time{}
	ready := make(chan *server, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), " ", 4)
			switch {
			case len(f) == 4 && f[0] == "addr":
				var pem string
				_ = json.Unmarshal([]byte(f[3]), &pem)
				ready <- &server{addr: f[1], ca: &selfsigned.CA{PEM: []byte(pem)}}
			case len(f) == 3 && f[0] == "wrote":
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				mu.Lock()
				wrote[f[1]] = time.Unix(0, ns)
				mu.Unlock()
			}
		}
	}()
	select {
	case s := <-ready:
		_, port, _ := net.SplitHostPort(s.addr)
		s.port, _ = strconv.Atoi(port)
		next := func(d time.Duration, id string) {
			if _, err := fmt.Fprintf(stdin, "%s %s\n", d, id); err != nil {
				t.Fatal(err)
			}
		}
		return s, next, func() map[string]time.Time {
			mu.Lock()
			defer mu.Unlock()
			return maps(wrote)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child webhook did not start")
		return nil, nil, nil
	}
}

func maps(m map[string]time.Time) map[string]time.Time {
	c := make(map[string]time.Time, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestInTimeAnswersAreNeverTimeouts is the safety rule on the real clock
// with the real stall meter: a webhook in a process of its own answers
// every probe within its 200 ms timeout (at 150 to 195 ms), and no probe
// may be judged Unhealthy unless the webhook really wrote its answer
// after the probe's deadline. However busy the machine (hack/loaded-test.sh
// runs it among CPU hogs), the prober must discard what it cannot
// confirm, never count it. Answers that really were late may count.
func TestInTimeAnswersAreNeverTimeouts(t *testing.T) {
	const timeout = 200 * time.Millisecond
	n := 40
	if v, err := strconv.Atoi(os.Getenv("TRIPSWITCH_INTIME_PROBES")); err == nil && v > 0 {
		n = v // more for a measurement: TRIPSWITCH_INTIME_PROBES=1000
	}
	hook, next, wrote := childHook(t)
	meter := stall.New(stall.Options{CPUStat: "-"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = meter.Start(ctx) }()
	p := &probe.HTTPProber{Pauses: meter}
	delays := []time.Duration{150 * time.Millisecond, 180 * time.Millisecond, 190 * time.Millisecond, 195 * time.Millisecond}
	type probed struct {
		id    string
		start time.Time
		r     probe.Result
	}
	var results []probed
	for i := range n {
		id := strconv.Itoa(i)
		d := delays[i%len(delays)]
		tgt := probe.Target{
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + hook.addr + "/healthz"), CABundle: hook.ca.PEM},
			Kind:         v1alpha1.ProbeHTTPGet, HealthPath: "/healthz", Timeout: timeout,
		}
		next(d, id)
		start := time.Now()
		results = append(results, probed{id, start, p.Probe(ctx, tgt)})
		// The answer written before the next probe: answers map to probes.
		for wait := time.Now().Add(5 * time.Second); time.Now().Before(wait); time.Sleep(5 * time.Millisecond) {
			if _, ok := wrote()[id]; ok {
				break
			}
		}
	}
	at := wrote()
	counts := map[string]int{}
	for _, pr := range results {
		counts[string(pr.r.Status)+"/"+string(pr.r.Discard)]++
		if pr.r.Status != probe.Unhealthy {
			continue
		}
		w, ok := at[pr.id]
		if !ok {
			t.Errorf("probe %s: %s %q, and the webhook never reported its answer", pr.id, pr.r.Status, pr.r.Reason)
			continue
		}
		// The probe's own deadline is at least its start + timeout.
		late := w.Sub(pr.start)
		t.Logf("probe %s: Unhealthy (%q): the webhook wrote its answer %s after the probe began", pr.id, pr.r.Reason, late.Round(time.Millisecond))
		if late < timeout {
			t.Errorf("probe %s judged Unhealthy (%q) although the webhook wrote its answer %s after the probe began, within its %s timeout",
				pr.id, pr.r.Reason, late.Round(time.Millisecond), timeout)
		}
	}
	t.Logf("%d probes answered at 150-195 ms of a 200 ms timeout: %v; the run queue's latency now %s", n, counts, meter.QueueWait())
}

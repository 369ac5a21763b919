package adversary_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// world is what every sequence shares: the control plane, the controller's
// two replicas behind a recording proxy, and the webhook behind a gate that
// can reset its connections.
type world struct {
	t     *testing.T
	env   *testenv.Env
	cs    *kubernetes.Clientset
	rec   *recorder
	hook  *slowhook.Server
	gate  *gate
	reps  [2]*replica
	cases atomic.Int64
}

func newWorld(t *testing.T) *world {
	t.Helper()
	env := testenv.Start(t, testenv.Options{CRDs: true, AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme}})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	hook, err := slowhook.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Close() })
	g, err := startGate(strings.TrimPrefix(hook.URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.close)
	w := &world{t: t, env: env, cs: cs, hook: hook, gate: g, rec: startRecorder(t, env)}
	// The replicas' logs: in the test's own directory, or, to keep them
	// after it, in ADVERSARY_LOGS.
	dir := t.TempDir()
	if d := os.Getenv("ADVERSARY_LOGS"); d != "" {
		dir = d
	}
	kc := w.rec.kubeconfig(t)
	for i := range w.reps {
		w.reps[i] = &replica{name: fmt.Sprintf("replica-%d", i), kubeconfig: kc, dir: dir}
		if err := w.reps[i].start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, r := range w.reps {
			r.kill()
		}
		if t.Failed() {
			for _, r := range w.reps {
				t.Logf("%s's last log:\n%s", r.name, r.lastLog(4000))
			}
		}
	})
	return w
}

// running restarts any replica that is not running.
func (w *world) running() error {
	for _, r := range w.reps {
		if r.cmd == nil {
			if err := r.start(); err != nil {
				return err
			}
		}
	}
	return nil
}

// write is one write of a webhook configuration the controller made, as
// the proxy saw it.
type write struct {
	at     time.Time
	name   string
	method string
	status int
	ops    []patchOp
	// after is the configuration the API server answered with (2xx).
	after *admissionregistrationv1.MutatingWebhookConfiguration
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// recorder is a proxy in front of the API server for the controller (as an
// administrator), recording every write of a mutating webhook
// configuration.
type recorder struct {
	url    string
	mu     sync.Mutex
	writes []write
}

const configsPath = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"

func startRecorder(t *testing.T, env *testenv.Env) *recorder {
	t.Helper()
	upstream, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.Transport, rp.FlushInterval = roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet || !strings.HasPrefix(req.URL.Path, configsPath) {
			return transport.RoundTrip(req)
		}
		var body []byte
		if req.Body != nil {
			body, _ = io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		resp, err := transport.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(answer))
		wr := write{at: time.Now(), name: strings.TrimPrefix(req.URL.Path, configsPath), method: req.Method, status: resp.StatusCode}
		_ = json.Unmarshal(body, &wr.ops)
		if resp.StatusCode/100 == 2 {
			// JSON or protobuf, as the client asked.
			if obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(answer, nil, nil); err == nil {
				wr.after, _ = obj.(*admissionregistrationv1.MutatingWebhookConfiguration)
			}
		}
		r.mu.Lock()
		r.writes = append(r.writes, wr)
		r.mu.Unlock()
		return resp, nil
	}), -1
	rp.ErrorLog = log.New(io.Discard, "", 0) // a killed controller's requests end mid-flight
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// applied are the controller's writes of configuration name that the API
// server applied, from the i-th on.
func (r *recorder) applied(name string) []write {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []write
	for _, w := range r.writes {
		if w.name == name && w.status/100 == 2 && w.after != nil {
			out = append(out, w)
		}
	}
	return out
}

// kubeconfig reaches the API server through the recorder.
func (r *recorder) kubeconfig(t *testing.T) string {
	t.Helper()
	path, err := testenv.ProxyKubeconfig(t.TempDir(), r.url)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// version is one version of a configuration as a watch saw it: obj nil
// when it was deleted; rv is the version's resourceVersion either way.
type version struct {
	seen time.Time
	rv   int64
	obj  *admissionregistrationv1.MutatingWebhookConfiguration
}

// history watches one configuration by name and keeps every version.
type history struct {
	mu       sync.Mutex
	versions []version
}

func watchHistory(ctx context.Context, cs *kubernetes.Clientset, name string) *history {
	h := &history{}
	go func() {
		rv := ""
		for ctx.Err() == nil {
			w, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Watch(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				obj, ok := ev.Object.(*admissionregistrationv1.MutatingWebhookConfiguration)
				if !ok {
					continue
				}
				rv = obj.ResourceVersion
				v := version{seen: time.Now(), obj: obj, rv: revision(obj)}
				switch ev.Type {
				case watch.Bookmark:
					continue
				case watch.Deleted:
					v.obj = nil
				}
				h.mu.Lock()
				h.versions = append(h.versions, v)
				h.mu.Unlock()
			}
			w.Stop()
		}
	}()
	return h
}

// upTo are the versions seen before cutoff.
func (h *history) upTo(cutoff time.Time) []version {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []version
	for _, v := range h.versions {
		if v.seen.Before(cutoff) {
			out = append(out, v)
		}
	}
	return out
}

// gate is a TCP proxy in front of the webhook. It passes connections,
// resets each at once, or is not there at all (connections refused): the
// outages the API server and the probes see as a reset or a refused
// connection. Either fault also resets the connections it is passing: a
// kept-alive connection would otherwise still reach the webhook, and one
// healthy answer ends an outage.
type gate struct {
	addr, target string
	wg           sync.WaitGroup
	mu           sync.Mutex
	mode         gateMode
	ln           net.Listener // nil while refusing
	live         map[net.Conn]struct{}
}

type gateMode int

const (
	gateOpen gateMode = iota
	gateReset
	gateRefuse
)

func startGate(target string) (*gate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &gate{addr: ln.Addr().String(), target: target, live: map[net.Conn]struct{}{}}
	g.serve(ln)
	return g, nil
}

func (g *gate) serve(ln net.Listener) {
	g.ln = ln
	g.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.mu.Lock()
			if g.mode != gateOpen {
				g.mu.Unlock()
				abort(c)
				continue
			}
			g.live[c] = struct{}{}
			g.mu.Unlock()
			go func() {
				pipe(c, g.target)
				g.mu.Lock()
				delete(g.live, c)
				g.mu.Unlock()
			}()
		}
	})
}

// set puts the gate in mode m: a fault resets every connection open now,
// refusing closes the listener, and leaving it listens again on the same
// address.
func (g *gate) set(m gateMode) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mode = m
	if m != gateOpen {
		for c := range g.live {
			abort(c)
		}
	}
	switch {
	case m == gateRefuse && g.ln != nil:
		_ = g.ln.Close()
		g.ln = nil
	case m != gateRefuse && g.ln == nil:
		ln, err := net.Listen("tcp", g.addr)
		if err != nil {
			return fmt.Errorf("the webhook's gate cannot listen again on %s: %w", g.addr, err)
		}
		g.serve(ln)
	}
	return nil
}

// abort closes c with a TCP reset rather than a FIN.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func pipe(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

func (g *gate) close() {
	g.mu.Lock()
	if g.ln != nil {
		_ = g.ln.Close()
		g.ln = nil
	}
	g.mode = gateRefuse
	g.mu.Unlock()
	g.wg.Wait()
}

// traffic updates the case's ConfigMaps (dry run: nothing is stored) every
// 100 ms until ctx ends, so that the API server calls the webhook (the
// signal counts those calls, and a half-open trial samples them: an
// object that exists has a uid).
func traffic(ctx context.Context, c client.Client, namespace string, names []string) {
	for i := 0; ctx.Err() == nil; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: names[i%len(names)]}}
		patch := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"data":{"tick":"%d"}}`, i))
		if err := c.Patch(ctx, cm, patch, client.DryRunAll); err != nil && errors.Is(err, context.Canceled) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

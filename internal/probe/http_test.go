package probe_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/selfsigned"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// server is a TLS webhook on 127.0.0.1 with a certificate for its hosts.
type server struct {
	ca   *selfsigned.CA
	port int
	addr string
}

func serve(t *testing.T, handler http.Handler, hosts ...string) *server {
	t.Helper()
	ca, cert, err := selfsigned.Pair("probe-test-ca", hosts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &server{ca: ca, port: ln.Addr().(*net.TCPAddr).Port, addr: ln.Addr().String()}
}

// clusterDNS dials <svc>.<ns>.svc:<port> on 127.0.0.1:<port> for the services
// it knows, and answers NXDOMAIN for the rest, as cluster DNS would.
func clusterDNS(services ...string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if host != "127.0.0.1" {
			known := false
			for _, s := range services {
				known = known || s == host
			}
			if !known {
				return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
			}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}
}

func healthz(delay time.Duration, code int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(code)
	})
}

func urlTarget(s *server, path string) probe.Target {
	return probe.Target{
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + s.addr + path), CABundle: s.ca.PEM},
		// Generous, so a busy CI machine cannot turn a healthy answer into a
		// timeout; the deadline test sets its own.
		Kind: v1alpha1.ProbeHTTPGet, HealthPath: "/healthz", Timeout: 2 * time.Second,
	}
}

func want(t *testing.T, got probe.Result, status probe.Status, reason string) {
	t.Helper()
	if got.Status != status || !strings.Contains(got.Reason, reason) {
		t.Fatalf("probe = %s (%q), want %s with reason containing %q", got.Status, got.Reason, status, reason)
	}
}

func TestServiceWebhookOnItsOwnPort(t *testing.T) {
	s := serve(t, healthz(0, 200), "hook.team.svc")
	p := &probe.HTTPProber{DialContext: clusterDNS("hook.team.svc")}
	tgt := probe.Target{
		ClientConfig: admissionregistrationv1.WebhookClientConfig{
			Service:  &admissionregistrationv1.ServiceReference{Namespace: "team", Name: "hook", Port: ptr.To(int32(s.port)), Path: ptr.To("/mutate")},
			CABundle: s.ca.PEM,
		},
		Kind: v1alpha1.ProbeHTTPGet, HealthPath: "/healthz", Timeout: 2 * time.Second,
	}
	want(t, p.Probe(t.Context(), tgt), probe.Healthy, "HTTP 200")

	// Without the port the API server would use 443, where nothing listens.
	tgt.ClientConfig.Service.Port = nil
	want(t, p.Probe(t.Context(), tgt), probe.Unhealthy, "connection refused")
}

func TestURLWebhookOutcomes(t *testing.T) {
	p := &probe.HTTPProber{}
	t.Run("healthy", func(t *testing.T) {
		want(t, p.Probe(t.Context(), urlTarget(serve(t, healthz(0, 200), "127.0.0.1"), "/mutate")), probe.Healthy, "HTTP 200")
	})
	t.Run("wrong CA", func(t *testing.T) {
		tgt := urlTarget(serve(t, healthz(0, 200), "127.0.0.1"), "/mutate")
		other, err := selfsigned.NewCA("other")
		if err != nil {
			t.Fatal(err)
		}
		tgt.ClientConfig.CABundle = other.PEM
		want(t, p.Probe(t.Context(), tgt), probe.Unhealthy, "TLS: server certificate not trusted")
	})
	t.Run("certificate for another host", func(t *testing.T) {
		want(t, p.Probe(t.Context(), urlTarget(serve(t, healthz(0, 200), "elsewhere.example"), "/")), probe.Unhealthy, "TLS")
	})
	t.Run("slower than the deadline", func(t *testing.T) {
		tgt := urlTarget(serve(t, healthz(5*time.Second, 200), "127.0.0.1"), "/")
		tgt.Timeout = 250 * time.Millisecond
		want(t, p.Probe(t.Context(), tgt), probe.Unhealthy, "timeout after 250ms")
	})
	t.Run("closed port", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		tgt := urlTarget(&server{ca: mustCA(t), addr: addr}, "/")
		want(t, p.Probe(t.Context(), tgt), probe.Unhealthy, "connection refused")
	})
	t.Run("server error", func(t *testing.T) {
		want(t, p.Probe(t.Context(), urlTarget(serve(t, healthz(0, 500), "127.0.0.1"), "/")), probe.Unhealthy, "HTTP 500")
	})
	t.Run("wrong health path is not an outage", func(t *testing.T) {
		want(t, p.Probe(t.Context(), urlTarget(serve(t, healthz(0, 404), "127.0.0.1"), "/")), probe.Unknown, "HTTP 404")
	})
}

func mustCA(t *testing.T) *selfsigned.CA {
	ca, err := selfsigned.NewCA("x")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestUnprobeableConfigurationsAreUnknown(t *testing.T) {
	p := &probe.HTTPProber{DialContext: clusterDNS()}
	base := probe.Target{Kind: v1alpha1.ProbeHTTPGet, HealthPath: "/healthz", Timeout: 250 * time.Millisecond}
	cases := map[string]struct {
		cc     admissionregistrationv1.WebhookClientConfig
		reason string
	}{
		"malformed caBundle": {admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/"), CABundle: []byte("garbage")}, "caBundle holds no PEM certificate"},
		"unknown service":    {admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "missing"}}, "does not resolve"},
		"non-https URL":      {admissionregistrationv1.WebhookClientConfig{URL: ptr.To("http://127.0.0.1:1/")}, `scheme "http" is not https`},
		"invalid URL":        {admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://[::1")}, "clientConfig.url is invalid"},
		"no destination":     {admissionregistrationv1.WebhookClientConfig{}, "neither url nor service"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tgt := base
			tgt.ClientConfig = tc.cc
			want(t, p.Probe(t.Context(), tgt), probe.Unknown, tc.reason)
		})
	}
}

// TestOmittedCABundleUsesSystemRoots runs itself in a child process whose
// system roots (SSL_CERT_FILE) are a test CA, since Go loads them once.
func TestOmittedCABundleUsesSystemRoots(t *testing.T) {
	if addr := os.Getenv("TRIPSWITCH_PROBE_SYSTEM_ROOTS_ADDR"); addr != "" {
		tgt := probe.Target{ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + "/")}, Kind: v1alpha1.ProbeHTTPGet, HealthPath: "/healthz", Timeout: 2 * time.Second}
		want(t, (&probe.HTTPProber{}).Probe(t.Context(), tgt), probe.Healthy, "HTTP 200")
		return
	}
	s := serve(t, healthz(0, 200), "127.0.0.1")
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, s.ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(rootsFile string) error {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestOmittedCABundleUsesSystemRoots$", "-test.count=1")
		cmd.Env = append(os.Environ(), "TRIPSWITCH_PROBE_SYSTEM_ROOTS_ADDR="+s.addr, "SSL_CERT_FILE="+rootsFile, "SSL_CERT_DIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			return errors.New(string(out))
		}
		return nil
	}
	if err := run(roots); err != nil {
		t.Fatalf("with the test CA as system roots: %s", err)
	}
	// And the same probe fails when the system roots do not hold that CA.
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, mustCA(t).PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(empty); err == nil {
		t.Fatal("probe was healthy although the system roots do not trust the server")
	}
}

// admission answers /healthz at once and the admission path after delay.
func admission(delay time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", healthz(0, 200))
	mux.HandleFunc("POST /mutate", func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil || review.Request.DryRun == nil || !*review.Request.DryRun {
			http.Error(w, "want a dry-run AdmissionReview", http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	})
	return mux
}

func TestAdmissionReviewProbe(t *testing.T) {
	p := &probe.HTTPProber{}
	for _, tc := range []struct {
		name   string
		delay  time.Duration
		status probe.Status
		reason string
	}{
		{"answering webhook is healthy", 0, probe.Healthy, "AdmissionReview answered"},
		{"healthz fine but admission hangs is unhealthy", 5 * time.Second, probe.Unhealthy, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serve(t, admission(tc.delay), "127.0.0.1")
			tgt := urlTarget(s, "/mutate")
			want(t, p.Probe(t.Context(), tgt), probe.Healthy, "HTTP 200") // the health endpoint is fine either way
			tgt.Kind = v1alpha1.ProbeAdmissionReview
			tgt.ReviewVersions = []string{"v1"}
			want(t, p.Probe(t.Context(), tgt), tc.status, tc.reason)
		})
	}
	t.Run("a reply for another request is unhealthy", func(t *testing.T) {
		s := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"not-yours","allowed":true}}`))
		}), "127.0.0.1")
		tgt := urlTarget(s, "/mutate")
		tgt.Kind = v1alpha1.ProbeAdmissionReview
		want(t, p.Probe(t.Context(), tgt), probe.Unhealthy, "UID does not match")
	})
}

// TestEndpointModeShowsPartialOutages probes each ready endpoint of a
// Service; the injected dialer plays the pod network, mapping pod IPs to
// servers on 127.0.0.1.
func TestEndpointModeShowsPartialOutages(t *testing.T) {
	ca := mustCA(t)
	hookServer := func(code int) string {
		cert, err := ca.Issue("hook.team.svc")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: healthz(0, code), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}
	pods := map[string]string{} // pod address -> 127.0.0.1 server
	p := &probe.HTTPProber{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		real, ok := pods[addr]
		if !ok {
			t.Errorf("prober dialed %s, which is not an endpoint", addr)
			return nil, errors.New("not an endpoint")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, real)
	}}
	pods["10.1.0.1:9443"], pods["10.1.0.2:9443"], pods["10.1.0.3:9443"] = hookServer(200), hookServer(500), hookServer(500)
	target := func(eps ...string) probe.Target {
		return probe.Target{
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "team", Name: "hook"}, CABundle: ca.PEM},
			Kind:         v1alpha1.ProbeHTTPGet, HealthPath: "/healthz", Timeout: time.Second,
			EndpointMode: true, Endpoints: eps,
		}
	}
	r := p.Probe(t.Context(), target("10.1.0.1:9443", "10.1.0.2:9443", "10.1.0.3:9443"))
	want(t, r, probe.Healthy, "1/3 endpoints healthy (partial outage")
	if r.Healthy != 1 || r.Total != 3 {
		t.Fatalf("counts %d/%d", r.Healthy, r.Total)
	}
	want(t, p.Probe(t.Context(), target("10.1.0.2:9443", "10.1.0.3:9443")), probe.Unhealthy, "0/2 endpoints healthy: HTTP 500")
	want(t, p.Probe(t.Context(), target()), probe.Unhealthy, "no ready endpoints")
	unresolved := target()
	unresolved.EndpointsErr = `get Service team/hook: services "hook" not found`
	want(t, p.Probe(t.Context(), unresolved), probe.Unknown, "not found")
}

// The synthetic review names the user the controller runs as, whatever
// namespace it was installed into: a webhook that allows or denies by
// requester judges the user that really asks.
func TestAdmissionReviewNamesTheRequester(t *testing.T) {
	const requester = "system:serviceaccount:platform-guards:tripswitch-controller"
	got := make(chan string, 1)
	s := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "want an AdmissionReview", http.StatusBadRequest)
			return
		}
		select {
		case got <- review.Request.UserInfo.Username:
		default:
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	}), "127.0.0.1")
	tgt := urlTarget(s, "/mutate")
	tgt.Kind = v1alpha1.ProbeAdmissionReview
	want(t, (&probe.HTTPProber{Requester: requester}).Probe(t.Context(), tgt), probe.Healthy, "AdmissionReview answered")
	if u := <-got; u != requester {
		t.Fatalf("the review named %q, want %q", u, requester)
	}
}

// A webhook that accepts TCP and never completes the TLS handshake fails its
// probes (timeouts), and however many probes time out against it, they hold
// a bounded number of connections and goroutines: a dial abandoned by one
// probe is reused by the next rather than joined by another.
func TestHungHandshakeCostsBoundedConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			held = append(held, c) // never read, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range held {
			_ = c.Close()
		}
		mu.Unlock()
	})
	u := "https://" + ln.Addr().String() + "/mutate"
	tgt := probe.Target{ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &u}, Timeout: 50 * time.Millisecond, HealthPath: "/healthz"}
	p := &probe.HTTPProber{}
	before := runtime.NumGoroutine()
	const probes = 40
	for i := range probes {
		r := p.Probe(t.Context(), tgt)
		// The first three fail as they always did, so the circuit opens as
		// soon; later ones may find both connections held and count nothing.
		if r.Status != probe.Unhealthy && (i < 3 || r.Status != probe.Discarded) {
			t.Fatalf("a hung handshake, probe %d: %s %q, want Unhealthy (or Discarded after the third)", i+1, r.Status, r.Reason)
		}
	}
	if n := accepted.Load(); n > 2 {
		t.Fatalf("%d probes opened %d connections to a webhook that never finishes TLS; want at most 2", probes, n)
	}
	if grown := runtime.NumGoroutine() - before; grown > 10 {
		t.Fatalf("%d probes left %d more goroutines", probes, grown)
	}
}

// countingServer is a TLS server that counts the connections that
// completed a handshake with it.
func countingServer(t *testing.T, handler http.Handler) (*server, *atomic.Int64) {
	t.Helper()
	ca, cert, err := selfsigned.Pair("probe-test-ca", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	var handshakes atomic.Int64
	cfg := &tls.Config{Certificates: []tls.Certificate{cert},
		VerifyConnection: func(tls.ConnectionState) error { handshakes.Add(1); return nil }}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &server{ca: ca, port: ln.Addr().(*net.TCPAddr).Port, addr: ln.Addr().String()}, &handshakes
}

// TestHangAtAnyStageCostsBoundedConnections: a webhook that completes TLS
// and then never sends headers, one that sends headers and never finishes
// the body, and one that answers correctly but too late: each costs at most
// two connections at a time and a constant number of goroutines however
// many probes time out on it (a timed-out probe leaves its request on its
// connection rather than closing it; a probe that finds both connections
// held counts each held request's silence once more, and one held for ten
// timeouts is abandoned so that probes keep reaching the webhook). The
// first three probes fail,
// so a hung webhook opens its circuit as soon as when each probe had its
// own connection; none is ever Healthy. A slow webhook that recovers
// answers on the connections kept.
func TestHangAtAnyStageCostsBoundedConnections(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var slow atomic.Bool
	slow.Store(true)
	handlers := map[string]http.Handler{
		"headers never sent": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}),
		"body never finished": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("partial"))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}),
		"answers too late": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if slow.Load() {
				time.Sleep(150 * time.Millisecond)
			}
			w.WriteHeader(http.StatusOK)
		}),
	}
	for name, h := range handlers {
		t.Run(name, func(t *testing.T) {
			srv, handshakes := countingServer(t, h)
			tgt := urlTarget(srv, "/healthz")
			tgt.Timeout = 50 * time.Millisecond
			p := &probe.HTTPProber{}
			failed := 0
			probeN := func(n int) {
				for range n {
					r := p.Probe(t.Context(), tgt)
					switch {
					case r.Status == probe.Unhealthy && strings.Contains(r.Reason, "timeout"):
						failed++
					case r.Status == probe.Discarded && r.Discard == probe.DiscardBlocked && failed >= 3:
					default:
						t.Fatalf("%s, after %d failures: %s %q, want an Unhealthy timeout (or a blocked probe after the third)", name, failed, r.Status, r.Reason)
					}
				}
			}
			probeN(10)
			settled := runtime.NumGoroutine()
			probeN(40)
			if grown := runtime.NumGoroutine() - settled; grown > 6 {
				t.Errorf("40 more timed-out probes left %d more goroutines", grown)
			}
			// Blocked probes count each held request once more, and one held
			// for ten timeouts is abandoned: one in five probes, or more,
			// still fails, and a handshake every ten or so.
			if failed < 50/5 {
				t.Errorf("%d of 50 probes of a hung webhook failed; want one in five or more to count", failed)
			}
			if n, most := handshakes.Load(), int64(2+50/5); n > most {
				t.Errorf("50 timed-out probes made %d TLS handshakes, want at most %d", n, most)
			}
			if name != "answers too late" {
				return
			}
			slow.Store(false)
			before := handshakes.Load()
			deadline := time.Now().Add(10 * time.Second)
			for r := p.Probe(t.Context(), tgt); r.Status != probe.Healthy; r = p.Probe(t.Context(), tgt) {
				if time.Now().After(deadline) {
					t.Fatalf("the recovered webhook is still %s: %q", r.Status, r.Reason)
				}
			}
			if n := handshakes.Load() - before; n > 2 {
				t.Errorf("recovery took %d new handshakes, want the kept connections", n)
			}
		})
	}
}

// A probe's destination is resolved once and kept, but a changed caBundle
// or URL is seen at the very next probe: a rotated CA is trusted at once,
// and a wrong one fails at once.
func TestResolutionFollowsTheTargetsChanges(t *testing.T) {
	a := serve(t, healthz(0, http.StatusOK), "127.0.0.1")
	b := serve(t, healthz(0, http.StatusServiceUnavailable), "127.0.0.1")
	p := &probe.HTTPProber{}
	ctx := context.Background()
	target := urlTarget(a, "/healthz")
	want(t, p.Probe(ctx, target), probe.Healthy, "HTTP 200")
	target.ClientConfig.CABundle = b.ca.PEM // another CA: a's certificate is not trusted
	want(t, p.Probe(ctx, target), probe.Unhealthy, "TLS: server certificate not trusted: signed by an unknown authority")
	target.ClientConfig.CABundle = a.ca.PEM
	want(t, p.Probe(ctx, target), probe.Healthy, "HTTP 200")
	target = urlTarget(b, "/healthz")
	want(t, p.Probe(ctx, target), probe.Unhealthy, "HTTP 503")
	target.ClientConfig.CABundle = []byte("not PEM")
	want(t, p.Probe(ctx, target), probe.Unknown, "clientConfig.caBundle holds no PEM certificate")
}

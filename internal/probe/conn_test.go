package probe_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/internal/fixtures/selfsigned"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// Steady probes of many destinations reuse one connection each and keep no
// goroutine per connection between probes: the exchange runs in the
// probe's own goroutine.
func TestKeptConnectionsCostNoGoroutines(t *testing.T) {
	const destinations, rounds = 20, 5
	var targets []probe.Target
	var counts []*atomic.Int64
	for range destinations {
		srv, handshakes := countingServer(t, healthz(0, http.StatusOK))
		targets = append(targets, urlTarget(srv, "/healthz"))
		counts = append(counts, handshakes)
	}
	p := &probe.HTTPProber{}
	for _, tgt := range targets { // the first probe of each opens its connection
		want(t, p.Probe(t.Context(), tgt), probe.Healthy, "HTTP 200")
	}
	before := settledGoroutines()
	for range rounds {
		for _, tgt := range targets {
			want(t, p.Probe(t.Context(), tgt), probe.Healthy, "HTTP 200")
		}
	}
	// The servers' own goroutines (one per kept connection) are the same
	// before and after; the prober adds none.
	if grown := settledGoroutines() - before; grown > 2 {
		t.Errorf("%d rounds of probes of %d destinations left %d more goroutines, want none", rounds, destinations, grown)
	}
	for i, c := range counts {
		if n := c.Load(); n != 1 {
			t.Errorf("destination %d: %d TLS handshakes for %d probes, want 1 (keep-alive)", i, n, rounds+1)
		}
	}
}

// settledGoroutines counts goroutines once the count holds still: servers'
// connection goroutines and finished probes' goroutines take a moment to
// exit.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(10 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			return n
		}
		n = m
	}
	return n
}

// A kept connection the server closed while it was idle (its idle timeout,
// a restart behind the same address) is noticed before it is used, and
// the probe goes out on a fresh one: no false failure.
func TestIdleConnectionClosedByTheServer(t *testing.T) {
	srv, handshakes := countingServerWith(t, healthz(0, http.StatusOK), func(s *http.Server) { s.IdleTimeout = 20 * time.Millisecond })
	tgt := urlTarget(srv, "/healthz")
	p := &probe.HTTPProber{}
	for range 5 {
		want(t, p.Probe(t.Context(), tgt), probe.Healthy, "HTTP 200")
		time.Sleep(100 * time.Millisecond) // past the server's idle timeout: it closes the connection
	}
	if n := handshakes.Load(); n < 2 {
		t.Fatalf("%d handshakes: the server's idle timeout never closed a connection, so the test saw nothing", n)
	}
}

// countingServerWith is countingServer with the server's settings changed
// by set.
func countingServerWith(t *testing.T, handler http.Handler, set func(*http.Server)) (*server, *atomic.Int64) {
	t.Helper()
	srv, cfg := tlsConfigFor(t)
	var handshakes atomic.Int64
	cfg.VerifyConnection = func(tls.ConnectionState) error { handshakes.Add(1); return nil }
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute}
	set(hs)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	srv.port, srv.addr = ln.Addr().(*net.TCPAddr).Port, ln.Addr().String()
	return srv, &handshakes
}

// tlsConfigFor returns a server (its CA; no address yet) and a TLS
// configuration with its certificate for 127.0.0.1.
func tlsConfigFor(t *testing.T) (*server, *tls.Config) {
	t.Helper()
	ca, cert, err := selfsigned.Pair("probe-test-ca", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return &server{ca: ca}, &tls.Config{Certificates: []tls.Certificate{cert}}
}

// A server that closes each connection after its answer, with or without
// saying so, and one that sends bytes nobody asked for on an idle
// connection: every probe is judged on its own answer.
func TestConnectionsTheServerDoesNotKeep(t *testing.T) {
	cases := map[string]func(c net.Conn, req *http.Request){
		"Connection: close": func(c net.Conn, _ *http.Request) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			_ = c.Close()
		},
		"closes without saying so": func(c net.Conn, _ *http.Request) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			_ = c.Close()
		},
		"unasked bytes after the answer": func(c net.Conn, _ *http.Request) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			_, _ = io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
		},
		"chunked, kept": func(c net.Conn, _ *http.Request) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
		},
		"100 Continue first": func(c net.Conn, _ *http.Request) {
			_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		},
	}
	for name, answer := range cases {
		t.Run(name, func(t *testing.T) {
			srv, conns := rawServer(t, answer)
			tgt := urlTarget(srv, "/healthz")
			p := &probe.HTTPProber{}
			for range 4 {
				want(t, p.Probe(t.Context(), tgt), probe.Healthy, "HTTP 200")
				if name == "unasked bytes after the answer" || name == "closes without saying so" {
					time.Sleep(50 * time.Millisecond) // the bytes, or the close, arrive before the next probe
				}
			}
			n := conns.Load()
			switch name {
			case "chunked, kept", "100 Continue first":
				if n != 1 {
					t.Errorf("%d connections for 4 probes, want 1 (kept alive)", n)
				}
			default:
				if n != 4 {
					t.Errorf("%d connections for 4 probes, want 4 (none may be reused)", n)
				}
			}
		})
	}
}

// rawServer is a TLS server that reads each request and answers it with
// answer, byte for byte, and counts the connections it accepts.
func rawServer(t *testing.T, answer func(c net.Conn, req *http.Request)) (*server, *atomic.Int64) {
	t.Helper()
	srv, cfg := tlsConfigFor(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					answer(c, req)
				}
			})
		}
	})
	srv.port = ln.Addr().(*net.TCPAddr).Port
	srv.addr = ln.Addr().String()
	return srv, &accepted
}

// A webhook that died (its process gone, its connections closed) fails its
// next probe: the kept connection is not mistaken for a live one.
func TestKeptConnectionToADeadWebhook(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, cfg := tlsConfigFor(t)
	srv.addr = ln.Addr().String()
	hs := &http.Server{Handler: healthz(0, http.StatusOK)}
	go func() { _ = hs.Serve(tls.NewListener(ln, cfg)) }()
	tgt := urlTarget(srv, "/healthz")
	p := &probe.HTTPProber{}
	want(t, p.Probe(t.Context(), tgt), probe.Healthy, "HTTP 200")
	_ = hs.Close() // the listener and every connection
	want(t, p.Probe(t.Context(), tgt), probe.Unhealthy, "connection refused")
}

// An answer longer than the prober reads is judged on what was read, and
// its connection, holding the rest, is not reused.
func TestOverlongAnswerIsNotKept(t *testing.T) {
	big := strings.Repeat("x", 2<<20)
	srv, handshakes := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, big)
	}))
	tgt := urlTarget(srv, "/healthz")
	p := &probe.HTTPProber{}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for range 2 {
		want(t, p.Probe(ctx, tgt), probe.Healthy, "HTTP 200")
	}
	if n := handshakes.Load(); n != 2 {
		t.Errorf("%d handshakes for 2 overlong answers, want 2 (not kept)", n)
	}
}

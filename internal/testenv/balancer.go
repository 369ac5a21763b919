package testenv

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// Balancer is a TCP proxy on 127.0.0.1 in front of several API servers, as a
// Service or load balancer is in a real control plane: each new connection
// goes to a backend chosen at random, and is cut after a random lifetime so
// clients reconnect (as they do after GOAWAYs and restarts) and land on
// another instance.
type Balancer struct {
	// Addr is the proxy's host:port.
	Addr string

	ln       net.Listener
	backends []string
	maxLife  time.Duration
	wg       sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	counts  map[string]int
	stopped bool
}

// StartBalancer proxies to backends, cutting each connection after a
// lifetime drawn from [maxLife/2, maxLife). It stops when t ends.
func StartBalancer(t testing.TB, maxLife time.Duration, backends ...string) *Balancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("balancer: %v", err)
	}
	b := &Balancer{Addr: ln.Addr().String(), ln: ln, backends: backends, maxLife: maxLife,
		conns: map[net.Conn]struct{}{}, counts: map[string]int{}}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(b.stop)
	return b
}

// Connections returns how many connections went to each backend.
func (b *Balancer) Connections() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]int, len(b.counts))
	for k, v := range b.counts {
		out[k] = v
	}
	return out
}

func (b *Balancer) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		backend := b.backends[rand.IntN(len(b.backends))]
		u, err := net.Dial("tcp", backend)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !b.track(backend, c, u) {
			return
		}
		life := b.maxLife/2 + rand.N(b.maxLife/2+1)
		cut := time.AfterFunc(life, func() { _ = c.Close(); _ = u.Close() })
		b.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer b.wg.Done()
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
			cut.Stop()
			b.untrack(c, u)
		}
		go pipe(u, c)
		go pipe(c, u)
	}
}

func (b *Balancer) track(backend string, c, u net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		_ = c.Close()
		_ = u.Close()
		return false
	}
	b.counts[backend]++
	b.conns[c], b.conns[u] = struct{}{}, struct{}{}
	return true
}

func (b *Balancer) untrack(c, u net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.conns, c)
	delete(b.conns, u)
}

func (b *Balancer) stop() {
	b.mu.Lock()
	b.stopped = true
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	_ = b.ln.Close()
	b.wg.Wait()
}

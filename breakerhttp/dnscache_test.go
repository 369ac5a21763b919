package breakerhttp_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breakerhttp"
)

// blockingResolver answers once released, or fails with its context's
// error when that ends first, as net.Resolver does.
type blockingResolver struct {
	started chan struct{}
	release chan struct{}
	calls   atomic.Int64
}

func (r *blockingResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	if r.calls.Add(1) == 1 {
		close(r.started)
	}
	select {
	case <-r.release:
		return []string{"10.0.0.1"}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pipeDialer connects to nothing: it hands back one end of a pipe.
type pipeDialer struct{}

func (pipeDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	a, b := net.Pipe()
	_ = b.Close()
	return a, nil
}

// clockHook reports every reading of the cache's clock: a dial reads it
// just before it joins the shared lookup.
type clockHook struct {
	now   time.Time
	reads chan struct{}
}

func (c *clockHook) Now() time.Time {
	select {
	case c.reads <- struct{}{}:
	default:
	}
	return c.now
}

// TestDNSCacheLookupOutlivesTheFirstDialer: the shared lookup does not run
// on the first dialer's context. A dial with no deadline that joined it
// gets the addresses after the first dial gave up, instead of the first
// dial's error.
func TestDNSCacheLookupOutlivesTheFirstDialer(t *testing.T) {
	// A first lookup fills the cache and expires, so that every later dial
	// reads the clock (to see the entry expired) before joining the lookup.
	clk := &clockHook{now: time.Unix(1000, 0), reads: make(chan struct{}, 1)}
	cache := &breakerhttp.DNSCache{TTL: time.Second, Resolver: &countingResolver{}, Dialer: pipeDialer{}, Clock: clk}
	conn, err := cache.DialContext(context.Background(), "tcp", "account.internal:443")
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	clk.now = clk.now.Add(2 * time.Second)
	res := &blockingResolver{started: make(chan struct{}), release: make(chan struct{})}
	cache.Resolver = res
	drain(clk.reads)

	first, leave := context.WithCancelCause(context.Background())
	firstErr := make(chan error, 1)
	go func() {
		_, err := cache.DialContext(first, "tcp", "account.internal:443")
		firstErr <- err
	}()
	<-res.started
	drain(clk.reads)

	second := make(chan error, 1)
	go func() {
		conn, err := cache.DialContext(context.Background(), "tcp", "account.internal:443")
		if err == nil {
			_ = conn.Close()
		}
		second <- err
	}()
	waitRead(clk.reads) // the second dial is about to join
	for range 100 {
		runtime.Gosched()
	}
	leave(context.DeadlineExceeded)
	if err := <-firstErr; !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first dial: %v, want its own context's error", err)
	}
	close(res.release)
	if err := <-second; err != nil {
		t.Fatalf("second dial failed with %v: the lookup ran on the first dial's context", err)
	}
}

func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}

func waitRead(c chan struct{}) { <-c }

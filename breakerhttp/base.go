package breakerhttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// BaseOptions are shared transport options, off in the zero value. (To
// resend a request whose connection was refused, as during an instance's
// restart, use Retry: it sits outside the circuit, so the circuit counts
// every attempt, and it resends a refused request of any method.)
type BaseOptions struct {
	// DNSCacheTTL, if positive, caches successful host lookups for this long
	// (for example 5s); failed lookups are never cached.
	DNSCacheTTL time.Duration
	// Resolver looks hosts up for the cache; nil means net.DefaultResolver.
	Resolver Resolver
	// Dialer connects; nil means a net.Dialer with a 3s connect timeout.
	Dialer BaseDialer
}

// NewBaseTransport returns a clone of http.DefaultTransport with the options
// applied, for use as Policy.Base.
func NewBaseTransport(o BaseOptions) http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	var dialer BaseDialer = &net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}
	if o.Dialer != nil {
		dialer = o.Dialer
	}
	if o.DNSCacheTTL > 0 {
		dialer = &DNSCache{TTL: o.DNSCacheTTL, Resolver: o.Resolver, Dialer: dialer}
	}
	t.DialContext = dialer.DialContext
	return t
}

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// BaseDialer dials connections; *net.Dialer is one.
type BaseDialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Refused reports whether err is a refused connection: the dial failed,
// so the request was never sent.
func Refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && errors.Is(err, syscall.ECONNREFUSED)
}

// DNSCache is a dialer that caches host lookups for TTL. Concurrent lookups
// of one host share one query, which runs until it answers or every dial
// waiting for it has given up: one dial's deadline or cancellation ends
// only that dial's wait. Failed lookups are not cached, so a resolver
// outage is retried on the next dial. Addresses are dialed in the
// order the resolver gave them until one connects.
type DNSCache struct {
	// TTL is how long a lookup is used. Required.
	TTL time.Duration
	// Resolver; nil means net.DefaultResolver.
	Resolver Resolver
	// Dialer connects to the addresses; nil means a net.Dialer.
	Dialer BaseDialer
	// Clock supplies time; nil means the system clock.
	Clock breaker.Clock

	mu      sync.Mutex
	entries map[string]dnsEntry
	flights map[string]*dnsFlight
}

type dnsEntry struct {
	addrs   []string
	expires time.Time
}

// DialContext resolves addr's host through the cache and dials it.
func (c *DNSCache) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("breakerhttp: dial %q: %w", addr, err)
	}
	dialer := c.Dialer
	if dialer == nil {
		dialer = &net.Dialer{}
	}
	if net.ParseIP(host) != nil {
		return dialer.DialContext(ctx, network, addr)
	}
	addrs, err := c.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	var first error
	for _, a := range addrs {
		conn, err := dialer.DialContext(ctx, network, net.JoinHostPort(a, port))
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

func (c *DNSCache) now() time.Time {
	if c.Clock != nil {
		return c.Clock.Now()
	}
	return time.Now()
}

// lookup returns host's addresses from the cache, or from the lookup that
// every concurrent dial of host shares. That lookup runs on a context of its
// own (with the first dial's values, not its deadline or cancellation), so
// one dial giving up does not fail the others; it is canceled when the last
// dial waiting for it has left.
func (c *DNSCache) lookup(ctx context.Context, host string) ([]string, error) {
	c.mu.Lock()
	if e, ok := c.entries[host]; ok && c.now().Before(e.expires) {
		c.mu.Unlock()
		return e.addrs, nil
	}
	f := c.flights[host]
	if f == nil {
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &dnsFlight{done: make(chan struct{}), cancel: cancel}
		if c.flights == nil {
			c.flights = map[string]*dnsFlight{}
		}
		c.flights[host] = f
		go c.resolve(lctx, host, f)
	}
	f.waiters++
	c.mu.Unlock()
	defer c.leave(host, f)
	select {
	case <-f.done:
		return f.addrs, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dnsFlight is one lookup shared by the dials waiting for it.
type dnsFlight struct {
	done    chan struct{} // closed when addrs and err are set
	addrs   []string
	err     error
	waiters int // under DNSCache.mu
	cancel  context.CancelFunc
}

// resolve runs f's lookup, caches a success and wakes f's waiters.
func (c *DNSCache) resolve(ctx context.Context, host string, f *dnsFlight) {
	var r Resolver = net.DefaultResolver
	if c.Resolver != nil {
		r = c.Resolver
	}
	addrs, err := r.LookupHost(ctx, host)
	if err == nil && len(addrs) == 0 {
		err = &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	c.mu.Lock()
	if err == nil {
		if c.entries == nil {
			c.entries = map[string]dnsEntry{}
		}
		c.entries[host] = dnsEntry{addrs: addrs, expires: c.now().Add(c.TTL)}
	}
	if c.flights[host] == f {
		delete(c.flights, host)
	}
	c.mu.Unlock()
	f.addrs, f.err = addrs, err
	close(f.done)
}

// leave ends one dial's wait for f; the last one out cancels the lookup.
func (c *DNSCache) leave(host string, f *dnsFlight) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.waiters--; f.waiters == 0 {
		f.cancel()
		if c.flights[host] == f {
			delete(c.flights, host) // a later dial starts afresh
		}
	}
}

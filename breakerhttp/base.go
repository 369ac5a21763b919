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

	"golang.org/x/sync/singleflight"

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
// of one host share one query; failed lookups are not cached, so a
// resolver outage is retried on the next dial. Addresses are dialed in the
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

	group   singleflight.Group
	mu      sync.Mutex
	entries map[string]dnsEntry
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

func (c *DNSCache) lookup(ctx context.Context, host string) ([]string, error) {
	c.mu.Lock()
	e, ok := c.entries[host]
	c.mu.Unlock()
	if ok && c.now().Before(e.expires) {
		return e.addrs, nil
	}
	v, err, _ := c.group.Do(host, func() (any, error) {
		var r Resolver = net.DefaultResolver
		if c.Resolver != nil {
			r = c.Resolver
		}
		addrs, err := r.LookupHost(ctx, host)
		if err != nil {
			return nil, err
		}
		if len(addrs) == 0 {
			return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
		}
		c.mu.Lock()
		if c.entries == nil {
			c.entries = map[string]dnsEntry{}
		}
		c.entries[host] = dnsEntry{addrs: addrs, expires: c.now().Add(c.TTL)}
		c.mu.Unlock()
		return addrs, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]string), nil
}

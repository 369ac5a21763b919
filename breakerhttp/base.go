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
)

// BaseOptions are the shared transport options seed 002's services adopted
// after a deploy gap. Both are off in the zero value.
type BaseOptions struct {
	// RetryRefused retries a request once when its connection was refused:
	// it was never sent, so this is safe for any method. It covers the gap
	// of a restarting instance; every other error reaches the circuit
	// untouched. The retry needs a replayable body (GetBody).
	RetryRefused bool
	// RefusedDelay is the wait before that retry. Default 100ms.
	RefusedDelay time.Duration
	// DNSCacheTTL, if positive, caches successful host lookups for this long
	// (seed 002 used 5s); failed lookups are never cached.
	DNSCacheTTL time.Duration
	// Resolver looks hosts up for the cache; nil means net.DefaultResolver.
	Resolver Resolver
	// Dialer connects; nil means a net.Dialer with a 3s timeout (the
	// connect timeout of seed 002's pool).
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
	if !o.RetryRefused {
		return t
	}
	delay := o.RefusedDelay
	if delay <= 0 {
		delay = 100 * time.Millisecond
	}
	return &refusedRetry{next: t, delay: delay}
}

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// BaseDialer dials connections; *net.Dialer is one.
type BaseDialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// refusedRetry sends a request once more when its connection was refused.
type refusedRetry struct {
	next  http.RoundTripper
	delay time.Duration
}

func (r *refusedRetry) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil || !Refused(err) {
		return resp, err
	}
	retry, rerr := rewind(req)
	if rerr != nil || (req.Body != nil && req.Body != http.NoBody && req.GetBody == nil) {
		return nil, err
	}
	t := time.NewTimer(r.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-req.Context().Done():
		return nil, err
	}
	return r.next.RoundTrip(retry)
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
	// Now is the clock; nil means time.Now.
	Now func() time.Time

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
	if c.Now != nil {
		return c.Now()
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

package probe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// A destination is where probes of one webhook go, resolved once from its
// clientConfig: its kept connections and the slots for the requests in
// flight on them, and the prober's pace of opening connections (see
// probeOne for why a destination holds at most two).

// transportKey identifies a destination and the trust it is probed with.
type transportKey struct {
	url, serverName, dialAddr string
	caBundle                  [sha256.Size]byte // zero: the system roots (or RootCAs)
}

// maxTransports bounds the pool; past it, the pool starts over (rotating
// caBundles and churning endpoints are the only way to get there).
const maxTransports = 4096

// endpoint is a resolved probe destination.
type endpoint struct {
	url        string
	serverName string
	roots      *x509.CertPool
	caBundle   [sha256.Size]byte
	dialAddr   string // set: connect here (one endpoint of a Service) whatever the URL's host
}

// connectTimeout bounds a connection's dial and its TLS handshake. net/http
// finishes a dial in the background after the probe that started it gave up
// (the next request may use the connection), so without a bound a webhook
// that accepts TCP and never completes TLS would hold that dial for ever.
// It is the longest probe timeout the API allows.
const connectTimeout = 30 * time.Second

func (p *HTTPProber) dial() func(ctx context.Context, network, addr string) (net.Conn, error) {
	if p.DialContext != nil {
		return p.DialContext
	}
	return (&net.Dialer{Timeout: connectTimeout}).DialContext
}

// holdTimeout bounds how long a request may keep its destination after its
// probe gave up on it: past it the connection is closed, and the next probe
// dials again. Like connectTimeout, the longest probe timeout the API allows.
const holdTimeout = connectTimeout

// slots is how many requests (and connections) one destination may have in
// flight.
const slots = 2

// destination is one probe destination's connections and its request
// slots.
type destination struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	tls  *tls.Config
	// slot holds a token per request in flight.
	slot chan struct{}
	// dialing counts this destination's dials waiting for the prober's
	// handshake limit.
	dialing atomic.Int32

	mu     sync.Mutex
	flight []*inflight // the requests in flight, oldest first
	idle   []*conn     // kept-alive connections no request uses
}

// inflight is one request in flight.
type inflight struct {
	since  time.Time
	cancel context.CancelFunc
	// counted are the probers (Target.Key) that counted this request's
	// silence while blocked behind it (its own counted it when it timed out).
	counted []string
	// gotConn: the request has a connection (it was sent, or is being).
	gotConn atomic.Bool
	// wrote: the request was written (when is not used: the trace's hook
	// may run late on a busy machine, long after the write).
	wrote atomic.Bool
	// Once the request is written on a connection whose kernel counts what
	// it received: wire is that connection's, base what it had received
	// before the write, wroteAt when the write ended (the last attempt's,
	// when a reused connection failed it and it was sent again).
	wmu     sync.Mutex
	wire    *wire
	base    uint64
	wroteAt time.Time
}

// mark records the connection the request was written on and what it had
// received before.
func (f *inflight) mark(w *wire, base uint64) {
	f.wmu.Lock()
	f.wire, f.base, f.wroteAt = w, base, time.Now()
	f.wmu.Unlock()
}

// written returns when the marked write ended (ok false: none marked).
func (f *inflight) written() (time.Time, bool) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	return f.wroteAt, f.wire != nil
}

// answered reports whether bytes wait unread in the kernel on the
// request's connection: an answer came, and the controller has not read it
// yet (a starved controller reads late). A webhook that sent part of an
// answer and hangs leaves nothing unread: its reader took what came.
func (f *inflight) answered() bool {
	f.wmu.Lock()
	w := f.wire
	f.wmu.Unlock()
	return w != nil && w.unread()
}

// silent reports whether the kernel has received nothing on the request's
// connection since before it was written (at wrote), as of a time at or
// after at: no answer had begun to come by at, whatever the controller's
// CPU did.
func (f *inflight) silent() (at, wrote time.Time, ok bool) {
	f.wmu.Lock()
	w, base, wrote := f.wire, f.base, f.wroteAt
	f.wmu.Unlock()
	if w == nil {
		return time.Time{}, time.Time{}, false
	}
	at = time.Now()
	b, _, ok := w.received()
	if !ok || b != base {
		return time.Time{}, time.Time{}, false
	}
	return at, wrote, true
}

func (d *destination) hold(cancel context.CancelFunc) *inflight {
	f := &inflight{since: time.Now(), cancel: cancel} // since: when it could be sent
	d.mu.Lock()
	d.flight = append(d.flight, f)
	d.mu.Unlock()
	return f
}

func (d *destination) release(f *inflight) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, g := range d.flight {
		if g == f {
			d.flight = append(d.flight[:i], d.flight[i+1:]...)
			return
		}
	}
}

// blocked judges a probe that found every slot taken for its whole timeout:
// it never reached the webhook. A request still unanswered past its own
// timeout is evidence about the destination once more, as the one slow
// request it is, for each prober (key: a probe group) blocked behind it:
// the groups probing one configuration's webhooks share a destination,
// and a webhook that hangs is then judged down by each as fast as when
// each probe sent its own request. A probe blocked behind requests its key has counted so
// counts nothing. A request
// held for abandonAge (a multiple of the timeout a slow webhook's answer
// outlasts only when it hangs) is abandoned, closing its connection, so
// that the next probe reaches the webhook on a fresh one. One slow answer
// among fast ones therefore costs at most one failed probe per breaker
// (the next probe uses the second connection), never a run of them.
func (d *destination) blocked(key string, timeout, late time.Duration) Result {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.flight) == 0 { // answered just now
		return Result{Status: Discarded, Discard: DiscardBlocked, Overrun: late,
			Reason: fmt.Sprintf("did not reach the webhook: waited %s for a connection that freed too late", timeout)}
	}
	oldest := d.flight[0]
	age := time.Since(oldest.since).Round(time.Millisecond)
	if age >= abandonAfter*timeout && !oldest.answered() {
		// Not when its answer waits unread in the kernel: a starved
		// controller reads it late, and a new connection's handshake costs
		// more than waiting for it (a fifth of the CPU of a controller at a
		// tenth of a core, in an outage of 400 slow webhooks).
		oldest.cancel()
	}
	answered := false
	for _, f := range d.flight {
		if !f.countedBy(key) {
			if f.answered() {
				// Answered, and waiting for this controller: counting it
				// would count the controller's starvation (a 2 s pause
				// held a healthy webhook's answered request 5 s, and
				// opened its circuit).
				answered = true
				continue
			}
			f.counted = append(f.counted, key)
			r := Result{Status: Unhealthy, TimedOut: true, Overrun: late,
				Reason: fmt.Sprintf("timeout after %s (the destination's requests are still unanswered, the oldest sent %s ago)", timeout, age)}
			// The kernel's word confirms the silence of the request counted:
			// nothing received since it was written, its whole timeout ago.
			if at, wrote, ok := f.silent(); ok && !at.Before(wrote.Add(timeout)) {
				r.TimedOut = false
				r.Reason = fmt.Sprintf("timeout after %s (the destination's requests are still unanswered, nothing received on them; the oldest sent %s ago)", timeout, age)
			}
			return r
		}
	}
	if answered {
		return Result{Status: Discarded, Discard: DiscardBlocked, Overrun: late,
			Reason: fmt.Sprintf("did not reach the webhook: its connections hold answers the webhook sent that this controller has not read yet (the oldest request sent %s ago)", age)}
	}
	return Result{Status: Discarded, Discard: DiscardBlocked, Overrun: late,
		Reason: fmt.Sprintf("did not reach the webhook: its connections are held by unanswered requests this breaker counted already (the oldest sent %s ago)", age)}
}

// abandonAfter is how many timeouts a request is held before a blocked
// probe abandons it: a webhook answering every request 2 s late (eight
// default timeouts) keeps its connections; one that hangs gets fresh ones.
const abandonAfter = 10

func (f *inflight) countedBy(key string) bool {
	for _, k := range f.counted {
		if k == key {
			return true
		}
	}
	return false
}

// paced discards a timeout of a request that never got a connection while
// the destination's dial waited for the prober's own handshake limit.
func (d *destination) paced(f *inflight, r Result) Result {
	if r.TimedOut && !f.gotConn.Load() && d.dialing.Load() > 0 {
		r.Status, r.Discard = Discarded, DiscardPaced
		r.Reason = fmt.Sprintf("did not reach the webhook within %s: its connection waited for the controller's limit of %d handshakes at once", strings.TrimPrefix(r.Reason, "timeout after "), maxHandshakes)
	}
	return r
}

// maxHandshakes bounds the connections (TCP and TLS) the prober opens at
// once. A start or a failover opens every destination's connection in the
// same second; unbounded, a CPU-limited controller spends its quota on
// hundreds of handshakes at once and times out its own probes.
const maxHandshakes = 8

// pool returns the certificate pool of a caBundle, parsed once per bundle
// (a steady probe would otherwise parse it every time), or nil when it holds
// no PEM certificate.
func (p *HTTPProber) pool(sum [sha256.Size]byte, pemBytes []byte) *x509.CertPool {
	if v, ok := p.pools.Load(sum); ok {
		return v.(*x509.CertPool)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		pool = nil
	}
	if p.poolEntries.Add(1) > maxTransports {
		p.pools.Clear()
		p.poolEntries.Store(1)
	}
	p.pools.Store(sum, pool)
	return pool
}

// destination returns the pooled transport and request slot for ep,
// creating them on first use. Connections are reused like the API server's
// webhook client reuses them; a dead webhook still fails its probe, since a
// request on a broken connection fails and a new connection is refused or
// times out.
func (p *HTTPProber) destination(ep endpoint) *destination {
	key := transportKey{url: ep.url, serverName: ep.serverName, dialAddr: ep.dialAddr, caBundle: ep.caBundle}
	if d, ok := p.transports.Load(key); ok {
		return d.(*destination)
	}
	dial := p.dial()
	if ep.dialAddr != "" {
		dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return p.dial()(ctx, network, ep.dialAddr)
		}
	}
	d := &destination{slot: make(chan struct{}, slots), dial: dial,
		// HTTP/1.1 only, like the API server's webhook client.
		tls: &tls.Config{RootCAs: ep.roots, ServerName: ep.serverName, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}}
	if p.entries.Add(1) > maxTransports {
		p.transports.Range(func(k, v any) bool {
			v.(*destination).closeIdle()
			p.transports.Delete(k)
			return true
		})
		p.entries.Store(1)
	}
	actual, loaded := p.transports.LoadOrStore(key, d)
	if loaded {
		p.entries.Add(-1)
	}
	return actual.(*destination)
}

// handshake opens one TLS connection for d within the prober's limit of
// handshakes at once, bounded by connectTimeout.
func (p *HTTPProber) handshake(ctx context.Context, d *destination, dial func(context.Context, string, string) (net.Conn, error), cfg *tls.Config, network, addr string) (net.Conn, error) {
	p.handshakesOnce.Do(func() { p.handshakes = make(chan struct{}, maxHandshakes) })
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	d.dialing.Add(1)
	select {
	case p.handshakes <- struct{}{}:
		d.dialing.Add(-1)
	case <-ctx.Done():
		d.dialing.Add(-1)
		return nil, ctx.Err()
	}
	defer func() { <-p.handshakes }()
	// Once begun, the dial and handshake are not cancelled with the request
	// that asked for them: a probe that gives up (or a held request that is
	// abandoned) leaves the connection, when it comes, to the next probe,
	// so a webhook that never finishes TLS holds the destination's
	// connections, not a new one per probe.
	ctx, cancelDial := context.WithTimeout(context.WithoutCancel(ctx), connectTimeout)
	defer cancelDial()
	raw, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, err
	}
	return conn, nil
}

// resolveKey is everything of a target that resolve reads, but its caBundle
// (compared, not hashed, on a hit).
type resolveKey struct {
	url, svcName, svcNamespace, svcPath  string
	svcPort                              int32
	hasURL, hasService, hasPath, hasPort bool
	kind                                 v1alpha1.ProbeKind
	healthPath                           string
}

// resolution is one target's resolve, kept for its next probe.
type resolution struct {
	caBundle []byte
	ep       endpoint
	err      error
}

// resolve returns t's destination, from the last resolution of the same
// target: a steady probe would otherwise parse its URL and hash its
// caBundle every time.
func (p *HTTPProber) resolve(t Target) (endpoint, error) {
	cc := t.ClientConfig
	k := resolveKey{kind: t.Kind, healthPath: t.HealthPath}
	if cc.URL != nil {
		k.url, k.hasURL = *cc.URL, true
	}
	if s := cc.Service; s != nil {
		k.svcName, k.svcNamespace, k.hasService = s.Name, s.Namespace, true
		if s.Path != nil {
			k.svcPath, k.hasPath = *s.Path, true
		}
		if s.Port != nil {
			k.svcPort, k.hasPort = *s.Port, true
		}
	}
	if v, ok := p.resolved.Load(k); ok {
		if r := v.(*resolution); bytes.Equal(r.caBundle, cc.CABundle) {
			return r.ep, r.err
		}
	}
	ep, err := p.resolveNew(t)
	if p.resolvedEntries.Add(1) > maxTransports {
		p.resolved.Clear()
		p.resolvedEntries.Store(1)
	}
	p.resolved.Store(k, &resolution{caBundle: bytes.Clone(cc.CABundle), ep: ep, err: err})
	return ep, err
}

func (p *HTTPProber) resolveNew(t Target) (endpoint, error) {
	var ep endpoint
	var err error
	if ep.url, ep.serverName, err = locate(t); err != nil {
		return ep, err
	}
	cc := t.ClientConfig
	if len(cc.CABundle) > 0 {
		ep.caBundle = sha256.Sum256(cc.CABundle)
		if ep.roots = p.pool(ep.caBundle, cc.CABundle); ep.roots == nil {
			return ep, cannot("clientConfig.caBundle holds no PEM certificate")
		}
	} else {
		ep.roots = p.RootCAs // nil: crypto/tls uses the system roots
	}
	return ep, nil
}

// Post sends body, an AdmissionReview, to the webhook's own path the way
// the API server calls it (same destination, TLS trust and server name as
// Probe), and returns the answer's status code and body; ctx bounds the
// call. It goes within the destination's slots, as a probe: a destination
// holds at most that many connections, whoever sends on them. It is how
// tripswitch's other reviews reach a webhook (admission.Send: the audit's
// re-reviews).
func (p *HTTPProber) Post(ctx context.Context, cc admissionregistrationv1.WebhookClientConfig, body []byte) (int, []byte, error) {
	ep, err := p.resolve(Target{ClientConfig: cc, Kind: v1alpha1.ProbeAdmissionReview})
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("build review request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	d := p.destination(ep)
	select {
	case d.slot <- struct{}{}:
	case <-ctx.Done():
		return 0, nil, fmt.Errorf("wait for a connection to the webhook: %w", context.Cause(ctx))
	}
	defer func() { <-d.slot }()
	a, err := p.exchange(ctx, d, req, body, &inflight{})
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return 0, nil, err
	}
	return a.code, a.body, nil
}

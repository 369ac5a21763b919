package probe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/admission"
)

// maxBody bounds how much of a response is read.
const maxBody = 1 << 20

// HTTPProber probes webhooks over HTTPS the way kube-apiserver calls them:
// service references resolve to <svc>.<ns>.svc on the service port (443 by
// default) with that name as TLS server name, URL webhooks to their host and
// port; trust comes from caBundle, or the system roots when it is omitted;
// HTTP/1.1 only.
type HTTPProber struct {
	// DialContext opens TCP connections; nil means a net.Dialer. Tests inject
	// one that maps <svc>.<ns>.svc:<port> to 127.0.0.1.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// RootCAs is the trust used when caBundle is omitted; nil means the system roots.
	RootCAs *x509.CertPool
	// Requester is the user the synthetic AdmissionReview names: the one the
	// controller runs as (identity.Username), so that a webhook that judges
	// by requester judges the user that really asks. Empty names none.
	Requester string
	// Pauses, if set, tells a timeout the webhook caused from one the
	// controller did (see confirm): nil trusts the clock.
	Pauses PauseMeter

	// transports keeps one keep-alive transport per destination and trust,
	// as the API server keeps its webhook clients: a steady probe then costs
	// a request, not a TCP and TLS handshake.
	transports sync.Map // transportKey -> *destination
	entries    atomic.Int64
	// handshakes holds a token per connection being opened (maxHandshakes).
	handshakes     chan struct{}
	handshakesOnce sync.Once
	// pools caches each caBundle's parsed certificates by its hash.
	pools       sync.Map // [sha256.Size]byte -> *x509.CertPool (nil: no PEM certificate)
	poolEntries atomic.Int64
	// resolved caches each target's resolution (see resolve).
	resolved        sync.Map // resolveKey -> *resolution
	resolvedEntries atomic.Int64
}

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

// unprobeable marks a configuration problem: the result is Unknown.
type unprobeable struct{ reason string }

func (u unprobeable) Error() string { return u.reason }

func cannot(format string, args ...any) error { return unprobeable{fmt.Sprintf(format, args...)} }

// Probe performs one probe of t within ctx and t.Timeout.
func (p *HTTPProber) Probe(ctx context.Context, t Target) Result {
	start := time.Now()
	r := p.probe(ctx, t)
	r.Latency = time.Since(start)
	return r
}

func (p *HTTPProber) probe(ctx context.Context, t Target) Result {
	ep, err := p.resolve(t)
	if err != nil {
		return Result{Status: Unknown, Reason: err.Error()}
	}
	if t.EndpointMode {
		return p.probeEndpoints(ctx, t, ep)
	}
	return p.probeOne(ctx, t, ep)
}

// probeEndpoints probes every endpoint at once. The Service is Unhealthy
// only when no endpoint answers: the API server's calls through the Service
// still succeed on the healthy ones, but the count shows the partial outage.
func (p *HTTPProber) probeEndpoints(ctx context.Context, t Target, ep endpoint) Result {
	switch {
	case t.EndpointsErr != "":
		return Result{Status: Unknown, Reason: t.EndpointsErr}
	case t.ClientConfig.Service == nil:
		return Result{Status: Unknown, Reason: "probe.endpoints needs a service webhook; this one has a url"}
	case len(t.Endpoints) == 0:
		return Result{Status: Unhealthy, Reason: "the Service has no ready endpoints"}
	}
	results := make([]Result, len(t.Endpoints))
	var wg sync.WaitGroup
	for i, addr := range t.Endpoints {
		wg.Go(func() {
			one := ep
			one.dialAddr = addr
			results[i] = p.probeOne(ctx, t, one)
		})
	}
	wg.Wait()
	r := Result{Total: len(results)}
	var firstBad Result
	for _, res := range results {
		switch {
		case res.Status == Healthy:
			r.Healthy++
		case firstBad.Status == "" || (firstBad.Status == Unknown && res.Status == Unhealthy):
			firstBad = res // an Unhealthy endpoint outweighs an unprobeable one
		}
	}
	switch {
	case r.Healthy == r.Total:
		r.Status, r.Reason = Healthy, fmt.Sprintf("%d/%d endpoints healthy", r.Healthy, r.Total)
	case r.Healthy > 0:
		r.Status, r.Reason = Healthy, fmt.Sprintf("%d/%d endpoints healthy (partial outage; first failure: %s)", r.Healthy, r.Total, firstBad.Reason)
	default:
		r.Status, r.Reason = firstBad.Status, fmt.Sprintf("0/%d endpoints healthy: %s", r.Total, firstBad.Reason)
	}
	return r
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

// probeOne sends one request to ep and judges the answer within t.Timeout.
//
// A probe that times out does not cancel its request: the request keeps its
// connection until it is answered or holdTimeout passes, and a later probe
// of the same destination sends on the destination's second connection, or
// waits for either (within its own timeout), instead of opening more.
// Cancelling would close the connection (HTTP/1.1 cannot abandon a request
// and keep its connection), so every probe of a slow webhook would pay a
// TCP and TLS handshake and leave a closing connection behind. So a
// destination holds at most two connections and two requests in flight,
// however long it hangs and at whatever stage. Two, not one: a single slow
// answer among fast ones must not make the probes behind it fail without
// ever reaching the webhook (see blocked). Only a cancelled probe (the
// monitor stopped) cancels its request.
func (p *HTTPProber) probeOne(ctx context.Context, t Target, ep endpoint) Result {
	// The monitor's context already ends at the timeout: no second timer.
	if dl, ok := ctx.Deadline(); t.Timeout > 0 && (!ok || time.Until(dl) > t.Timeout) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.Timeout)
		defer cancel()
	}
	d := p.destination(ep)
	select {
	case d.slot <- struct{}{}:
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return d.blocked(t.Key, t.Timeout, overrun(ctx))
		}
		return classify(ctx, ctx.Err(), t.Timeout)
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), holdTimeout)
	stopWatch := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			rcancel()
		}
	})
	req, body, uid, err := newRequest(rctx, t, ep.url, p.Requester)
	if err != nil {
		stopWatch()
		rcancel()
		<-d.slot
		return Result{Status: Unknown, Reason: err.Error()}
	}
	held := d.hold(rcancel)
	answered := make(chan answer, 1)
	go func() {
		defer func() { <-d.slot }()
		defer d.release(held)
		defer rcancel()
		defer stopWatch()
		a, err := p.exchange(rctx, d, req, body, held)
		a.err = err
		answered <- a
	}()
	select {
	case a := <-answered:
		if ctx.Err() != nil {
			// An answer that raced the deadline.
			return p.confirm(ctx, d, held, answered, &a, t, uid)
		}
		if a.err != nil {
			return classify(ctx, a.err, t.Timeout)
		}
		return judge(t, uid, a.code, a.body)
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return classify(ctx, ctx.Err(), t.Timeout)
		}
		return p.confirm(ctx, d, held, answered, nil, t, uid)
	}
}

// answer is what the webhook returned, or why not.
type answer struct {
	code int
	body []byte
	err  error
}

// confirmRun is how long the controller must have run without a pause to
// have seen an answer that was there: a pending answer is read at the
// scheduler's next look, well within it.
const confirmRun = 5 * time.Millisecond

// PauseMeter says how long the process did not run at all in a span of
// time, and how long its ready goroutines wait to run lately;
// *stall.Watch implements it.
type PauseMeter interface {
	Paused(from, to time.Time) time.Duration
	QueueWait() time.Duration
}

// confirm judges a probe whose deadline passed (early: an answer that
// arrived with it). A timeout is the webhook's only if the webhook had its
// whole timeout, from when the request could be sent (plus the controller's
// pauses within the probe, which may have held the request back), and the
// controller then ran without a pause for confirmRun and saw no answer (one
// that had come would have been read): a paused or throttled controller finds, when
// it runs again, the deadline passed and the answer that came in time
// unread. So a probe waits past its deadline, by at most twice its
// timeout, until that is known. An answer read after that time is a late
// answer, a timeout, when the controller had been running for confirmRun
// when it read it, and no evidence when it had just run again (it may have
// come in time). A request still not written when its time is up is left
// to the monitor's judgement of the controller's stalls.
func (p *HTTPProber) confirm(ctx context.Context, d *destination, f *inflight, answered <-chan answer, early *answer, t Target, uid types.UID) Result {
	timeout, late := t.Timeout, overrun(ctx)
	limit := time.Now().Add(2 * timeout)
	// Pauses within the probe's own window may have delayed the request's
	// dial, handshake or write: they extend the webhook's time. Later ones
	// do not (its time runs on; only reading the answer waits for them).
	due := f.since.Add(timeout)
	if dl, ok := ctx.Deadline(); ok && p.Pauses != nil {
		due = due.Add(p.Pauses.Paused(f.since, dl))
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		now := time.Now()
		switch {
		case early != nil && !now.After(f.since.Add(timeout)):
			if early.err != nil {
				return classify(context.Background(), early.err, timeout)
			}
			return judge(t, uid, early.code, early.body)
		case early != nil && !now.After(due):
			return Result{Status: Discarded, Discard: DiscardStarved, Overrun: late, Reason: fmt.Sprintf(
				"answered after its %s timeout, but the controller's pauses may have held the request back: not counted", timeout)}
		case early != nil && p.settled(due, now):
			return Result{Status: Unhealthy, Overrun: late,
				Reason: fmt.Sprintf("timeout after %s (answered %s late)", timeout, now.Sub(due).Round(time.Millisecond))}
		case early != nil:
			return Result{Status: Discarded, Discard: DiscardStarved, Overrun: late, Reason: fmt.Sprintf(
				"answered just after its %s timeout, as the controller ran again after a pause: it may have come in time; not counted", timeout)}
		case p.settled(due, now):
			if !f.wrote.Load() {
				// Never sent: no answer was possible. Whose fault that is
				// (the controller's CPU, its own handshake limit, or a
				// webhook that does not finish TLS) the monitor judges.
				r := classify(ctx, ctx.Err(), timeout)
				r.Overrun = late
				return d.paced(f, r)
			}
			return Result{Status: Unhealthy, Overrun: late, Reason: "timeout after " + timeout.String()}
		case now.After(limit):
			return Result{Status: Discarded, Discard: DiscardStarved, Overrun: late, Reason: fmt.Sprintf(
				"timeout after %s, but the controller could not run long enough since to see an answer (CPU-throttled, paused or starved): not counted", timeout)}
		}
		// Polled at confirmRun: a throttled controller runs in stretches
		// (10 ms of each 100 ms at a tenth of a CPU), and one look must fall
		// confirmRun into one of them.
		wait := confirmRun
		if p.Pauses != nil {
			wait = max(due.Add(p.margin()).Sub(now), confirmRun)
		}
		wait = min(wait, max(limit.Sub(now), time.Millisecond))
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case a := <-answered:
			early = &a
		case <-timer.C:
		}
	}
}

// settled reports whether an answer that came by due would have been read
// by now: the controller ran without a pause for the last margin (see
// margin), all of it after due. Without a meter: whether due passed.
func (p *HTTPProber) settled(due, now time.Time) bool {
	if p.Pauses == nil {
		return !now.Before(due)
	}
	m := p.margin()
	return !now.Before(due.Add(m)) && p.Pauses.Paused(now.Add(-m), now) == 0
}

// margin is how long the controller must run without a pause to have read
// an answer that is there: confirmRun, and twice how long its ready
// goroutines wait to run lately (a process that runs but whose run queue is
// long, as after a throttled period, reads late what is there).
func (p *HTTPProber) margin() time.Duration {
	return confirmRun + 2*p.Pauses.QueueWait()
}

// overrun is how long after ctx's deadline it is now: how late the goroutine
// that waited for the deadline ran.
func overrun(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return max(time.Since(dl), 0)
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
	if age >= abandonAfter*timeout {
		oldest.cancel()
	}
	for _, f := range d.flight {
		if !f.countedBy(key) {
			f.counted = append(f.counted, key)
			return Result{Status: Unhealthy, TimedOut: true, Overrun: late,
				Reason: fmt.Sprintf("timeout after %s (the destination's requests are still unanswered, the oldest sent %s ago)", timeout, age)}
		}
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

// locate is where a probe of t goes, as the API server would call the
// webhook: its URL, with the path the probe asks for (the health path for
// HTTPGet, the webhook's own for AdmissionReview), and the TLS server name.
func locate(t Target) (target, serverName string, err error) {
	cc := t.ClientConfig
	var path string
	switch {
	case cc.URL != nil && cc.Service != nil:
		return "", "", cannot("clientConfig sets both url and service")
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return "", "", cannot("clientConfig.url is invalid: %v", err)
		}
		if u.Scheme != "https" {
			return "", "", cannot("clientConfig.url scheme %q is not https", u.Scheme)
		}
		if u.Hostname() == "" {
			return "", "", cannot("clientConfig.url has no host")
		}
		port := u.Port()
		if port == "" {
			port = "443"
		}
		serverName, path = u.Hostname(), u.Path
		target = "https://" + net.JoinHostPort(u.Hostname(), port)
	case cc.Service != nil:
		s := cc.Service
		if s.Name == "" || s.Namespace == "" {
			return "", "", cannot("clientConfig.service needs name and namespace")
		}
		port := int32(443)
		if s.Port != nil {
			port = *s.Port
		}
		if port < 1 || port > 65535 {
			return "", "", cannot("clientConfig.service.port %d is out of range", port)
		}
		serverName = s.Name + "." + s.Namespace + ".svc"
		target = "https://" + net.JoinHostPort(serverName, strconv.Itoa(int(port)))
		if s.Path != nil {
			path = *s.Path
		}
	default:
		return "", "", cannot("clientConfig has neither url nor service")
	}
	if t.Kind != v1alpha1.ProbeAdmissionReview {
		path = t.HealthPath
	}
	if path == "" {
		path = "/"
	}
	return target + path, serverName, nil
}

// newRequest builds t's probe request and returns its body (nil for a
// GET), which each attempt sends afresh (see exchange).
func newRequest(ctx context.Context, t Target, target, requester string) (*http.Request, []byte, types.UID, error) {
	if t.Kind != v1alpha1.ProbeAdmissionReview {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return nil, nil, "", cannot("build probe request: %v", err)
		}
		return req, nil, "", nil
	}
	body, uid, err := probeReview(t.ReviewVersions, requester).Encode()
	if err != nil {
		return nil, nil, "", cannot("%v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, nil, "", cannot("build probe request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	// A dry-run review has no side effects: it may be sent again on a fresh
	// connection when a kept one turns out to be closed (see exchange).
	req.Header["Idempotency-Key"] = []string{string(uid)}
	return req, body, uid, nil
}

// probeReview is a dry-run CREATE of a ConfigMap that exists nowhere: a
// webhook must answer it without side effects (dryRun), and any well-formed
// answer, allowed or denied, proves the admission path works.
func probeReview(versions []string, requester string) admission.Review {
	return admission.Review{
		Versions:  versions,
		UIDPrefix: "tripswitch-probe-",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Name:      "tripswitch-probe",
		Namespace: "tripswitch-probe",
		Operation: admissionv1.Create,
		User:      requester,
		Object:    []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"tripswitch-probe","namespace":"tripswitch-probe","annotations":{"tripswitch.dev/probe":"true"}}}`),
	}
}

// judge turns an HTTP answer into a result. 5xx is an outage; other non-2xx
// answers say the probe itself is misconfigured (a wrong health path, an
// authenticating endpoint), which is not evidence the webhook is down.
func judge(t Target, uid types.UID, code int, body []byte) Result {
	switch {
	case code >= 500:
		return Result{Status: Unhealthy, Reason: "HTTP " + strconv.Itoa(code)}
	case code < 200 || code > 299:
		return Result{Status: Unknown, Reason: fmt.Sprintf("HTTP %d: the probe is misconfigured, not evidence of an outage", code)}
	case t.Kind != v1alpha1.ProbeAdmissionReview:
		return Result{Status: Healthy, Reason: "HTTP " + strconv.Itoa(code)}
	}
	if _, err := admission.Decode(body, uid); err != nil {
		return Result{Status: Unhealthy, Reason: "admission response: " + err.Error()}
	}
	return Result{Status: Healthy, Reason: "AdmissionReview answered"}
}

// classify names a transport failure precisely. Name resolution failures are
// Unknown: from tripswitch's vantage point the host does not exist, which is
// a configuration or network-view problem rather than a proven outage.
func classify(ctx context.Context, err error, timeout time.Duration) Result {
	var (
		dnsErr    *net.DNSError
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		certErr   x509.CertificateInvalidError
		recErr    tls.RecordHeaderError
		alertErr  tls.AlertError
		verErr    *tls.CertificateVerificationError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || ctx.Err() != nil:
		return Result{Status: Unhealthy, TimedOut: true, Reason: "timeout after " + timeout.String()}
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return Result{Status: Unknown, Reason: "host " + dnsErr.Name + " does not resolve from tripswitch (missing service?)"}
	case errors.Is(err, syscall.ECONNREFUSED):
		return Result{Status: Unhealthy, Reason: "connection refused"}
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return Result{Status: Unhealthy, Reason: "connection reset"}
	case errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &certErr) || errors.As(err, &verErr):
		return Result{Status: Unhealthy, Reason: "TLS: server certificate not trusted: " + tlsReason(err)}
	case errors.As(err, &recErr) || errors.As(err, &alertErr):
		return Result{Status: Unhealthy, Reason: "TLS handshake failed"}
	}
	return Result{Status: Unhealthy, Reason: "request failed: " + err.Error()}
}

func tlsReason(err error) string {
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
	)
	switch {
	case errors.As(err, &unknownCA):
		return "signed by an unknown authority"
	case errors.As(err, &hostErr):
		return "not valid for " + hostErr.Host
	}
	return "invalid certificate"
}

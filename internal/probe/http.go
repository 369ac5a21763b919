package probe

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

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
	// controller runs as (cmd/tripswitch asks the API server), so that a
	// webhook that judges by requester judges the user that really asks.
	// Empty names none.
	Requester string
	// Pauses, if set, tells a timeout the webhook caused from one the
	// controller did (see confirm): nil trusts the clock.
	Pauses PauseMeter
	// IgnoreKernel judges timeouts by the controller's running time alone,
	// without the kernel's counts of what a connection received (see
	// confirm); those are read on Linux only.
	IgnoreKernel bool

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
		a.err, a.at = err, time.Now()
		answered <- a
	}()
	over := overdue{t: t, uid: uid, d: d, f: held, answered: answered}
	deadline, bounded := ctx.Deadline()
	select {
	case a := <-answered:
		// By the clock, not ctx.Err(): the context's timer runs late on a
		// busy machine, and an answer read after the deadline was judged
		// in time.
		if ctx.Err() != nil || bounded && a.at.After(deadline) {
			over.early = &a
			return p.confirm(ctx, over)
		}
		if a.err != nil {
			return classify(ctx, a.err, t.Timeout)
		}
		return judge(t, uid, a.code, a.body)
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return classify(ctx, ctx.Err(), t.Timeout)
		}
		return p.confirm(ctx, over)
	}
}

// answer is what the webhook returned, or why not, and when the prober had
// it (at: no earlier than the webhook's answer arrived). arrived, when the
// kernel said, is no earlier than when its last byte arrived (zero: not
// known).
type answer struct {
	code    int
	body    []byte
	err     error
	at      time.Time
	arrived time.Time
}

// overdue is a probe whose deadline passed before its answer was judged:
// what confirm judges.
type overdue struct {
	t   Target
	uid types.UID // the review's UID, which the answer must carry
	d   *destination
	f   *inflight // the request, in flight on d
	// answered delivers the answer, or why none came; early is one read
	// with the deadline (nil: none yet).
	answered <-chan answer
	early    *answer
}

// confirmRun is how long the controller must have run without a pause to
// have seen an answer that was there: a pending answer is read at the
// scheduler's next look, well within it.
const confirmRun = 5 * time.Millisecond

// PauseMeter says how long the process did not run at all in a span of
// time, whether it ran without a pause for a while within one, and how
// long its ready goroutines wait to run lately; *stall.Watch implements
// it.
type PauseMeter interface {
	Paused(from, to time.Time) time.Duration
	Ran(from, to time.Time, d time.Duration) bool
	QueueWait() time.Duration
}

// confirm judges a probe whose deadline passed (early: an answer that
// arrived with it). A timeout is the webhook's only if the webhook had its
// whole timeout, from when the request could be sent (plus the controller's
// pauses within the probe, which may have held the request back), and the
// controller then ran without a pause for a margin (see margin) and saw no
// answer: one that had come would have been read, and delivered, within
// it. A paused or throttled controller finds, when it runs again, the
// deadline passed and an answer that came in time unread. So a probe waits
// past its deadline, by at most twice its timeout, until that is known. An
// answer read after such a stretch came late, a timeout; one read before
// any (the controller had just run again) is no evidence: it may have come
// in time. Any such stretch since the deadline counts, not only one that
// ends as the probe looks: a throttled controller looks as it runs again,
// after a pause, and the stretch it ran before it proves as much. A
// request still not written when its time is up is left to the monitor's
// judgement of the controller's stalls.
func (p *HTTPProber) confirm(ctx context.Context, o overdue) Result {
	c := &confirmation{overdue: o, timeout: o.t.Timeout, late: overrun(ctx)}
	c.limit = time.Now().Add(2 * c.timeout)
	c.due = p.webhookDue(ctx, o.f, c.timeout)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if c.early == nil {
			// An answer waiting is seen before the probe judges none came.
			select {
			case a := <-c.answered:
				c.early = &a
			default:
			}
		}
		dueWire, marked := c.dueOnTheWire()
		if c.early == nil && c.kernelSilent() {
			return Result{Status: Unhealthy, Overrun: c.late, Reason: fmt.Sprintf("timeout after %s (nothing received)", c.timeout)}
		}
		now := time.Now()
		if r, judged := p.judgeOverdue(ctx, c, now); judged {
			return r
		}
		wait := p.nextLook(c, now, dueWire, marked)
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case a := <-c.answered:
			c.early = &a
		case <-timer.C:
		}
	}
}

// confirmation is confirm's state: the overdue probe, the answer once read
// (early), and the times it is judged by.
type confirmation struct {
	overdue
	timeout time.Duration
	// late is how late the deadline's goroutine ran (Result.Overrun).
	late time.Duration
	// due is when the webhook's time ran out (webhookDue); limit is when
	// confirm stops waiting to know.
	due, limit time.Time
}

// webhookDue is when a request in flight since f.since has had its whole
// timeout. Pauses within the probe's own window may have delayed its dial,
// handshake or write: they extend the webhook's time. Later ones do not
// (its time runs on; only reading the answer waits for them).
func (p *HTTPProber) webhookDue(ctx context.Context, f *inflight, timeout time.Duration) time.Time {
	due := f.since.Add(timeout)
	if dl, ok := ctx.Deadline(); ok && p.Pauses != nil {
		due = due.Add(p.Pauses.Paused(f.since, dl))
	}
	return due
}

// dueOnTheWire is when the kernel's silence may be judged: the webhook had
// its whole timeout from the write (marked: the write's time is known).
func (c *confirmation) dueOnTheWire() (time.Time, bool) {
	dueWire := c.due
	wroteAt, marked := c.f.written()
	if marked && wroteAt.Add(c.timeout).After(dueWire) {
		dueWire = wroteAt.Add(c.timeout)
	}
	return dueWire, marked
}

// kernelSilent: nothing received by the kernel since the request was
// written, at a look after its time from the write. That is a timeout
// however starved the controller: it needs no running stretch to see it.
func (c *confirmation) kernelSilent() bool {
	at, wrote, ok := c.f.silent()
	return ok && !at.Before(c.due) && !at.Before(wrote.Add(c.timeout))
}

// judgeOverdue gives the verdict on the answer read so far, or on the
// silence until now, if there is one yet (judged).
func (p *HTTPProber) judgeOverdue(ctx context.Context, c *confirmation, now time.Time) (r Result, judged bool) {
	early, timeout := c.early, c.timeout
	inTime := c.f.since.Add(timeout)
	switch {
	case early != nil && (!early.at.After(inTime) || !early.arrived.IsZero() && !early.arrived.After(inTime)):
		// Read in time, or read late but received in time (the
		// kernel's time of its last byte): an answer.
		if early.err != nil {
			return classify(context.Background(), early.err, timeout), true
		}
		return judge(c.t, c.uid, early.code, early.body), true
	case early != nil && !early.at.After(c.due):
		return Result{Status: Discarded, Discard: DiscardStarved, Overrun: c.late, Reason: fmt.Sprintf(
			"answered after its %s timeout, but the controller's pauses may have held the request back: not counted", timeout)}, true
	case early != nil && p.ran(c.due, early.at):
		return Result{Status: Unhealthy, Overrun: c.late,
			Reason: fmt.Sprintf("timeout after %s (answered %s late)", timeout, early.at.Sub(c.due).Round(time.Millisecond))}, true
	case early != nil:
		return Result{Status: Discarded, Discard: DiscardStarved, Overrun: c.late, Reason: fmt.Sprintf(
			"answered just after its %s timeout, as the controller ran again after a pause: it may have come in time; not counted", timeout)}, true
	case p.ran(c.due, now):
		if !c.f.wrote.Load() {
			// Never sent: no answer was possible. Whose fault that is
			// (the controller's CPU, its own handshake limit, or a
			// webhook that does not finish TLS) the monitor judges.
			r := classify(ctx, ctx.Err(), timeout)
			r.Overrun = c.late
			return c.d.paced(c.f, r), true
		}
		return Result{Status: Unhealthy, Overrun: c.late, Reason: "timeout after " + timeout.String()}, true
	case now.After(c.limit):
		return Result{Status: Discarded, Discard: DiscardStarved, Overrun: c.late, Reason: fmt.Sprintf(
			"timeout after %s, but the controller could not run long enough since to see an answer (CPU-throttled, paused or starved): not counted", timeout)}, true
	}
	return Result{}, false
}

// nextLook is how long confirm waits before it looks again. Polled at
// confirmRun: a throttled controller runs in stretches (10 ms of each
// 100 ms at a tenth of a CPU), and one look must fall into or after one of
// them. With a pause meter, not before the margin past due; never past the
// kernel's verdict (dueWire, once the write is marked) or the limit.
func (p *HTTPProber) nextLook(c *confirmation, now, dueWire time.Time, marked bool) time.Duration {
	wait := confirmRun
	if p.Pauses != nil {
		wait = max(c.due.Add(p.margin()).Sub(now), confirmRun)
	}
	if w := dueWire.Sub(now); c.early == nil && w > 0 && marked {
		wait = min(wait, w) // the kernel's silence is known at once
	}
	return min(wait, max(c.limit.Sub(now), time.Millisecond))
}

// ran reports whether an answer that came by due would have been read by
// to: the controller ran without a pause for a margin (see margin) at some
// time between due and to. Without a meter: whether due passed.
func (p *HTTPProber) ran(due, to time.Time) bool {
	if p.Pauses == nil {
		return !to.Before(due)
	}
	return p.Pauses.Ran(due, to, p.margin())
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

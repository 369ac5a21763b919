package probe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
)

// A probe's HTTP/1.1 exchange runs in the goroutine that sends it, on a
// connection kept between probes that no goroutine watches: net/http's
// transport keeps a reader and a writer goroutine on every connection,
// idle or not, and hands each request across them, which at a thousand
// breakers was two goroutines per connection and a third of the
// controller's CPU. What net/http's reader does for an idle connection
// (notice that the server closed it, or sent something unasked) is done
// here when the connection is taken again (see alive), and a request that
// a reused connection fails before any answer is sent once more on a
// fresh one, as net/http does for a request it may replay: a probe has no
// side effect (a dry-run review, or a GET).

// idleTimeout closes a connection no probe used for this long, as
// net/http's IdleConnTimeout did: a destination no breaker probes any more
// holds no connection for long.
const idleTimeout = 90 * time.Second

// conn is one kept-alive connection of a destination. Its buffers are
// taken from a pool for each exchange and given back after it: a thousand
// idle connections would otherwise hold 8 KiB each.
type conn struct {
	nc  net.Conn // the TLS connection
	raw net.Conn // the connection under TLS, for the liveness check
	// wire reads the kernel's counts of what the connection received (nil:
	// not a socket, or not read).
	wire *wire
	read countingReader
	// reused: the connection answered a request before.
	reused bool
	// idle closes the connection once it has been idle for idleTimeout.
	idle *time.Timer
	// peek is alive's read buffer: one on the stack would escape to the
	// heap through the interface, an allocation per probe.
	peek [1]byte
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// exchange sends req and reads the answer, on a kept-alive connection of d
// or a new one; f records that the request got a connection and was
// written. The answer's body is read up to maxBody.
func (p *HTTPProber) exchange(ctx context.Context, d *destination, req *http.Request, body []byte, f *inflight) (answer, error) {
	for {
		c := d.take()
		if c == nil {
			var err error
			if c, err = p.connect(ctx, d, req.URL.Host); err != nil {
				return answer{}, err
			}
			if ctx.Err() != nil {
				d.put(c) // unused: the next request's
				return answer{}, context.Cause(ctx)
			}
		}
		f.gotConn.Store(true)
		a, keep, err := c.roundTrip(ctx, req, body, f)
		if err == nil && keep {
			d.put(c)
		} else {
			_ = c.nc.Close()
		}
		if err != nil && c.reused && c.read.n == 0 && closedBeforeAnswer(err) && ctx.Err() == nil {
			// The server closed the idle connection as the request went
			// out: nothing reached the webhook's handler.
			continue
		}
		return a, err
	}
}

// closedBeforeAnswer reports whether err is a connection the server closed,
// not a deadline or a TLS failure.
func closedBeforeAnswer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// connect opens a connection for d within the prober's handshake limit.
func (p *HTTPProber) connect(ctx context.Context, d *destination, addr string) (*conn, error) {
	nc, err := p.handshake(ctx, d, d.dial, d.tls, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc}
	if tc, ok := nc.(interface{ NetConn() net.Conn }); ok {
		c.raw = tc.NetConn()
	}
	if sc, ok := c.raw.(syscall.Conn); ok && canReadWire && !p.IgnoreKernel {
		if rc, err := sc.SyscallConn(); err == nil {
			c.wire = newWire(rc)
		}
	}
	c.read.r = nc
	return c, nil
}

// readers and writers are the exchanges' buffers.
var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

// aLongTimeAgo unblocks a connection's reads and writes at once.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes req (with body) and reads its answer within ctx. keep
// says the connection may serve another request: the answer was read
// whole, the server did not ask to close, and ctx did not interrupt it.
func (c *conn) roundTrip(ctx context.Context, req *http.Request, body []byte, f *inflight) (a answer, keep bool, err error) {
	dl, _ := ctx.Deadline()
	if err := c.nc.SetDeadline(dl); err != nil {
		return answer{}, false, fmt.Errorf("set the connection's deadline: %w", err)
	}
	interrupted := false
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
	defer func() {
		if !stop() {
			interrupted = true
		}
		if keep && (interrupted || c.nc.SetDeadline(time.Time{}) != nil) {
			keep = false
		}
	}()
	c.read.n = 0
	if len(body) > 0 {
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	// What the kernel had received before the write: nothing after it can
	// be an answer that came before the request.
	base, _, counted := uint64(0), time.Duration(0), false
	if c.wire != nil {
		base, _, counted = c.wire.received()
	}
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(c.nc)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writers.Put(bw)
	if err != nil {
		return answer{}, false, err
	}
	if counted {
		f.mark(c.wire, base)
	}
	f.wrote.Store(true)
	br := readers.Get().(*bufio.Reader)
	br.Reset(&c.read)
	defer func() {
		// What the server sent beyond the answer is unasked: the
		// connection is not kept (and its buffer not reused unread).
		keep = keep && br.Buffered() == 0
		br.Reset(nil)
		readers.Put(br)
	}()
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(br, req)
		if err != nil {
			return answer{}, false, err
		}
		// 1xx answers precede the real one (101 would switch protocols:
		// no webhook does that to a probe; it is read as the answer).
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return answer{code: resp.StatusCode}, false, err
	}
	whole := len(b) <= maxBody
	if whole {
		_ = resp.Body.Close() // at its end: closes nothing, reads nothing
	} else {
		b = b[:maxBody]
	}
	c.reused = true
	a = answer{code: resp.StatusCode, body: b}
	if c.wire != nil {
		// The kernel's time of the last byte, rounded up: an answer read
		// late (the controller starved) may still have come in time.
		if _, ago, ok := c.wire.received(); ok {
			a.arrived = time.Now().Add(wireSlack - ago)
		}
	}
	return a, whole && !resp.Close, nil
}

// take returns an idle connection of d that is still open, or nil.
func (d *destination) take() *conn {
	for {
		d.mu.Lock()
		n := len(d.idle)
		if n == 0 {
			d.mu.Unlock()
			return nil
		}
		c := d.idle[n-1]
		d.idle = d.idle[:n-1]
		d.mu.Unlock()
		if c.idle.Stop() && c.alive() {
			return c
		}
		_ = c.nc.Close() // closed by its idle timer, the server, or an unasked answer
	}
}

// put keeps c for the next request, or closes it when d keeps enough.
func (d *destination) put(c *conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.idle) >= slots {
		_ = c.nc.Close()
		return
	}
	if c.idle == nil {
		c.idle = time.AfterFunc(idleTimeout, func() { d.expire(c) })
	} else {
		c.idle.Reset(idleTimeout)
	}
	d.idle = append(d.idle, c)
}

// expire closes c if it is still idle.
func (d *destination) expire(c *conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, k := range d.idle {
		if k == c {
			d.idle = append(d.idle[:i], d.idle[i+1:]...)
			_ = c.nc.Close()
			return
		}
	}
}

// closeIdle closes every idle connection of d.
func (d *destination) closeIdle() {
	d.mu.Lock()
	idle := d.idle
	d.idle = nil
	d.mu.Unlock()
	for _, c := range idle {
		c.idle.Stop()
		_ = c.nc.Close()
	}
}

// alive reports whether an idle connection can carry a request: the server
// has neither closed it nor sent anything unasked (a close_notify, a 408).
// It peeks at the socket without blocking; a connection it cannot peek at
// is taken as alive (a request it fails is sent again: see exchange).
func (c *conn) alive() bool {
	// What TLS read from the socket but did not yet decrypt is found by a
	// read that cannot wait: a record already there is returned (or its
	// close_notify as the end), and an empty buffer times out at once
	// without touching the socket. Anything read so is unasked: the
	// connection is closed anyway.
	if err := c.nc.SetReadDeadline(aLongTimeAgo); err != nil {
		return false
	}
	if _, err := c.nc.Read(c.peek[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	if err := c.nc.SetReadDeadline(time.Time{}); err != nil {
		return false
	}
	sc, ok := c.raw.(syscall.Conn)
	if !ok || !canPeek {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	if err := rc.Read(func(fd uintptr) bool {
		alive = quiet(fd)
		return true
	}); err != nil {
		return false
	}
	return alive
}

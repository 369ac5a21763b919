package main

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// dependency is the slow service: a real HTTP server on 127.0.0.1 with a
// fixed number of workers (what it can serve at once) and a queue in front
// of them, like a thread pool behind an accept queue. A request waits for a
// worker, then takes the current service time; a client that gives up
// leaves the queue (its request context ends). It counts the requests
// inside it, queued or served: the in-flight calls at the dependency.
type dependency struct {
	srv      *http.Server
	url      string
	workers  chan struct{}
	service  atomic.Int64 // ns
	inFlight atomic.Int64

	mu   sync.Mutex
	peak int64 // the most in flight since the last sample
}

func startDependency(workers int, service time.Duration) (*dependency, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &dependency{workers: make(chan struct{}, workers), url: "http://" + ln.Addr().String()}
	d.service.Store(int64(service))
	d.srv = &http.Server{Handler: http.HandlerFunc(d.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = d.srv.Serve(ln) }()
	return d, nil
}

func (d *dependency) serve(w http.ResponseWriter, r *http.Request) {
	n := d.inFlight.Add(1)
	defer d.inFlight.Add(-1)
	d.mu.Lock()
	d.peak = max(d.peak, n)
	d.mu.Unlock()
	select {
	case d.workers <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	defer func() { <-d.workers }()
	t := time.NewTimer(time.Duration(d.service.Load()))
	defer t.Stop()
	select {
	case <-t.C:
		_, _ = w.Write([]byte("ok"))
	case <-r.Context().Done():
	}
}

// samplePeak returns the most requests in flight since the last call.
func (d *dependency) samplePeak() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.peak
	d.peak = d.inFlight.Load()
	return p
}

func (d *dependency) close() { _ = d.srv.Close() }

package apisignal

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// Settings are one breaker's signal settings.
type Settings struct {
	Webhook Webhook
	// Window is the sliding window, in whole seconds.
	Window time.Duration
	// MinimumCalls before a rate is computed.
	MinimumCalls int
	// FailureRateThreshold is the percentage at which the signal says failing.
	FailureRateThreshold float64
}

// Status is the signal for one breaker.
type Status struct {
	// Failing: the window holds at least the minimum of calls and the share
	// of failures reached the threshold.
	Failing bool
	// FailureRate is a percentage, or -1 below the minimum of calls.
	FailureRate float64
	// Calls and Failures are in the window.
	Calls, Failures int64
	// Message explains the status (or why there is none).
	Message string
	// Unreadable: the last read of the API server's metrics failed, so the
	// signal is blind; Message says why and, when it is a permission, which.
	Unreadable bool
}

// forbiddenHint names what a 403 on /metrics is missing and where each way
// of installing grants it.
const forbiddenHint = "tripswitch may not read the API server's /metrics: grant get on the non-resource URL /metrics " +
	"(Helm: --set apiServerSignal.enabled=true; kustomize: add the component config/apiserver-signal)"

// Source reads the API server's metrics.
type Source func(ctx context.Context) ([]byte, error)

// maxFeed bounds how many calls one scrape feeds a window: beyond it the
// increments are scaled down, keeping their ratio.
const maxFeed = 100_000

// Tracker scrapes the API server and keeps each breaker's window. It runs
// on the leader.
type Tracker struct {
	Source   Source
	Interval time.Duration
	Clock    clock.WithTicker
	// Changed is called with a breaker whose Failing flipped.
	Changed func(breaker string)

	mu      sync.Mutex
	tracked map[string]*tracked
}

type tracked struct {
	settings Settings
	window   *breaker.Breaker
	last     Counts
	seen     bool
	status   Status
	// reported is Failing as of the last scrape: a window that drained
	// between scrapes is a change too.
	reported bool
}

// bclock adapts the tracker's clock to the breaker's.
type bclock struct{ c clock.PassiveClock }

func (b bclock) Now() time.Time { return b.c.Now() }

// Ensure starts (or updates) the signal for a breaker.
func (t *Tracker) Ensure(name string, s Settings) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tracked == nil {
		t.tracked = map[string]*tracked{}
	}
	if cur, ok := t.tracked[name]; ok && cur.settings == s {
		return nil
	}
	w, err := breaker.New(name, breaker.Config{
		WindowType: breaker.TimeBased, WindowSize: max(int(s.Window/time.Second), 1),
		MinimumNumberOfCalls: max(s.MinimumCalls, 1), FailureRateThreshold: s.FailureRateThreshold,
		Clock: bclock{t.Clock},
	})
	if err != nil {
		return fmt.Errorf("api server signal for %s: %w", name, err)
	}
	w.MetricsOnly()
	t.tracked[name] = &tracked{settings: s, window: w, status: Status{FailureRate: -1, Message: "no sample of the API server's metrics yet"}}
	return nil
}

// Stop forgets a breaker.
func (t *Tracker) Stop(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.tracked, name)
}

// Observe returns a breaker's signal.
func (t *Tracker) Observe(name string) (Status, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr, ok := t.tracked[name]
	if !ok {
		return Status{}, false
	}
	s := tr.status
	m := tr.window.Metrics()
	s.Calls, s.Failures, s.FailureRate = m.Calls, m.FailedCalls, m.FailureRate
	s.Failing = tr.failing()
	return s, true
}

// NeedLeaderElection: only the leader scrapes.
func (t *Tracker) NeedLeaderElection() bool { return true }

// Start scrapes every Interval while any breaker uses the signal.
func (t *Tracker) Start(ctx context.Context) error {
	tick := t.Clock.NewTicker(t.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
			t.Scrape(ctx)
		}
	}
}

// Scrape reads the API server's metrics once and feeds every window.
func (t *Tracker) Scrape(ctx context.Context) {
	t.mu.Lock()
	n := len(t.tracked)
	t.mu.Unlock()
	if n == 0 {
		return
	}
	data, err := t.Source(ctx)
	var counts map[Webhook]Counts
	if err == nil {
		counts, err = Parse(bytes.NewReader(data))
	}
	var flipped []string
	t.mu.Lock()
	for _, tr := range t.tracked {
		if err != nil {
			tr.status.Unreadable = true
			tr.status.Message = fmt.Sprintf("cannot read the API server's metrics: %v", err)
			if apierrors.IsForbidden(err) {
				tr.status.Message = forbiddenHint
			}
			continue
		}
		tr.status.Unreadable = false
		// A webhook the API server has not called yet has no series: its
		// counters are zero, and the first calls count from there.
		c, ok := counts[tr.settings.Webhook]
		tr.status.Message = ""
		if !ok {
			tr.status.Message = fmt.Sprintf("the API server has not called webhook %s (%s) since it started", tr.settings.Webhook.Name, tr.settings.Webhook.Type)
		}
		if tr.seen && c.Calls >= tr.last.Calls && c.Failures >= tr.last.Failures {
			feed(tr.window, c.Calls-tr.last.Calls, c.Failures-tr.last.Failures)
		}
		tr.last, tr.seen = c, true
	}
	for name, tr := range t.tracked {
		if f := tr.failing(); f != tr.reported {
			tr.reported = f
			flipped = append(flipped, name)
		}
	}
	t.mu.Unlock()
	for _, name := range flipped {
		if t.Changed != nil {
			t.Changed(name)
		}
	}
}

func (tr *tracked) failing() bool {
	m := tr.window.Metrics()
	return m.FailureRate >= 0 && m.FailureRate >= tr.settings.FailureRateThreshold
}

// feed records the increments of one interval in the window.
func feed(w *breaker.Breaker, calls, failures float64) {
	failures = min(failures, calls)
	if calls > maxFeed {
		failures = failures * maxFeed / calls
		calls = maxFeed
	}
	ok := int64(calls) - int64(failures)
	for range int64(failures) {
		p, _ := w.Allow()
		p.Done(breaker.Failure)
	}
	for range ok {
		p, _ := w.Allow()
		p.Done(breaker.Success)
	}
}

// FromAPIServer reads /metrics through a REST client of the API server
// (RBAC: get on the non-resource URL /metrics).
func FromAPIServer(rc rest.Interface) Source {
	return func(ctx context.Context) ([]byte, error) {
		return rc.Get().AbsPath("/metrics").DoRaw(ctx)
	}
}

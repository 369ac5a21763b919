package apisignal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Settings are one breaker's signal settings.
type Settings struct {
	Webhook WebhookID
	// Window is the sliding window.
	Window time.Duration
	// MinimumCalls before a rate is computed.
	MinimumCalls int
	// FailureRateThreshold is the percentage at which the signal says failing.
	FailureRateThreshold float64
	// From, when set, is a half-open trial's start: the trial counts only
	// its own calls, from each instance's first read that began after the
	// tracker learned of this From (not its last read before From: that can
	// predate the open, and the calls that opened the circuit would be
	// judged as the trial's). Calls between the trial's write and that read
	// go uncounted, so Ensure asks for a read at once. The baseline is kept
	// past the window: a trial judges every call since it began.
	From time.Time
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
	// At is when these numbers were taken (zero before the first read).
	At         time.Time
	Unreadable bool
}

// Healthy reports whether s confirms the webhook healthy: the window holds
// at least the minimum of calls, under the threshold, as read. Too few
// calls confirm nothing.
func (s Status) Healthy() bool { return s.FailureRate >= 0 && !s.Failing && !s.Unreadable }

// forbiddenHint names what a 403 on /metrics is missing and where each way
// of installing grants it.
const forbiddenHint = "tripswitch may not read the API server's /metrics: grant get on the non-resource URL /metrics " +
	"(Helm: --set apiServerSignal.enabled=true; kustomize: add the component config/apiserver-signal)"

// Source reads the API server's metrics.
type Source func(ctx context.Context) ([]byte, error)

// Tracker scrapes the API server and keeps each breaker's window. It runs
// on the leader.
type Tracker struct {
	Source   Source
	Interval time.Duration
	Clock    clock.WithTicker
	// Changed is called with a breaker whose Failing flipped, or whose
	// numbers changed at least Refresh after they were last shown.
	Changed func(breaker string)
	// Refresh bounds how stale the numbers Observe shows may get while the
	// verdict stays the same (each change costs a status write); 0 is 30s.
	Refresh time.Duration

	mu      sync.Mutex
	tracked map[string]*tracked
	// kick asks Start for a read before the next tick.
	kick chan struct{}
}

type tracked struct {
	settings Settings
	// series holds, per API server instance, the samples of this webhook's
	// counters inside the window, oldest first.
	series map[string][]sample
	status Status
	// shown is what Observe returns: the window as of the scrape that last
	// changed the verdict, or refreshed the numbers.
	shown Status
	// last is the window as of the last scrape (Current).
	last Status
	// fromSeen is when Ensure first saw settings.From: reads that began
	// before it may hold calls from before the trial.
	fromSeen time.Time
	// forgot is the start of the outage whose calls Forget last dropped.
	forgot time.Time
}

// sample is one instance's cumulative counts at one read; at is when the
// read began, so the counts hold every call made before at.
type sample struct {
	at time.Time
	Counts
}

// Ensure starts (or updates) the signal for a breaker.
func (t *Tracker) Ensure(name string, s Settings) error {
	if s.Window < time.Second {
		return fmt.Errorf("api server signal for %s: window %v is shorter than one second", name, s.Window)
	}
	if s.FailureRateThreshold <= 0 || s.FailureRateThreshold > 100 {
		return fmt.Errorf("api server signal for %s: failure rate threshold %v is not in (0, 100]", name, s.FailureRateThreshold)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tracked == nil {
		t.tracked = map[string]*tracked{}
	}
	now := t.Clock.Now()
	if cur, ok := t.tracked[name]; ok && cur.settings.Webhook == s.Webhook {
		// The same series, judged anew.
		if cur.settings != s {
			if !s.From.Equal(cur.settings.From) {
				t.newFrom(cur, s.From, now)
			}
			cur.settings = s
			cur.last = cur.current()
			cur.last.At = now
			cur.shown = cur.last
		}
		return nil
	}
	st := Status{FailureRate: -1, Message: "no sample of the API server's metrics yet"}
	tr := &tracked{settings: s, series: map[string][]sample{}, status: st, shown: st, last: st}
	t.newFrom(tr, s.From, now)
	t.tracked[name] = tr
	return nil
}

// newFrom notes when the tracker learned of a trial's start, and asks for a
// read at once: it is the trial's baseline, and the calls made before it are
// not counted.
func (t *Tracker) newFrom(tr *tracked, from, now time.Time) {
	tr.fromSeen = time.Time{}
	if from.IsZero() {
		return
	}
	tr.fromSeen = now
	t.kickLocked()
}

// kickLocked asks Start for a read now (t.mu held).
func (t *Tracker) kickLocked() {
	if t.kick == nil {
		t.kick = make(chan struct{}, 1)
	}
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Stop forgets a breaker.
func (t *Tracker) Stop(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.tracked, name)
}

// Forget drops a breaker's calls counted so far when its outage, the one
// that began at began, ended (once per outage: Forget again with the same
// began does nothing).
// The API server's counters hold calls the webhook failed before the
// recovery that a read after it would count as failures in the window: the
// signal would open the circuit again on the outage that just ended. The
// next read, which Forget asks for at once, is the new baseline; only calls
// after it count.
func (t *Tracker) Forget(name string, began time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr, ok := t.tracked[name]
	if !ok || tr.forgot.Equal(began) {
		return
	}
	tr.forgot = began
	clear(tr.series)
	cur := tr.current()
	cur.At = t.Clock.Now()
	cur.Message = "counting the API server's calls afresh since the outage ended"
	tr.last, tr.shown = cur, cur
	t.kickLocked()
}

// Observe returns a breaker's signal as of the last scrape that changed its
// verdict or refreshed its numbers; Status.At says when.
func (t *Tracker) Observe(name string) (Status, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr, ok := t.tracked[name]
	if !ok {
		return Status{}, false
	}
	return tr.shown, true
}

// Current returns a breaker's signal as of the last scrape, fresher than
// Observe's: what a half-open trial is judged on when its window ends.
func (t *Tracker) Current(name string) (Status, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr, ok := t.tracked[name]
	if !ok {
		return Status{}, false
	}
	return tr.last, true
}

// NeedLeaderElection: only the leader scrapes.
func (t *Tracker) NeedLeaderElection() bool { return true }

// Start scrapes every Interval while any breaker uses the signal, and at
// once when a half-open trial starts (its baseline).
func (t *Tracker) Start(ctx context.Context) error {
	tick := t.Clock.NewTicker(t.Interval)
	defer tick.Stop()
	t.mu.Lock()
	if t.kick == nil {
		t.kick = make(chan struct{}, 1)
	}
	kick := t.kick
	t.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
			t.Scrape(ctx)
		case <-kick:
			t.Scrape(ctx)
		}
	}
}

// Scrape reads the API server's metrics once and adds the sample to every
// breaker's window under the instance that served it.
func (t *Tracker) Scrape(ctx context.Context) {
	t.mu.Lock()
	n := len(t.tracked)
	t.mu.Unlock()
	if n == 0 {
		return
	}
	began := t.Clock.Now()
	data, err := t.Source(ctx)
	var r Reading
	if err == nil {
		r, err = Parse(bytes.NewReader(data))
	}
	if err == nil && r.Instance == "" {
		err = errors.New("the metrics name no API server instance (neither apiserver_id_hash nor process_start_time_seconds), " +
			"so reads from different API servers cannot be told apart")
	}
	var flipped []string
	refresh := t.Refresh
	if refresh <= 0 {
		refresh = 30 * time.Second
	}
	t.mu.Lock()
	now := t.Clock.Now()
	for name, tr := range t.tracked {
		if err != nil {
			tr.status.Unreadable = true
			tr.status.Message = fmt.Sprintf("cannot read the API server's metrics: %v", err)
			if apierrors.IsForbidden(err) {
				tr.status.Message = forbiddenHint
			}
		} else {
			tr.status.Unreadable = false
			// A webhook the API server has not called yet has no series: its
			// counters are zero, and the first calls count from there.
			c, ok := r.Webhooks[tr.settings.Webhook]
			tr.status.Message = ""
			if !ok {
				tr.status.Message = fmt.Sprintf("the API server has not called webhook %s (%s) since it started", tr.settings.Webhook.Name, tr.settings.Webhook.Type)
			}
			tr.add(r.Instance, sample{at: began, Counts: c})
		}
		tr.prune(now)
		cur := tr.current()
		cur.At = now
		tr.last = cur
		if show(tr.shown, cur, refresh) {
			tr.shown = cur
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

// show says whether a scrape's status replaces the one shown: at once when
// the verdict (failing, or confirmed healthy), whether the window holds a
// failed call (it holds back a recovery on the probes), readability or
// message changed; for numbers alone, once refresh has passed.
func show(shown, cur Status, refresh time.Duration) bool {
	switch {
	case shown.At.IsZero(), cur.Failing != shown.Failing, cur.Healthy() != shown.Healthy(), (cur.Failures > 0) != (shown.Failures > 0),
		cur.Unreadable != shown.Unreadable, cur.Message != shown.Message:
		return true
	case cur.Calls == shown.Calls && cur.Failures == shown.Failures:
		return false
	}
	return cur.At.Sub(shown.At) >= refresh
}

// add appends a sample to its instance's series. A counter below the last
// sample's is a restart (or two servers sharing an identity): the earlier
// samples say nothing about the new counts, so the series starts over.
func (tr *tracked) add(instance string, s sample) {
	ss := tr.series[instance]
	if n := len(ss); n > 0 && (s.Calls < ss[n-1].Calls || s.Failures < ss[n-1].Failures) {
		ss = ss[:0]
	}
	tr.series[instance] = append(ss, s)
}

// prune drops the samples that fell out of the window, and the instances
// left with none; a trial keeps its baseline and everything after it.
func (tr *tracked) prune(now time.Time) {
	from := now.Add(-tr.settings.Window)
	for id, ss := range tr.series {
		i := 0
		for i < len(ss) && ss[i].at.Before(from) && (tr.fromSeen.IsZero() || ss[i].at.Before(tr.fromSeen)) {
			i++
		}
		if i == len(ss) {
			delete(tr.series, id)
			continue
		}
		tr.series[id] = ss[i:]
	}
}

// current sums, over instances, the increments each counted between its
// own first and last sample in the window, and judges them.
func (tr *tracked) current() Status {
	s := tr.status
	s.Calls, s.Failures = 0, 0
	for _, ss := range tr.series {
		if !tr.fromSeen.IsZero() {
			ss = since(ss, tr.fromSeen)
		}
		if len(ss) == 0 {
			continue
		}
		first, last := ss[0], ss[len(ss)-1]
		calls, failures := last.Calls-first.Calls, last.Failures-first.Failures
		s.Calls += int64(calls)
		s.Failures += int64(min(failures, calls))
	}
	s.FailureRate = -1
	if s.Calls > 0 && s.Calls >= int64(tr.settings.MinimumCalls) {
		s.FailureRate = float64(s.Failures) * 100 / float64(s.Calls)
	}
	s.Failing = s.FailureRate >= 0 && s.FailureRate >= tr.settings.FailureRateThreshold
	return s
}

// since returns the samples from the first read that began at or after
// from: none of the calls it counts can be older than from.
func since(ss []sample, from time.Time) []sample {
	i := 0
	for i < len(ss) && ss[i].at.Before(from) {
		i++
	}
	return ss[i:]
}

// FromAPIServer reads /metrics through a REST client of the API server
// (RBAC: get on the non-resource URL /metrics).
func FromAPIServer(rc rest.Interface) Source {
	return func(ctx context.Context) ([]byte, error) {
		return rc.Get().AbsPath("/metrics").DoRaw(ctx)
	}
}

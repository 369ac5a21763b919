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
	// From, when set, starts the window no earlier than this: a half-open
	// trial counts only the calls made since it began. The last sample at or
	// before From is each instance's baseline.
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
}

// sample is one instance's cumulative counts at one read.
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
	if cur, ok := t.tracked[name]; ok && cur.settings.Webhook == s.Webhook {
		// The same series, judged anew.
		if cur.settings != s {
			cur.settings = s
			cur.last = cur.current()
			cur.last.At = t.Clock.Now()
			cur.shown = cur.last
		}
		return nil
	}
	st := Status{FailureRate: -1, Message: "no sample of the API server's metrics yet"}
	t.tracked[name] = &tracked{settings: s, series: map[string][]sample{}, status: st, shown: st, last: st}
	return nil
}

// Stop forgets a breaker.
func (t *Tracker) Stop(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.tracked, name)
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

// Scrape reads the API server's metrics once and adds the sample to every
// breaker's window under the instance that served it.
func (t *Tracker) Scrape(ctx context.Context) {
	t.mu.Lock()
	n := len(t.tracked)
	t.mu.Unlock()
	if n == 0 {
		return
	}
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
			tr.add(r.Instance, sample{at: now, Counts: c})
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
// the verdict, readability or message changed; for numbers alone, once
// refresh has passed.
func show(shown, cur Status, refresh time.Duration) bool {
	switch {
	case shown.At.IsZero(), cur.Failing != shown.Failing, cur.Unreadable != shown.Unreadable, cur.Message != shown.Message:
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
// left with none.
func (tr *tracked) prune(now time.Time) {
	from := now.Add(-tr.settings.Window)
	for id, ss := range tr.series {
		i := 0
		for i < len(ss) && ss[i].at.Before(from) {
			i++
		}
		// Keep the baseline of a From inside the window.
		if f := tr.settings.From; f.After(from) && i > 0 && i < len(ss) {
			i--
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
		if f := tr.settings.From; !f.IsZero() {
			ss = since(ss, f)
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

// since returns the samples from the last one at or before from, or all of
// them when every sample is later.
func since(ss []sample, from time.Time) []sample {
	i := 0
	for i+1 < len(ss) && !ss[i+1].at.After(from) {
		i++
	}
	if ss[i].at.After(from) {
		return ss
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

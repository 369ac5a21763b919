package apisignal_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
)

// server is one API server's counters for the webhook w.example.com.
type server struct {
	start          string // process_start_time_seconds; empty: not exposed
	idHash         string // apiserver_id_hash label; empty: not exposed
	calls, failing float64
}

func (s *server) exposition() string {
	var b strings.Builder
	b.WriteString("# TYPE apiserver_admission_webhook_request_total counter\n")
	fmt.Fprintf(&b, "apiserver_admission_webhook_request_total{code=\"200\",name=\"w.example.com\",operation=\"CREATE\",rejected=\"false\",type=\"validating\"} %v\n", s.calls-s.failing)
	fmt.Fprintf(&b, "apiserver_admission_webhook_request_total{code=\"0\",name=\"w.example.com\",operation=\"CREATE\",rejected=\"false\",type=\"validating\"} %v\n", s.failing)
	b.WriteString("# TYPE apiserver_admission_webhook_fail_open_count counter\n")
	fmt.Fprintf(&b, "apiserver_admission_webhook_fail_open_count{name=\"w.example.com\",type=\"validating\"} %v\n", s.failing)
	if s.start != "" {
		b.WriteString("# TYPE process_start_time_seconds gauge\n")
		fmt.Fprintf(&b, "process_start_time_seconds %s\n", s.start)
	}
	if s.idHash != "" {
		b.WriteString("# TYPE apiserver_authorization_config_controller_automatic_reloads_total counter\n")
		fmt.Fprintf(&b, "apiserver_authorization_config_controller_automatic_reloads_total{apiserver_id_hash=%q,status=\"success\"} 1\n", s.idHash)
	}
	return b.String()
}

// pool answers each read from the server next names.
type pool struct {
	next *server
}

func (p *pool) source(context.Context) ([]byte, error) {
	if p.next == nil {
		return nil, errors.New("no server")
	}
	return []byte(p.next.exposition()), nil
}

func newTracker(t *testing.T, p *pool) (*apisignal.Tracker, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	// Every change shown at once: these tests are about the window.
	tr := &apisignal.Tracker{Source: p.source, Interval: time.Second, Clock: clk, Refresh: time.Nanosecond}
	err := tr.Ensure("b", apisignal.Settings{Webhook: apisignal.WebhookID{Name: "w.example.com", Type: "validating"},
		Window: 30 * time.Second, MinimumCalls: 10, FailureRateThreshold: 50})
	if err != nil {
		t.Fatal(err)
	}
	return tr, clk
}

func observe(t *testing.T, tr *apisignal.Tracker) apisignal.Status {
	t.Helper()
	s, ok := tr.Observe("b")
	if !ok {
		t.Fatal("breaker b not tracked")
	}
	return s
}

// TestOldFailuresOfAnotherInstanceNeverCount is the shape of the defect: A
// once counted 150 failed calls, B none; reads alternate between them while
// the webhook is healthy. A difference between A's and B's counters must
// never be taken for calls, however the reads interleave.
func TestOldFailuresOfAnotherInstanceNeverCount(t *testing.T) {
	a := &server{start: "1.8e+09", calls: 160, failing: 150}
	b := &server{start: "1.80000001e+09"}
	p := &pool{}
	tr, clk := newTracker(t, p)
	pattern := []*server{a, b, b, a, b, a, a, b, a, b, b, b, a}
	for i := range 120 {
		p.next = pattern[i%len(pattern)]
		// healthy traffic on both
		a.calls += 2
		b.calls += 3
		tr.Scrape(t.Context())
		if s := observe(t, tr); s.Failing || s.Failures != 0 {
			t.Fatalf("read %d: failing on counts no API server saw in the window: %+v", i, s)
		}
		clk.Step(time.Second)
	}
	s := observe(t, tr)
	if s.Calls < 100 || s.Unreadable {
		t.Fatalf("the healthy calls both instances counted are not in the window: %+v", s)
	}
}

// TestOutageEveryInstanceSees: failures both instances count, each between
// its own samples, add up and open the signal.
func TestOutageEveryInstanceSees(t *testing.T) {
	a := &server{start: "1.8e+09", calls: 1000}
	b := &server{start: "1.80000001e+09", calls: 500}
	p := &pool{}
	tr, clk := newTracker(t, p)
	for _, s := range []*server{a, b} { // a baseline of each
		p.next = s
		tr.Scrape(t.Context())
		clk.Step(time.Second)
	}
	// Each instance counts 4 failed calls of 4 between reads; every read
	// reaches one of them, so each sees only its own share.
	for i := range 6 {
		for _, s := range []*server{a, b} {
			s.calls += 4
			s.failing += 4
		}
		p.next = []*server{a, b}[i%2]
		tr.Scrape(t.Context())
		clk.Step(time.Second)
	}
	s := observe(t, tr)
	// a's baseline was before the outage, its last read after 5 rounds: 20
	// failures; b's baseline too, its last read after 6 rounds: 24.
	if !s.Failing || s.Calls != 44 || s.Failures != 44 {
		t.Fatalf("outage on both instances: %+v, want failing with 44 of 44", s)
	}
}

// TestInstanceIdentity: the apiserver_id_hash label wins over the start
// time; a read naming no instance blinds the signal and says why; a counter
// that goes down within one instance starts it over instead of counting a
// negative or a jump.
func TestInstanceIdentity(t *testing.T) {
	t.Run("id hash", func(t *testing.T) {
		// Same start time, different identities: two instances.
		a := &server{start: "1.8e+09", idHash: "sha256:a", calls: 0}
		b := &server{start: "1.8e+09", idHash: "sha256:b", calls: 100, failing: 100}
		p := &pool{}
		tr, clk := newTracker(t, p)
		for i := range 20 {
			p.next = []*server{a, b}[i%2]
			a.calls++
			tr.Scrape(t.Context())
			clk.Step(time.Second)
		}
		if s := observe(t, tr); s.Failing || s.Failures != 0 {
			t.Fatalf("two identities with one start time mixed: %+v", s)
		}
	})
	t.Run("none", func(t *testing.T) {
		p := &pool{next: &server{calls: 100, failing: 100}}
		tr, _ := newTracker(t, p)
		tr.Scrape(t.Context())
		s := observe(t, tr)
		if !s.Unreadable || s.Failing || !strings.Contains(s.Message, "cannot be told apart") {
			t.Fatalf("no instance named: %+v", s)
		}
	})
	t.Run("restart", func(t *testing.T) {
		a := &server{start: "1.8e+09", calls: 500, failing: 400}
		p := &pool{next: a}
		tr, clk := newTracker(t, p)
		tr.Scrape(t.Context())
		clk.Step(time.Second)
		a.calls, a.failing = 5, 0 // same identity, counters back near zero
		tr.Scrape(t.Context())
		clk.Step(time.Second)
		a.calls += 20
		tr.Scrape(t.Context())
		if s := observe(t, tr); s.Failing || s.Calls != 20 || s.Failures != 0 {
			t.Fatalf("after a reset: %+v, want 20 calls and no failures", s)
		}
	})
}

// TestWindowSlidesPerInstance: increments leave the window with the samples
// that bound them, and an instance no longer read drops out.
func TestWindowSlidesPerInstance(t *testing.T) {
	a := &server{start: "1.8e+09"}
	p := &pool{next: a}
	tr, clk := newTracker(t, p)
	tr.Scrape(t.Context())
	for range 5 {
		clk.Step(time.Second)
		a.calls += 4
		a.failing += 4
		tr.Scrape(t.Context())
	}
	if s := observe(t, tr); !s.Failing || s.Calls != 20 {
		t.Fatalf("20 failed calls in 5 s: %+v", s)
	}
	// 9 calls: below the minimum of 10, no rate.
	clk.Step(31 * time.Second)
	a.calls += 9
	tr.Scrape(t.Context())
	clk.Step(time.Second)
	tr.Scrape(t.Context())
	if s := observe(t, tr); s.Failing || s.Calls != 0 || s.FailureRate != -1 {
		t.Fatalf("31 s later: %+v, want an empty window", s)
	}
	if err := tr.Ensure("short", apisignal.Settings{Window: 500 * time.Millisecond, FailureRateThreshold: 50}); err == nil {
		t.Fatal("a window under a second was accepted")
	}
}

// TestShownNumbersRefresh: a flip of the verdict (failing, or confirmed
// healthy: enough calls under the threshold) is shown (and notified) at
// the scrape that sees it; numbers alone at most once per Refresh, with the
// time they were taken, so the status write they cost stays bounded.
func TestShownNumbersRefresh(t *testing.T) {
	a := &server{start: "1.8e+09"}
	p := &pool{next: a}
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	var notified int
	tr := &apisignal.Tracker{Source: p.source, Interval: time.Second, Clock: clk, Refresh: 10 * time.Second,
		Changed: func(string) { notified++ }}
	if err := tr.Ensure("b", apisignal.Settings{Webhook: apisignal.WebhookID{Name: "w.example.com", Type: "validating"},
		Window: 30 * time.Second, MinimumCalls: 10, FailureRateThreshold: 50}); err != nil {
		t.Fatal(err)
	}
	tr.Scrape(t.Context())
	first := observe(t, tr)
	if notified != 1 || !first.At.Equal(clk.Now()) {
		t.Fatalf("first scrape: %d notifications, shown %+v", notified, first)
	}
	clk.Step(time.Second)
	a.calls += 5
	tr.Scrape(t.Context())
	if s := observe(t, tr); notified != 1 || s.Calls != 0 {
		t.Fatalf("5 calls, under the minimum: %d notifications, shown %+v; want the first numbers still", notified, s)
	}
	clk.Step(time.Second)
	a.calls += 5
	tr.Scrape(t.Context())
	confirmed := observe(t, tr)
	if notified != 2 || confirmed.Calls != 10 || !confirmed.Healthy() {
		t.Fatalf("the minimum of healthy calls reached: %d notifications, shown %+v; want it confirmed at once", notified, confirmed)
	}
	for range 9 { // healthy traffic: numbers change, verdict does not
		clk.Step(time.Second)
		a.calls += 5
		tr.Scrape(t.Context())
	}
	if s := observe(t, tr); notified != 2 || s.Calls != 10 || !s.At.Equal(confirmed.At) {
		t.Fatalf("9 s of changing numbers: %d notifications, shown %+v; want the confirmed numbers still", notified, s)
	}
	clk.Step(time.Second)
	a.calls += 5
	tr.Scrape(t.Context())
	if s := observe(t, tr); notified != 3 || s.Calls != 60 || !s.At.Equal(clk.Now()) {
		t.Fatalf("after the refresh: %d notifications, shown %+v", notified, s)
	}
	clk.Step(time.Second)
	a.calls += 60
	a.failing += 60
	tr.Scrape(t.Context())
	if s := observe(t, tr); notified != 4 || !s.Failing || s.Calls != 120 {
		t.Fatalf("the flip 1 s after a refresh: %d notifications, shown %+v", notified, s)
	}
}

// TestFromCountsOnlyTheTrial: with Settings.From (a half-open trial's
// start), neither the failures that opened the circuit nor the calls made
// after the last read before the trial count: each instance counts from its
// first read that began after the tracker learned of the trial. The defect
// this guards: a trial that started right after the open was judged on the
// calls that opened it (its baseline was the last read before From).
func TestFromCountsOnlyTheTrial(t *testing.T) {
	a := &server{start: "1.8e+09", calls: 100}
	b := &server{start: "1.80000001e+09", calls: 50}
	p := &pool{}
	tr, clk := newTracker(t, p)
	settings := apisignal.Settings{Webhook: apisignal.WebhookID{Name: "w.example.com", Type: "validating"},
		Window: 30 * time.Second, MinimumCalls: 10, FailureRateThreshold: 50}
	// The outage: 20 failed calls on a, seen by the signal.
	p.next = a
	tr.Scrape(t.Context())
	clk.Step(time.Second)
	a.calls += 20
	a.failing += 20
	tr.Scrape(t.Context())
	if s := observe(t, tr); !s.Failing || s.Failures != 20 {
		t.Fatalf("outage: %+v, want failing on 20 of 20", s)
	}
	// 15 more failures after that read, before Bypass took effect: no read
	// counted them yet.
	a.calls += 15
	a.failing += 15
	clk.Step(200 * time.Millisecond)
	// The trial starts; the window still holds the outage. Its start is
	// what the record keeps, to the second: earlier than the last read.
	settings.From = clk.Now().Truncate(time.Second)
	if err := tr.Ensure("b", settings); err != nil {
		t.Fatal(err)
	}
	if s := observe(t, tr); s.Failing || s.Calls != 0 {
		t.Fatalf("at the trial's start: %+v, want nothing counted", s)
	}
	// The read the trial's start asks for: a's baseline.
	tr.Scrape(t.Context())
	if s := observe(t, tr); s.Failing || s.Calls != 0 {
		t.Fatalf("after the trial's first read: %+v, want the 15 failures before it not counted", s)
	}
	clk.Step(time.Second)
	// 12 trial calls on a (1 failed), 6 on b (first read during the trial:
	// its baseline is that read).
	a.calls += 12
	a.failing++
	tr.Scrape(t.Context())
	p.next = b
	tr.Scrape(t.Context())
	clk.Step(time.Second)
	b.calls += 6
	tr.Scrape(t.Context())
	s := observe(t, tr)
	if s.Failing || s.Calls != 18 || s.Failures != 1 {
		t.Fatalf("trial: %+v, want 18 calls and 1 failure", s)
	}
	// Trial calls that fail at the threshold fail it.
	a.calls += 20
	a.failing += 20
	p.next = a
	clk.Step(time.Second)
	tr.Scrape(t.Context())
	if s := observe(t, tr); !s.Failing || s.Calls != 38 || s.Failures != 21 {
		t.Fatalf("failing trial: %+v, want failing with 21 of 38", s)
	}
	// A trial longer than the window still counts from its baseline.
	clk.Step(40 * time.Second)
	tr.Scrape(t.Context())
	if s := observe(t, tr); s.Calls != 38 || s.Failures != 21 {
		t.Fatalf("40 s later, past the 30 s window: %+v, want the trial's 21 of 38 still counted", s)
	}
	// The trial ends: the window is the window again.
	settings.From = time.Time{}
	if err := tr.Ensure("b", settings); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	tr.Scrape(t.Context())
	if s := observe(t, tr); s.Calls != 0 {
		t.Fatalf("after the trial, nothing new in the last 30 s: %+v, want 0 calls", s)
	}
}

// TestATrialsStartIsReadAtOnce: the read that is a trial's baseline comes
// when the trial is learned of, not at the next tick (the calls before it
// are not counted, so a late baseline loses the trial's first calls).
func TestATrialsStartIsReadAtOnce(t *testing.T) {
	reads := make(chan struct{}, 16)
	a := &server{start: "1.8e+09", calls: 100}
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	tr := &apisignal.Tracker{Interval: time.Hour, Clock: clk, Refresh: time.Nanosecond,
		Source: func(context.Context) ([]byte, error) {
			reads <- struct{}{}
			return []byte(a.exposition()), nil
		}}
	settings := apisignal.Settings{Webhook: apisignal.WebhookID{Name: "w.example.com", Type: "validating"},
		Window: 30 * time.Second, MinimumCalls: 10, FailureRateThreshold: 50}
	if err := tr.Ensure("b", settings); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = tr.Start(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-reads:
		t.Fatal("a read before the first tick, with no trial")
	case <-time.After(100 * time.Millisecond):
	}
	settings.From = clk.Now()
	if err := tr.Ensure("b", settings); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reads:
	case <-time.After(10 * time.Second):
		t.Fatal("no read at the trial's start: its baseline waits for the next tick (an hour)")
	}
}

// TestForgetDropsTheCallsOfAnOutageThatEnded: the webhook failed 8 calls,
// then recovered, and the outage ended before a read counted them all.
// Without Forget the next read judges them as the window's (failing);
// after it, they are the baseline, and only the calls that follow count.
// A second Forget of the same outage does not drop the new calls.
func TestForgetDropsTheCallsOfAnOutageThatEnded(t *testing.T) {
	for _, forget := range []bool{false, true} {
		t.Run(fmt.Sprintf("forget=%v", forget), func(t *testing.T) {
			a := &server{start: "1.8e+09", calls: 100}
			p := &pool{next: a}
			tr, clk := newTracker(t, p)
			began := clk.Now()
			tr.Scrape(context.Background())
			a.calls, a.failing = 104, 4 // below the minimum of 10
			clk.Step(time.Second)
			tr.Scrape(context.Background())
			if s := observe(t, tr); s.Failing || s.Calls != 4 {
				t.Fatalf("mid-outage %+v, want 4 calls and no verdict", s)
			}
			a.calls, a.failing = 110, 10 // failed before the recovery, not read yet
			if forget {
				tr.Forget("b", began)
			}
			clk.Step(time.Second)
			tr.Scrape(context.Background())
			s := observe(t, tr)
			if !forget {
				if !s.Failing {
					t.Fatalf("without Forget %+v: the outage's calls should be judged (that is the defect Forget prevents)", s)
				}
				return
			}
			if s.Failing || s.Calls != 0 {
				t.Fatalf("after Forget %+v: the outage's calls were counted", s)
			}
			a.calls = 122 // 12 calls pass
			tr.Forget("b", began)
			clk.Step(time.Second)
			tr.Scrape(context.Background())
			if s := observe(t, tr); !s.Healthy() || s.Calls != 12 || s.Failures != 0 {
				t.Fatalf("after the recovery %+v, want 12 passing calls", s)
			}
		})
	}
}

// TestAFailedCallIsShownAtOnce: numbers alone are shown at most every
// Refresh, but a window that comes to hold a failed call, too few to judge,
// is shown at once: it holds back a recovery on the probes.
func TestAFailedCallIsShownAtOnce(t *testing.T) {
	a := &server{start: "1.8e+09", calls: 100}
	p := &pool{next: a}
	tr, clk := newTracker(t, p)
	tr.Refresh = time.Hour
	tr.Scrape(context.Background())
	a.calls = 103 // passing calls: numbers alone
	clk.Step(time.Second)
	tr.Scrape(context.Background())
	if s := observe(t, tr); s.Calls != 0 {
		t.Fatalf("numbers alone shown before the refresh: %+v", s)
	}
	a.calls, a.failing = 105, 2
	clk.Step(time.Second)
	tr.Scrape(context.Background())
	if s := observe(t, tr); s.Failures != 2 || s.Failing {
		t.Fatalf("%+v: want the 2 failed calls shown at once, no verdict", s)
	}
}

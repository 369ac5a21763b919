package breaker_test

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// The real-clock twins run every time-driven behaviour on the system clock,
// each in a fresh process of the test binary where no other breaker runs:
// an injected clock turns off the coarse second that system-clock
// TIME_BASED breakers read, and another breaker (or test) in the same
// process would keep its refresher alive and hide a breaker that depends
// on it. Waits are short; the bounds that fail a test are long (a busy
// machine may be slow, but a stuck circuit never arrives), and every
// assertion is about the event, not about how long it took.

const realClockEnv = "BREAKER_REAL_CLOCK_SCENARIO"

var realClockScenarios = map[string]func(t *testing.T){
	"opens-after-refresher-stopped": realOpensAfterRefresherStopped,
	"manual-open-fresh-breaker":     realManualOpen,
	"automatic-transition":          realAutomaticTransition,
	"half-open-max-wait":            realHalfOpenMaxWait,
	"window-forgets":                realWindowForgets,
	"slow-calls":                    realSlowCalls,
	"edge-admits-exactly-permitted": realEdgeAdmitsExactlyPermitted,
	"count-based-half-opens":        realCountBasedHalfOpens,
}

func TestRealClock(t *testing.T) {
	if os.Getenv(realClockEnv) != "" {
		t.Skip("inside a scenario process")
	}
	for name := range realClockScenarios {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestRealClockScenario$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), realClockEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS: TestRealClockScenario") {
				t.Fatalf("scenario %s in its own process: %v\n%s", name, err, out)
			}
		})
	}
}

// TestRealClockScenario is the body that TestRealClock runs in a fresh
// process; on its own it skips.
func TestRealClockScenario(t *testing.T) {
	name := os.Getenv(realClockEnv)
	if name == "" {
		t.Skip("run through TestRealClock")
	}
	scenario, ok := realClockScenarios[name]
	if !ok {
		t.Fatalf("unknown scenario %q", name)
	}
	scenario(t)
	// The promise that an idle process holds no breaker goroutine.
	waitUntil(t, "no breaker goroutine once idle", func() bool { return !coarseRunning() })
}

func coarseRunning() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "breaker.refreshCoarse")
}

// waitUntil polls cond every 10 ms and fails after a bound no healthy run
// comes near.
func waitUntil(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("%s: not after %v", what, time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// pollAllow calls Allow every 20 ms, as a client retrying against an open
// circuit does, until a call is admitted; it returns the permit and when
// the call that admitted it began (anything it changed, it changed after).
func pollAllow(t *testing.T, b *breaker.Breaker) (breaker.Permit, time.Time) {
	t.Helper()
	start := time.Now()
	for {
		tried := time.Now()
		p, err := b.Allow()
		if err == nil {
			return p, tried
		}
		if !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("Allow: %v", err)
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("still rejected after %v in state %s: the circuit never half-opens", time.Since(start), b.State())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func accountAccess(t *testing.T, wait time.Duration) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New("account-access", breaker.Config{WindowType: breaker.TimeBased, WindowSize: 30,
		MinimumNumberOfCalls: 10, FailureRateThreshold: 50, WaitDurationInOpenState: wait,
		PermittedNumberOfCallsInHalfOpenState: 3})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The reported bug: a TIME_BASED breaker that opened, with no other call
// anywhere in the process for longer than the refresher lives, stayed OPEN
// for good.
func realOpensAfterRefresherStopped(t *testing.T) {
	b := accountAccess(t, 3*time.Second)
	for range 10 {
		call(b, breaker.Failure)
	}
	if s := b.State(); s != breaker.Open {
		t.Fatalf("after 10 failures: %s, want OPEN", s)
	}
	opened := time.Now()
	waitUntil(t, "refresher stopped while the circuit is open and unused", func() bool { return !coarseRunning() })
	p, _ := pollAllow(t, b)
	if at := time.Now(); at.Sub(opened) < 3*time.Second { // the last failure opened it before opened was read
		t.Fatalf("admitted %v after opening, before the 3s wait", at.Sub(opened))
	}
	if s := b.State(); s != breaker.HalfOpen {
		t.Fatalf("state %s after the wait, want HALF_OPEN", s)
	}
	p.Done(breaker.Success)
	for range 2 {
		call(b, breaker.Success)
	}
	if s := b.State(); s != breaker.Closed {
		t.Fatalf("state %s after 3 successful trials, want CLOSED", s)
	}
}

func realManualOpen(t *testing.T) {
	b := accountAccess(t, 300*time.Millisecond)
	opened := time.Now() // before Open, after the admission: a difference that can only exceed the wait
	b.Open()
	p, _ := pollAllow(t, b)
	if at := time.Now(); at.Sub(opened) < 300*time.Millisecond {
		t.Fatalf("admitted %v after Open, before the 300ms wait", at.Sub(opened))
	}
	p.Done(breaker.Success)
}

func realAutomaticTransition(t *testing.T) {
	b, err := breaker.New("auto", breaker.Config{WindowType: breaker.TimeBased, WaitDurationInOpenState: 300 * time.Millisecond,
		AutomaticTransitionFromOpenToHalfOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	var events atomic.Int32
	b.Subscribe(func(e breaker.Event) {
		if e.Type == breaker.EventStateTransition && e.To == breaker.HalfOpen {
			events.Add(1)
		}
	})
	b.Open()
	opened := time.Now()
	waitUntil(t, "State reports HALF_OPEN without a call", func() bool { return b.State() == breaker.HalfOpen })
	if d := time.Since(opened); d < 300*time.Millisecond {
		t.Fatalf("HALF_OPEN %v after Open, before the wait", d)
	}
	if n := events.Load(); n != 1 {
		t.Fatalf("%d OPEN->HALF_OPEN events, want 1", n)
	}
}

func realHalfOpenMaxWait(t *testing.T) {
	b, err := breaker.New("maxwait", breaker.Config{WindowType: breaker.TimeBased, WaitDurationInOpenState: 200 * time.Millisecond,
		PermittedNumberOfCallsInHalfOpenState: 2, MaxWaitDurationInHalfOpenState: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.Open()
	held, halfOpened := pollAllow(t, b) // a trial that never completes; HALF_OPEN began during the call that admitted it
	waitUntil(t, "HALF_OPEN gives up after its max wait", func() bool { return b.State() == breaker.Open })
	if d := time.Since(halfOpened); d < 300*time.Millisecond {
		t.Fatalf("back to OPEN %v after HALF_OPEN, before the max wait", d)
	}
	held.Done(breaker.Success) // stale: decides nothing
	if s := b.State(); s != breaker.Open {
		t.Fatalf("a stale trial moved the circuit to %s", s)
	}
	p, _ := pollAllow(t, b) // and it half-opens again after the next wait
	p.Done(breaker.Success)
}

func realWindowForgets(t *testing.T) {
	b, err := breaker.New("forget", breaker.Config{WindowType: breaker.TimeBased, WindowSize: 1,
		MinimumNumberOfCalls: 4, FailureRateThreshold: 50})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		call(b, breaker.Failure)
	}
	waitUntil(t, "refresher stopped", func() bool { return !coarseRunning() })
	waitUntil(t, "the window forgets its failures", func() bool { return b.Metrics().Calls == 0 })
	for range 4 {
		call(b, breaker.Success)
	}
	call(b, breaker.Failure)
	if m := b.Metrics(); m.State != breaker.Closed || m.Calls < 5 || m.FailedCalls != 1 {
		t.Fatalf("after the old failures left: %+v, want CLOSED with 1 failure in the window", m)
	}
}

func realSlowCalls(t *testing.T) {
	b, err := breaker.New("slow", breaker.Config{WindowType: breaker.TimeBased, WindowSize: 30, MinimumNumberOfCalls: 2,
		SlowCallDurationThreshold: 30 * time.Millisecond, SlowCallRateThreshold: 100})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		p, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond)
		p.Done(breaker.Success)
	}
	if m := b.Metrics(); m.State != breaker.Open {
		t.Fatalf("two calls of 60ms over a 30ms threshold: %+v, want OPEN", m)
	}
}

// 10,000 goroutines (8,000 under the race detector, which allows at most
// 8,128) retry against an open circuit across the OPEN→HALF_OPEN edge on
// the system clock: exactly the permitted number get in.
func realEdgeAdmitsExactlyPermitted(t *testing.T) {
	const permitted = 5
	n := 10_000
	if raceEnabled {
		n = 8_000
	}
	b, err := breaker.New("edge", breaker.Config{WindowType: breaker.TimeBased, WaitDurationInOpenState: 300 * time.Millisecond,
		PermittedNumberOfCallsInHalfOpenState: permitted})
	if err != nil {
		t.Fatal(err)
	}
	b.Open()
	var admitted atomic.Int32
	var permits sync.Mutex
	var held []breaker.Permit
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if p, err := b.Allow(); err == nil {
					admitted.Add(1)
					permits.Lock()
					held = append(held, p)
					permits.Unlock()
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	waitUntil(t, "the first trial admitted", func() bool { return admitted.Load() > 0 })
	time.Sleep(300 * time.Millisecond) // every goroutine retries many times more
	close(stop)
	wg.Wait()
	if got := admitted.Load(); got != permitted {
		t.Fatalf("%d goroutines admitted across the edge, want exactly %d", got, permitted)
	}
	for i := range held {
		held[i].Done(breaker.Success)
	}
	if s := b.State(); s != breaker.Closed {
		t.Fatalf("state %s after %d successful trials", s, permitted)
	}
}

// COUNT_BASED never read the coarse second; it must stay on time too.
func realCountBasedHalfOpens(t *testing.T) {
	b, err := breaker.New("count", breaker.Config{WindowSize: 10, MinimumNumberOfCalls: 10, WaitDurationInOpenState: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		call(b, breaker.Failure)
	}
	if s := b.State(); s != breaker.Open {
		t.Fatalf("state %s, want OPEN", s)
	}
	p, _ := pollAllow(t, b)
	p.Done(breaker.Success)
}

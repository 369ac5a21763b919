package breaker

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// Far from its threshold, a TIME_BASED failure is counted on its core's
// budget: at 50 % failures against a 60 % threshold, from every P at once,
// all but a few failures (the first after the minimum, one per exhausted
// budget) leave the mutex alone. A load-independent measure of what the
// benchmarks time on a shared machine.
func TestFarFailuresStayOnTheirCore(t *testing.T) {
	b, err := New("far", Config{WindowType: TimeBased, WindowSize: 3600, MinimumNumberOfCalls: 100, FailureRateThreshold: 60})
	if err != nil {
		t.Fatal(err)
	}
	const per = 100_000
	procs := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			for i := range per {
				p, _ := b.Allow()
				if i%2 == 0 {
					p.Done(Failure)
				} else {
					p.Done(Success)
				}
			}
		})
	}
	wg.Wait()
	w := b.cur.Load().window.t
	w.mu.Lock()
	locked := w.bad.calls
	w.mu.Unlock()
	failures := int64(procs * per / 2)
	if m := b.Metrics(); m.State != Closed || m.FailedCalls != failures || m.Calls != 2*failures {
		t.Fatalf("metrics %+v, want CLOSED with %d of %d failed", m, failures, 2*failures)
	}
	if locked > failures/100 {
		t.Fatalf("%d of %d failures took the window's mutex, want under 1 %%", locked, failures)
	}
	t.Logf("%d of %d failures took the mutex", locked, failures)
}

// Far from its threshold, a COUNT_BASED failure is counted on its core's
// budget too: at 50 % failures against a 60 % threshold on the last 100
// calls, from every P at once, the failures that take the window's mutex
// are the few that find their lane's budget spent (at most one in ten; on
// one P every failure does, by design: the mutex is then uncontended).
func TestFarCountFailuresStayOnTheirCore(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	if procs == 1 {
		t.Skip("one P: failures take the uncontended mutex")
	}
	b, err := New("far", Config{WindowType: CountBased, WindowSize: 100, MinimumNumberOfCalls: 100, FailureRateThreshold: 60})
	if err != nil {
		t.Fatal(err)
	}
	const per = 100_000
	var wg sync.WaitGroup
	for range procs {
		wg.Go(func() {
			for i := range per {
				p, _ := b.Allow()
				if i%2 == 0 {
					p.Done(Failure)
				} else {
					p.Done(Success)
				}
			}
		})
	}
	wg.Wait()
	w := b.cur.Load().window.c
	w.mu.Lock()
	locked := w.locked
	w.mu.Unlock()
	failures := int64(procs * per / 2)
	if m := b.Metrics(); m.State != Closed || m.Calls != 100 {
		t.Fatalf("metrics %+v, want CLOSED with 100 calls", m)
	}
	if locked > failures/10 {
		t.Fatalf("%d of %d failures took the window's mutex, want under 10 %%", locked, failures)
	}
	t.Logf("%d of %d failures took the mutex", locked, failures)
}

// roomByLoop is room[s] as fillRoom's general loop finds it, one failure at
// a time, for any ring: the reference for fillRoomFull.
func roomByLoop(w *countWindow, limit int64) [roomLen]int64 {
	n, size := w.tot.calls, int64(len(w.ring))
	full := w.mostFailures(size)
	oldest := (int64(w.pos) - n + size) % size
	var room [roomLen]int64
	var gone, goneFailures, f int64
	for i := range int64(roomLen) {
		s := i * roomStep
		for f < limit {
			q := s + f + 1
			for target := min(max(n+q-size, 0), n); gone < target; gone++ {
				if w.ring[(oldest+gone)%size]&outcomeFailure != 0 {
					goneFailures++
				}
			}
			calls, most := min(n+q, size), full
			if calls < size {
				most = w.mostFailures(calls)
			}
			if w.tot.failures-goneFailures+f+1 > most {
				break
			}
			f++
		}
		room[i] = f
	}
	return room
}

// A full ring's room, from where its successes are, is the room the loop
// over one more failure at a time finds, for rings of any size, failure
// rate, threshold and place of the oldest outcome.
func TestFillRoomFullMatchesTheLoop(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := range 5000 {
		size := 1 + r.IntN(300)
		if round%5 == 0 {
			size = 1 + r.IntN(8)
		}
		c := Config{WindowSize: size, MinimumNumberOfCalls: 1 + r.IntN(size), FailureRateThreshold: float64(1 + r.IntN(100))}
		lanes := 2 + r.IntN(3)
		w := newCountWindowLanes(&c, true, lanes)
		rate := r.Float64()
		for range size + r.IntN(2*size) {
			o := outcomePresent
			if r.Float64() < rate {
				o |= outcomeFailure
			}
			w.push(o)
		}
		w.warm.Store(true)
		limit := min(int64(lanes)*laneLog, 0xffff)
		want := roomByLoop(w, limit)
		w.fillRoom()
		for i := range int64(roomLen) {
			if got := w.roomAt(uint64(i * roomStep)); int64(got) != want[i] {
				t.Fatalf("round %d (size %d, %d failures, threshold %v, pos %d): room at %d successes = %d, want %d", round, size, w.tot.failures, c.FailureRateThreshold, w.pos, i*roomStep, got, want[i])
			}
		}
	}
}

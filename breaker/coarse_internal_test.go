package breaker

import (
	"testing"
	"time"
)

// TestOpenWaitIsJudgedOnTheMonotonicClock: both sides of the OPEN fast
// path (the coarse second and the wait's end) are seconds of the monotonic
// clock, so that a step of the wall clock while OPEN neither lengthens nor
// shortens the wait. (A test cannot step the wall clock, nor build a time
// whose wall and monotonic readings disagree; it pins the scale instead.
// Before the fix both were Unix seconds, wall-clock readings.)
func TestOpenWaitIsJudgedOnTheMonotonicClock(t *testing.T) {
	b, err := New("account-access", Config{WindowType: TimeBased, WaitDurationInOpenState: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !b.cur.Load().coarse {
		t.Fatal("a TIME_BASED breaker on the system clock does not use the coarse second")
	}
	b.Open()
	p := b.cur.Load()
	if want := int64(p.openUntil.Sub(monoBase) / time.Second); p.untilSec != want {
		t.Fatalf("untilSec = %d, want %d: the wait's end is not on the monotonic scale", p.untilSec, want)
	}
	before := int64(time.Since(monoBase) / time.Second)
	got := coarseSecond()
	after := int64(time.Since(monoBase) / time.Second)
	if got < before-1 || got > after {
		t.Fatalf("coarseSecond() = %d, want a second of the monotonic clock in [%d, %d]", got, before-1, after)
	}
	if _, err := b.Allow(); err == nil {
		t.Fatal("admitted an hour before the wait ends")
	}
}

func TestMonoSecondFloors(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {999 * time.Millisecond, 0}, {time.Second, 1}, {-time.Nanosecond, -1}, {-time.Second, -1}, {-time.Second - 1, -2}} {
		if got := monoSecond(monoBase.Add(c.d)); got != c.want {
			t.Errorf("monoSecond(base%+v) = %d, want %d", c.d, got, c.want)
		}
	}
}

package configlock_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tripswitch-dev/tripswitch/internal/configlock"
)

func TestOneHolderPerConfiguration(t *testing.T) {
	var l configlock.Locks
	release := l.TryLock("mutating/a", "b1")
	if release == nil {
		t.Fatal("a free lock was not taken")
	}
	if l.TryLock("mutating/a", "b2") != nil {
		t.Fatal("a held lock was taken again")
	}
	if l.TryLock("mutating/a", "b3") != nil || l.TryLock("mutating/a", "b2") != nil {
		t.Fatal("a held lock was taken again")
	}
	other := l.TryLock("validating/a", "b4")
	if other == nil {
		t.Fatal("another configuration's lock was taken by the first's holder")
	}
	other()

	waiting := release()
	slices.Sort(waiting)
	if !slices.Equal(waiting, []string{"b2", "b3"}) {
		t.Fatalf("release returned %v, want each breaker that found the lock taken once: [b2 b3]", waiting)
	}
	if again := release(); len(again) != 0 {
		t.Fatalf("a second release returned %v, want nothing", again)
	}
	next := l.TryLock("mutating/a", "b2")
	if next == nil {
		t.Fatal("a released lock was not taken")
	}
	if w := next(); len(w) != 0 {
		t.Fatalf("the next holder's release returned %v: the waiters were returned already", w)
	}
}

func TestWritten(t *testing.T) {
	var l configlock.Locks
	if got := l.Written("mutating/a"); got != "" {
		t.Fatalf("Written before any write = %q, want empty", got)
	}
	l.Wrote("mutating/a", "41")
	l.Wrote("mutating/a", "42")
	if got := l.Written("mutating/a"); got != "42" {
		t.Fatalf("Written = %q, want the last write's 42", got)
	}
	if got := l.Written("validating/a"); got != "" {
		t.Fatalf("another configuration's Written = %q, want empty", got)
	}
}

// TestExclusive: many breakers contend; at most one holds the lock at a
// time, and every breaker that lost is returned by some release.
func TestExclusive(t *testing.T) {
	var l configlock.Locks
	var holders, lost, returned atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			for range 100 {
				release := l.TryLock("k", string(rune('a'+i%26))+string(rune('a'+i/26)))
				if release == nil {
					lost.Add(1)
					continue
				}
				if holders.Add(1) != 1 {
					t.Error("two holders at once")
				}
				holders.Add(-1)
				returned.Add(int64(len(release())))
			}
		})
	}
	wg.Wait()
	if lost.Load() > 0 && returned.Load() == 0 {
		t.Fatalf("%d attempts lost the lock, no release returned a waiter", lost.Load())
	}
}

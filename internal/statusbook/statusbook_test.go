package statusbook_test

import (
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/internal/statusbook"
)

func TestFirstSeenIsTheFirst(t *testing.T) {
	var b statusbook.Book
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	if got := b.FirstSeen("a", t0); !got.Equal(t0) {
		t.Fatalf("first FirstSeen = %v, want %v", got, t0)
	}
	if got := b.FirstSeen("a", t0.Add(time.Minute)); !got.Equal(t0) {
		t.Fatalf("later FirstSeen = %v, want the first %v", got, t0)
	}
	if got := b.FirstSeen("b", t0.Add(time.Minute)); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("another breaker's FirstSeen = %v, want its own", got)
	}
}

func TestDetailWaitsAfterAWrite(t *testing.T) {
	var b statusbook.Book
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	if b.DetailWaits("a", t0) {
		t.Fatal("detail waits for a breaker whose status this process never wrote")
	}
	b.Wrote("a", t0)
	if !b.DetailWaits("a", t0.Add(statusbook.DetailRefresh-time.Second)) {
		t.Fatal("detail does not wait just after a write")
	}
	if b.DetailWaits("a", t0.Add(statusbook.DetailRefresh)) {
		t.Fatal("detail still waits DetailRefresh after the last write")
	}
}

func TestForget(t *testing.T) {
	var b statusbook.Book
	now := time.Now()
	b.FirstSeen("a", now)
	b.Wrote("a", now)
	if !b.Knows("a") {
		t.Fatal("nothing kept of a breaker seen and written")
	}
	b.Forget("a")
	if b.Knows("a") || b.DetailWaits("a", now) {
		t.Fatal("a forgotten breaker is still known")
	}
	if got := b.FirstSeen("a", now.Add(time.Hour)); !got.Equal(now.Add(time.Hour)) {
		t.Fatalf("a forgotten breaker's FirstSeen = %v, want it seen anew", got)
	}
}

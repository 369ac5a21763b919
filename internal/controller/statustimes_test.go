package controller

import (
	"testing"
	"time"
)

// The status times of a breaker's memory (moved with internal/statusbook,
// whose tests these were).

func TestFirstSeenIsTheFirst(t *testing.T) {
	var b memories
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	if got := b.firstSeen("a", t0); !got.Equal(t0) {
		t.Fatalf("first firstSeen = %v, want %v", got, t0)
	}
	if got := b.firstSeen("a", t0.Add(time.Minute)); !got.Equal(t0) {
		t.Fatalf("later firstSeen = %v, want the first %v", got, t0)
	}
	if got := b.firstSeen("b", t0.Add(time.Minute)); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("another breaker's firstSeen = %v, want its own", got)
	}
}

func TestDetailWaitsAfterAWrite(t *testing.T) {
	var b memories
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	if b.detailWaits("a", t0) {
		t.Fatal("detail waits for a breaker whose status this process never wrote")
	}
	b.update("a", func(m *memory) { m.reported = t0 })
	if !b.detailWaits("a", t0.Add(detailRefresh-time.Second)) {
		t.Fatal("detail does not wait just after a write")
	}
	if b.detailWaits("a", t0.Add(detailRefresh)) {
		t.Fatal("detail still waits detailRefresh after the last write")
	}
}

func TestForget(t *testing.T) {
	var b memories
	now := time.Now()
	b.firstSeen("a", now)
	b.update("a", func(m *memory) { m.reported = now })
	if !b.has("a") {
		t.Fatal("nothing kept of a breaker seen and written")
	}
	b.update("a", func(m *memory) { *m = memory{} }) // as Reconciler.forget
	if b.has("a") || b.detailWaits("a", now) {
		t.Fatal("a forgotten breaker is still known")
	}
	if got := b.firstSeen("a", now.Add(time.Hour)); !got.Equal(now.Add(time.Hour)) {
		t.Fatalf("a forgotten breaker's firstSeen = %v, want it seen anew", got)
	}
}

package schedule

import (
	"testing"
	"time"
)

// TestDecisionsQueueOnlyWhatMayWrite: an Unhealthy verdict is a decision; a
// Healthy one is only while the circuit is open.
func TestDecisionsQueueOnlyWhatMayWrite(t *testing.T) {
	var q Decisions
	if q.Record("closed", false) {
		t.Fatal("a healthy verdict on a closed circuit was queued as a decision")
	}
	q.SetOpen("open", true)
	if !q.Record("open", false) || !q.Record("down", true) || !q.Record("down", true) {
		t.Fatal("a verdict that may write was not queued")
	}
	if n := q.Waiting(); n != 2 {
		t.Fatalf("Waiting = %d, want 2 (a breaker queued twice counts once)", n)
	}
	if !q.Take("down") || q.Take("down") || q.Waiting() != 1 {
		t.Fatalf("Take: want true once, then false; Waiting %d", q.Waiting())
	}
	q.Forget("open")
	if q.Waiting() != 0 || q.Knows("open") || q.Knows("down") || q.Knows("closed") {
		t.Fatalf("after Take and Forget: Waiting %d, knows open %v down %v closed %v", q.Waiting(), q.Knows("open"), q.Knows("down"), q.Knows("closed"))
	}
}

// TestDeferIsBounded: a status write waits only while a decision waits,
// and for at most MaxReportDelay.
func TestDeferIsBounded(t *testing.T) {
	var q Decisions
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	if q.Defer("b", now) {
		t.Fatal("deferred with no decision waiting")
	}
	q.Record("c", true)
	if !q.Defer("b", now) || !q.Defer("b", now.Add(MaxReportDelay-time.Second)) {
		t.Fatal("not deferred in a backlog")
	}
	if q.Defer("b", now.Add(MaxReportDelay)) {
		t.Fatal("deferred past MaxReportDelay")
	}
	q.Reported("b")
	if !q.Defer("b", now.Add(MaxReportDelay)) {
		t.Fatal("a report did not start a new bound")
	}
	var none *Decisions
	if none.Defer("b", now) || none.Take("b") || none.Waiting() != 0 {
		t.Fatal("a nil Decisions deferred or queued")
	}
}

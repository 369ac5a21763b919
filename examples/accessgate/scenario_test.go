package main

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestOutageTable replays the walkthrough and checks every row of seed
// 002's table: who keeps working, who is refused, whether the permission
// service was asked, and the circuit's state.
func TestOutageTable(t *testing.T) {
	const timeout = 300 * time.Millisecond
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = slog.Default()
	}
	rows, err := Scenario{Timeout: timeout, Logger: logger}.Run()
	if testing.Verbose() {
		Print(os.Stdout, rows)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		status  int
		code    string
		asked   int64
		circuit string
	}{
		{200, "", 1, "CLOSED"},
		{403, "SERVICE_ACCESS_DENIED", 1, "CLOSED"},
		{200, "", 0, "CLOSED"},                           // cached allow keeps working
		{403, "SERVICE_ACCESS_DENIED", 0, "CLOSED"},      // cached deny stays 403
		{503, "SERVICE_ACCESS_UNAVAILABLE", 1, "CLOSED"}, // after the timeout
		{503, "SERVICE_ACCESS_UNAVAILABLE", 9, "OPEN"},
		{503, "SERVICE_ACCESS_UNAVAILABLE", 0, "OPEN"}, // at once: not asked
		{200, "", 3, "CLOSED"},                         // trial calls close the circuit
		{200, "", 1, "CLOSED"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		r := rows[i]
		if r.Status != w.status || r.Code != w.code || r.Asked != w.asked || r.Circuit != w.circuit {
			t.Errorf("row %d (%s): %d %q asked %d circuit %s; want %d %q asked %d circuit %s",
				i, r.Situation, r.Status, r.Code, r.Asked, r.Circuit, w.status, w.code, w.asked, w.circuit)
		}
	}
	// A refusal while CLOSED cannot come before the per-call timeout.
	if rows[4].Took < timeout {
		t.Errorf("the cache miss was refused after %v, before the %v timeout", rows[4].Took, timeout)
	}
}

package main

import (
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

const runMainEnv = "ACCESSGATE_EXAMPLE_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) != "" {
		main() // the command itself, for TestCommandOnTheRealClock
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// TestOutageTable replays the walkthrough on the system clock and checks
// every row: who keeps working, who is refused, whether the permission
// service was asked, the circuit's state, and that the service is back
// after the open wait and the trial calls with no restart.
func TestOutageTable(t *testing.T) {
	const timeout, openWait = 300 * time.Millisecond, time.Second
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = slog.Default()
	}
	rows, err := Scenario{Timeout: timeout, OpenWait: openWait, Pause: 200 * time.Millisecond, Logger: logger}.Run()
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
		{503, "SERVICE_ACCESS_UNAVAILABLE", 0, "OPEN"}, // account back, still inside the wait
		{200, "", 1, "HALF_OPEN"},                      // the first trial, after the wait
		{200, "", 2, "CLOSED"},                         // the other two close the circuit
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
	// The trial got through no sooner than the open wait after the circuit
	// opened (which was during row 5).
	if admitted := rows[8].At + rows[8].Took; admitted < rows[5].At+openWait {
		t.Errorf("admitted at %v, before the %v open wait from the opening at %v", admitted, openWait, rows[5].At)
	}
}

// TestCommandOnTheRealClock runs the command as its own process, as the
// README does, with short waits: it recovers without a restart and exits 0.
func TestCommandOnTheRealClock(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-open-wait=1s", "-pause=200ms", "-timeout=300ms")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the command failed: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, want := range []struct{ row, has string }{
		{"circuit OPEN: refused at once", "| 503 SERVICE_ACCESS_UNAVAILABLE |"},
		{"a HALF_OPEN trial succeeds", "| 200 |"},
		{"after recovery: decided and cached again", "| 200 |"},
	} {
		found := false
		for _, l := range lines {
			if strings.Contains(l, want.row) {
				found = true
				if !strings.Contains(l, want.has) {
					t.Errorf("row %q: %s, want %s", want.row, l, want.has)
				}
			}
		}
		if !found {
			t.Errorf("no row %q in:\n%s", want.row, out)
		}
	}
	if last := lines[len(lines)-1]; !strings.HasSuffix(last, "| CLOSED |") {
		t.Errorf("last row %s, want the circuit CLOSED", last)
	}
}

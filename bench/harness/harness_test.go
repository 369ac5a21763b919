package main

import (
	"os"
	"testing"
	"time"
)

// TestShortScenario runs every setup of the harness through a short
// version of the scenario (50 callers, 5 workers, 5 ms → 200 ms, phases of
// 1 s, 2 s and 1 s), so that `make test` keeps the harness working. It
// checks that each run served calls and that the limited runs kept the
// dependency's in-flight calls bounded, loosely: the numbers that count
// come from `go run ./harness` on a quiet machine, not from here.
func TestShortScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 40 seconds")
	}
	sc := scenario{Callers: 50, Workers: 5, Fast: 5 * time.Millisecond, Slow: 200 * time.Millisecond, Think: 100 * time.Millisecond,
		Timeout: time.Second, Healthy: time.Second, SlowFor: 2 * time.Second, Recovered: time.Second, Settle: time.Second}
	var rows []row
	for _, s := range append(setups(8), tripswitchSetup("bulkhead 5 (sweep)", false, bulkhead(5))) {
		r, err := runOne(sc, s)
		if err != nil {
			t.Fatal(err)
		}
		w := summarize(sc, r)
		rows = append(rows, w)
		if w.HealthyGoodput == 0 {
			t.Errorf("%s: nothing served while the dependency was healthy", s.Name)
		}
		if s.Name == "bulkhead 8" && w.DepPeak > 8 {
			t.Errorf("%s: %d in flight at the dependency, more than the bulkhead's 8", s.Name, w.DepPeak)
		}
		if w.Rejected > 0 && w.RejectedP99 == 0 {
			t.Errorf("%s: rejections without a latency", s.Name)
		}
	}
	printTable(os.Stdout, sc, rows)
}

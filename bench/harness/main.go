// Command harness runs the slow-dependency scenario of docs/limits.md: a
// real HTTP dependency on 127.0.0.1 with a fixed number of workers whose
// service time goes from 10 ms to 2 s and back, 500 callers in a closed
// loop with a 10 s timeout, through breakerhttp with no limit, a fixed
// bulkhead, the adaptive limit and failsafe-go's adaptive limiter, each
// without and with a circuit breaker. It prints a markdown table per run
// set. It takes about 12 minutes; its short version is a test of the bench
// module, which `make test` runs.
//
//	cd bench && go run ./harness [-sweep 10,20,40,80]
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	sc := scenario{Callers: 500, Workers: 20, Fast: 10 * time.Millisecond, Slow: 2 * time.Second, Think: time.Second, Timeout: 10 * time.Second,
		Healthy: 10 * time.Second, SlowFor: 60 * time.Second, Recovered: 20 * time.Second, Settle: 15 * time.Second}
	fixed := flag.Int("bulkhead", 25, "the fixed bulkhead's maxConcurrentCalls (Resilience4j's default: 25)")
	sweep := flag.String("sweep", "", "comma-separated fixed limits to run as well, to find the best fixed limit in hindsight")
	only := flag.String("only", "", "run only the setups whose name contains this")
	flag.IntVar(&sc.Callers, "callers", sc.Callers, "callers")
	flag.IntVar(&sc.Workers, "workers", sc.Workers, "the dependency's workers")
	flag.DurationVar(&sc.SlowFor, "slow-for", sc.SlowFor, "how long the dependency is slow")
	flag.Parse()

	runs := setups(*fixed)
	for _, f := range strings.Split(*sweep, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			runs = append(runs, tripswitchSetup(fmt.Sprintf("bulkhead %d (sweep)", n), false, bulkhead(n)))
		}
	}
	fmt.Printf("%d callers, %d workers, %v → %v → %v, think %v ±50 %%, timeout %v; phases %v / %v / %v; %s, GOMAXPROCS %d\n\n",
		sc.Callers, sc.Workers, sc.Fast, sc.Slow, sc.Fast, sc.Think, sc.Timeout, sc.Healthy, sc.SlowFor, sc.Recovered, runtime.Version(), runtime.GOMAXPROCS(0))
	var rows []row
	for _, s := range runs {
		if *only != "" && !strings.Contains(s.Name, *only) {
			continue
		}
		load := loadavg()
		r, err := runOne(sc, s)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		w := summarize(sc, r)
		fmt.Fprintf(os.Stderr, "%s: done (load average before %s)\n", s.Name, load)
		rows = append(rows, w)
	}
	printTable(os.Stdout, sc, rows)
}

// loadavg is the machine's 1-minute load average, for the record.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}

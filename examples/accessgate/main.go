// Command accessgate replays seed 002's outage table on two real HTTP
// services on 127.0.0.1: "account", the permission service, and "orders",
// an API behind a fail-closed accessgate that asks account through the
// account-access circuit. See README.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	timeout := flag.Duration("timeout", 500*time.Millisecond, "per-call timeout of the permission check (seed 002 used 10s)")
	flag.Parse()
	rows, err := Scenario{Timeout: *timeout}.Run()
	Print(os.Stdout, rows)
	if err != nil {
		fmt.Fprintln(os.Stderr, "accessgate example:", err)
		os.Exit(1)
	}
}

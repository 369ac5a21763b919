// Command accessgate replays a permission-service outage on two real HTTP
// services on 127.0.0.1, on the system clock: "account", the permission
// service, and "orders", an API behind a fail-closed accessgate that asks
// account through the account-access circuit. See README.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	timeout := flag.Duration("timeout", 500*time.Millisecond, "per-call timeout of the permission check")
	openWait := flag.Duration("open-wait", 15*time.Second, "how long the account-access circuit stays open before trial calls")
	pause := flag.Duration("pause", 5*time.Second, "how long account is down before the first cache miss")
	flag.Parse()
	rows, err := Scenario{Timeout: *timeout, OpenWait: *openWait, Pause: *pause}.Run()
	Print(os.Stdout, rows)
	if err != nil {
		fmt.Fprintln(os.Stderr, "accessgate example:", err)
		os.Exit(1)
	}
}

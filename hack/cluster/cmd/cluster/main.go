// Command cluster brings the local single-node cluster up and down:
//
//	cluster up          start it; returns once the node is Ready and DNS answers
//	cluster down        stop it and remove everything it made
//	cluster leftovers   list what a cluster left on this machine (exit 1 if any)
//	cluster hostcheck   say what keeps this machine from running one (exit 1 if any)
//	cluster running     exit 0 if a cluster is running, 1 if not
//	cluster kubeconfig  print the administrator's kubeconfig path
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tripswitch-dev/tripswitch/hack/cluster"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: cluster up|down|leftovers|hostcheck|running|kubeconfig")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		if errors.Is(err, cluster.ErrCannotRun) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, verb string) error {
	l, err := cluster.DefaultLayout()
	if err != nil {
		return err
	}
	switch verb {
	case "up":
		if err := cluster.Up(ctx, l, os.Stdout); err != nil {
			return fmt.Errorf("up: %w (its logs: %s/logs; make cluster-down cleans up)", err, l.Data)
		}
	case "down":
		return cluster.Down(ctx, l, os.Stdout)
	case "leftovers":
		if left := cluster.Leftovers(l); len(left) > 0 {
			return fmt.Errorf("a cluster left:\n  - %s", strings.Join(left, "\n  - "))
		}
		fmt.Println("nothing of a cluster is left on this machine")
	case "hostcheck":
		if err := cluster.CheckHost(l); err != nil {
			return err
		}
		fmt.Println("this machine can run the cluster")
	case "running":
		if !cluster.Running(l) {
			return fmt.Errorf("no cluster is running (%s)", l.Data)
		}
		fmt.Println("a cluster is running; KUBECONFIG=" + l.Kubeconfig())
	case "kubeconfig":
		fmt.Println(l.Kubeconfig())
	default:
		return fmt.Errorf("unknown command %q (up, down, leftovers, hostcheck, running, kubeconfig)", verb)
	}
	return nil
}

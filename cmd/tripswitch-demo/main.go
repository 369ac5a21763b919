// Command tripswitch-demo runs the delayed-webhook experiment on a
// real kube-apiserver and etcd (started through envtest): a slow webhook,
// the circuit opening with Ignore and with Bypass, and recovery. It is a
// binary of its own so that the controller links no test machinery.
//
//	tripswitch-demo [--out DIR] [--creates N] [--assets DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tripswitch-dev/tripswitch/hack/versions"
	"github.com/tripswitch-dev/tripswitch/internal/demo"
)

func main() { os.Exit(runDemo(os.Args[1:])) }

// runDemo runs the delayed-webhook experiment and returns the exit code: 0 only
// if every phase behaved as expected.
func runDemo(args []string) int {
	fs := flag.NewFlagSet("tripswitch-demo", flag.ContinueOnError)
	assets := fs.String("assets", defaultAssets(), "directory holding kube-apiserver and etcd (built by `make tools`)")
	dir := fs.String("out", filepath.Join("out", "demo"), "directory for the timeline pictures and the controller log")
	creates := fs.Int("creates", 7, "ConfigMap creates per measured phase")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *creates < 1 {
		fmt.Fprintln(os.Stderr, "tripswitch-demo: --creates must be at least 1")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	runs, err := demo.Execute(ctx, demo.Options{Assets: *assets, Dir: *dir, Out: os.Stdout, Creates: *creates})
	if len(runs) > 0 {
		fmt.Println()
		if rerr := demo.Report(os.Stdout, runs); rerr != nil {
			fmt.Fprintln(os.Stderr, "tripswitch-demo: report:", rerr)
		}
		paths, perr := WriteTimeline(*dir, runs)
		if perr != nil {
			fmt.Fprintln(os.Stderr, "tripswitch-demo: timeline:", perr)
			return 1
		}
		fmt.Printf("\ntimeline: %v; controller log: %s\n", paths, filepath.Join(*dir, "controller.log"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tripswitch-demo:", err)
		return 1
	}
	fmt.Printf("demo passed in %s: every phase behaved as expected\n", time.Since(start).Round(time.Second))
	return 0
}

func defaultAssets() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join("bin", "k8s", versions.Kube)
}

// Command tripswitch-demo runs the delayed-webhook experiment (package
// internal/demo): a slow webhook, the circuit opening with Ignore, with
// Bypass and with the API server signal, and recovery; it prints the tables
// and draws the timeline. It is a binary of its own so that the controller
// links no test machinery.
//
//	tripswitch-demo [--out DIR] [--creates N] [--assets DIR]
//	    on kube-apiserver and etcd started through envtest (make demo)
//	tripswitch-demo --cluster [--kubeconfig PATH] [--hook-image REF] [--out DIR] [--creates N]
//	    in a cluster where tripswitch is installed (make demo-cluster)
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

	"k8s.io/client-go/tools/clientcmd"

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
	inCluster := fs.Bool("cluster", false, "run in the cluster --kubeconfig names, where tripswitch is installed, instead of on envtest")
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "with --cluster: the administrator's kubeconfig")
	hookImage := fs.String("hook-image", "tripswitch.test/hookserver:local", "with --cluster: the webhook's image (test/cluster/hookserver), imported into the node")
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
	env, closeEnv, err := environment(ctx, *inCluster, *kubeconfig, *hookImage, *assets, *dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tripswitch-demo:", err)
		return 1
	}
	runs, err := demo.Execute(ctx, env, demo.Options{Out: os.Stdout, Creates: *creates})
	closeEnv()
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
		fmt.Printf("\ntimeline: %v\n", paths)
		if !*inCluster {
			fmt.Printf("controller log: %s\n", filepath.Join(*dir, "controller.log"))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tripswitch-demo:", err)
		return 1
	}
	fmt.Printf("demo passed in %s: every phase behaved as expected\n", time.Since(start).Round(time.Second))
	return 0
}

// environment starts envtest, the webhook and the controller here, or
// deploys the webhook in the cluster.
func environment(ctx context.Context, inCluster bool, kubeconfig, hookImage, assets, dir string) (demo.Environment, func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("--out: %w", err)
	}
	if !inCluster {
		l, err := demo.StartLocal(ctx, demo.LocalOptions{Assets: assets, Dir: dir, Out: os.Stdout})
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	}
	if kubeconfig == "" {
		return nil, nil, fmt.Errorf("--cluster needs --kubeconfig (or KUBECONFIG)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	k, err := demo.StartCluster(ctx, demo.ClusterOptions{Config: cfg, HookImage: hookImage, Out: os.Stdout})
	if err != nil {
		return nil, nil, err
	}
	return k, k.Close, nil
}

func defaultAssets() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join("bin", "k8s", versions.Kube)
}

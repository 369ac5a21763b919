// Command cluster brings the local single-node cluster up and down:
//
//	cluster up          start it; returns once the node is Ready and DNS answers
//	cluster down        stop it and remove everything it made
//	cluster leftovers   list what a cluster left on this machine (exit 1 if any)
//	cluster hostcheck   say what keeps this machine from running one (exit 1 if any)
//	cluster running     exit 0 if a cluster is running, 1 if not
//	cluster kubeconfig  print the administrator's kubeconfig path
//	cluster kubecachedir
//	                    print where kubectl and Helm keep this cluster's caches
//	                    (KUBECACHEDIR), so that they go with it
//	cluster image REF BINARY
//	                    build a one-file image of a static binary (entrypoint
//	                    /NAME, user 65532) and import it into the node
//	cluster serving-cert NAME NAMESPACE DIR
//	                    a CA and a certificate it signed for the Service
//	                    NAME.NAMESPACE.svc: DIR/ca.crt, tls.crt, tls.key
//	cluster import ARCHIVE [INDEX-NAME]
//	                    import an image archive (docker-save, or an OCI layout
//	                    tar whose index is named INDEX-NAME) into the node
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/tripswitch-dev/tripswitch/hack/cluster"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cluster up|down|leftovers|hostcheck|running|kubeconfig|kubecachedir|image REF BINARY|import ARCHIVE [INDEX-NAME]|serving-cert NAME NAMESPACE DIR")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		if errors.Is(err, cluster.ErrCannotRun) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, verb string, args []string) error {
	l, err := cluster.DefaultLayout()
	if err != nil {
		return err
	}
	want := map[string][2]int{"image": {2, 2}, "import": {1, 2}, "serving-cert": {3, 3}}[verb]
	if len(args) < want[0] || len(args) > want[1] {
		return fmt.Errorf("%s: %d arguments, want %d to %d", verb, len(args), want[0], want[1])
	}
	switch verb {
	case "image":
		if !cluster.Running(l) {
			return fmt.Errorf("image: no cluster is running (make cluster)")
		}
		dir, err := os.MkdirTemp("", "cluster-image-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		entry := "/" + filepath.Base(args[1])
		if err := cluster.BuildAndImport(l, dir, cluster.Image{Ref: args[0], Files: map[string]string{entry: args[1]}, Entrypoint: []string{entry}, User: "65532:65532"}); err != nil {
			return err
		}
		fmt.Printf("imported %s (%s)\n", args[0], entry)
	case "serving-cert":
		if err := cluster.WriteServingCert(args[2], args[0], args[1]); err != nil {
			return err
		}
		fmt.Printf("%s: ca.crt, tls.crt, tls.key for %s.%s.svc\n", args[2], args[0], args[1])
	case "import":
		if !cluster.Running(l) {
			return fmt.Errorf("import: no cluster is running (make cluster)")
		}
		index := ""
		if len(args) == 2 {
			index = args[1]
		}
		if err := cluster.Import(l, args[0], index); err != nil {
			return err
		}
		fmt.Printf("imported %s\n", args[0])
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
	case "kubecachedir":
		fmt.Println(l.KubeCacheDir())
	default:
		return fmt.Errorf("unknown command %q (up, down, leftovers, hostcheck, running, kubeconfig, kubecachedir, image, import, serving-cert)", verb)
	}
	return nil
}

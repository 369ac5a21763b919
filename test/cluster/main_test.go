package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/hack/cluster"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// The images `make cluster-images` builds and imports into the cluster's
// containerd (pulled Never): the controller as `make release
// PLATFORMS=linux/amd64` builds it, and the sample webhook.
const (
	imageRepository = "ghcr.io/tripswitch-dev/tripswitch"
	imageTag        = "v0.0.0-local"
	hookImage       = "tripswitch.test/hookserver:local"
)

// env is what every test shares: the cluster's layout, an administrator's
// clients, the repository root and a scratch directory.
var env struct {
	layout  cluster.Layout
	config  *rest.Config
	cs      kubernetes.Interface
	client  client.Client
	root    string
	scratch string
}

func TestMain(m *testing.M) {
	if err := setup(); err != nil {
		fmt.Fprintf(os.Stderr, "test/cluster: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(env.scratch)
	os.Exit(code)
}

// setup finds the cluster (never skipping: without one the package fails
// and says how to get one), and builds and imports the controller's and
// the webhook's images with `make cluster-images`.
func setup() error {
	l, err := cluster.DefaultLayout()
	if err != nil {
		return err
	}
	if !cluster.Running(l) {
		return fmt.Errorf("no cluster is running (%s): start one with `make cluster` (root), or run `make test`, which brings one up; `CLUSTER=skip make test` runs every other test without it", l.Data)
	}
	env.layout = l
	if env.config, err = clientcmd.BuildConfigFromFlags("", l.Kubeconfig()); err != nil {
		return err
	}
	env.config.QPS, env.config.Burst = 50, 100
	if env.cs, err = kubernetes.NewForConfig(env.config); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	if env.client, err = client.New(env.config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if env.root, err = testenv.RepoRoot(); err != nil {
		return err
	}
	if env.scratch, err = os.MkdirTemp("", "tripswitch-cluster-test-"); err != nil {
		return err
	}
	began := time.Now()
	cmd := exec.Command("make", "--no-print-directory", "cluster-images")
	cmd.Dir = env.root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make cluster-images: %w\n%s", err, b)
	}
	fmt.Fprintf(os.Stderr, "test/cluster: images built and imported (make cluster-images) in %v\n", time.Since(began).Round(100*time.Millisecond))
	return nil
}

// eventually polls cond every 200 ms until it holds or limit passes.
func eventually(t testing.TB, limit time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last error
	for {
		ok, err := cond(t.Context())
		if ok {
			return
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last: %v)", limit, what, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

package e2e_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/tripswitch-dev/tripswitch/internal/fixtures/selfsigned"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// binary is the controller, built once for the package.
var binary string

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	dir, err := os.MkdirTemp("", "tripswitch-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if binary, err = testenv.BuildController(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// process is a running controller.
type process struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// kubeconfigFile writes a kubeconfig for cfg.
func kubeconfigFile(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e"}
	kc.CurrentContext = "e2e"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startController runs the binary with fast leader election against the
// cluster in kubeconfig, logging to the test's temp directory. Extra flags
// come last, so they override the defaults above.
func startController(t testing.TB, kubeconfig, name string, extra ...string) *process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary,
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--leader-election-namespace=default",
		"--leader-election-lease-duration=3s", "--leader-election-renew-deadline=2s", "--leader-election-retry-period=250ms")
	cmd.Args = append(cmd.Args, extra...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start controller %s: %v", name, err)
	}
	p := &process{t: t, name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			if data, err := os.ReadFile(logPath); err == nil {
				t.Logf("controller %s log (last 3000 bytes):\n%s", name, tail(data, 3000))
			}
		}
	})
	return p
}

// kill sends SIGKILL: no deferred cleanup, no lease release.
func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// eventually polls cond every 50ms for up to limit.
func eventually(t testing.TB, limit time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx := t.Context()
	deadline := time.Now().Add(limit)
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", limit, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// seeded is a random source whose seed is logged; TRIPSWITCH_E2E_SEED
// replays a run.
func seeded(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TRIPSWITCH_E2E_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("TRIPSWITCH_E2E_SEED: %v", err)
		}
	}
	t.Logf("seed %d (replay with TRIPSWITCH_E2E_SEED=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed))
}

// adminKubeconfig writes a cluster administrator's kubeconfig for env to the
// test's temp directory and returns its path.
func adminKubeconfig(t testing.TB, env *testenv.Env) string {
	t.Helper()
	kc, err := env.AdminKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/kubeconfig"
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveTLS serves mux over HTTPS on 127.0.0.1 with a certificate of a CA
// made for the test, until the test ends; it returns the server's base URL
// and the CA's PEM, for a webhook's clientConfig.
func serveTLS(t *testing.T, name string, mux http.Handler) (string, []byte) {
	t.Helper()
	ca, cert, err := selfsigned.Pair(name, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String(), ca.PEM
}

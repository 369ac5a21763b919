package adversary_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// binary is the controller, built once for the package.
var binary string

// The short run make test makes: a few sequences of a few steps from each
// of a fixed set of seeds. On the code before the write budget, the first
// found an undo opened over under the API server signal (sequence 1), the
// second a recreating owner's loop (sequence 1, step 2). `make adversary`
// searches with RAPID_SEED, RAPID_CHECKS and RAPID_STEPS (or rapid's
// -rapid.* flags) instead.
var shortSeeds = []string{"20261206", "13"}

const (
	shortChecks = "3"
	shortSteps  = "20"
)

// seeds are the seeds TestAdversary runs: the short run's, or "" for the
// one given (RAPID_SEED, -rapid.seed).
var seeds = shortSeeds

func TestMain(m *testing.M) {
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, value := range map[string]string{"rapid.checks": shortChecks, "rapid.steps": shortSteps} {
		env := map[string]string{"rapid.checks": "RAPID_CHECKS", "rapid.steps": "RAPID_STEPS"}[name]
		if _, ok := os.LookupEnv(env); ok || set[name] {
			continue
		}
		if err := flag.Set(name, value); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if _, ok := os.LookupEnv("RAPID_SEED"); ok || set["rapid.seed"] {
		seeds = []string{""}
	}
	dir, err := os.MkdirTemp("", "tripswitch-adversary-")
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

// replica is one controller process of the pair, started again after each
// kill.
type replica struct {
	name, kubeconfig, dir string
	cmd                   *exec.Cmd
	done                  chan struct{}
	logs                  int
}

// start runs the binary with fast leader election (a Lease of 2 s) and a
// fast API server signal, logging to a file of its own per run.
func (r *replica) start() error {
	r.logs++
	log, err := os.Create(filepath.Join(r.dir, fmt.Sprintf("%s-%d.log", r.name, r.logs)))
	if err != nil {
		return err
	}
	cmd := exec.Command(binary,
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--leader-election-namespace=default",
		"--leader-election-lease-duration=2s", "--leader-election-renew-deadline=1500ms", "--leader-election-retry-period=250ms",
		"--apiserver-signal-interval=1s")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+r.kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("start %s: %w", r.name, err)
	}
	r.cmd, r.done = cmd, make(chan struct{})
	done := r.done
	go func() { _ = cmd.Wait(); _ = log.Close(); close(done) }()
	return nil
}

// kill sends SIGKILL: no deferred cleanup, no Lease released.
func (r *replica) kill() {
	if r.cmd == nil {
		return
	}
	select {
	case <-r.done:
	default:
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
		<-r.done
	}
	r.cmd = nil
}

// lastLog is the tail of the replica's latest log.
func (r *replica) lastLog(n int) string {
	data, err := os.ReadFile(filepath.Join(r.dir, fmt.Sprintf("%s-%d.log", r.name, r.logs)))
	if err != nil {
		return err.Error()
	}
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// TestProductionBinaryLinksNoTestCode: the manager's dependency list holds
// no envtest, plotting, test webhook or test CA.
func TestProductionBinaryLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps printed only %d packages", len(deps))
	}
	for _, p := range deps {
		for _, banned := range []string{
			"sigs.k8s.io/controller-runtime/pkg/envtest", "gonum.org/v1/plot",
			"github.com/tripswitch-dev/tripswitch/internal/fixtures/slowhook", "github.com/tripswitch-dev/tripswitch/internal/fixtures/selfsigned",
			"github.com/tripswitch-dev/tripswitch/internal/demo", "github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv", "testing",
		} {
			if p == banned || strings.HasPrefix(p, banned+"/") {
				t.Errorf("the manager links %s", p)
			}
		}
	}
}

func TestHelpVersionAndFlagErrors(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "--kubeconfig") && !strings.Contains(out.String(), "-kubeconfig") {
		t.Fatalf("--help: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run([]string{"--version"}, &out); err != nil || !strings.HasPrefix(out.String(), "tripswitch ") {
		t.Fatalf("--version: %v %q", err, out.String())
	}
	for args, want := range map[string]string{
		"--leader-election-renew-deadline=20s": "--leader-election-renew-deadline (20s) must be less than --leader-election-lease-duration (15s)",
		"extra":                                `unexpected argument "extra"`,
		"--apiserver-request-timeout=0s":       "--apiserver-request-timeout must be positive",
		"--max-open-circuits=-1":               "--max-open-circuits must be 0 (no limit) or more",
		"--no-such-flag":                       "no-such-flag",
	} {
		if err := run(strings.Fields(args), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", args, err, want)
		}
	}
	// Outside a cluster, leader election needs its namespace: the error names the flag.
	f, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.leaseNamespace(); err == nil || !strings.Contains(err.Error(), "--leader-election-namespace") {
		t.Fatalf("lease namespace outside a cluster: %v", err)
	}
}

// TestKlogWritesThroughTheLogger: client-go's klog lines (a reflector's
// "Failed to watch") come out of the manager's logger, as JSON, not as
// klog's own text on stderr.
func TestKlogWritesThroughTheLogger(t *testing.T) {
	var buf lockedBuffer
	f, err := parseFlags(nil, &buf)
	if err != nil {
		t.Fatal(err)
	}
	f.zap.DestWriter = &buf
	setLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	t.Cleanup(func() { klog.ClearLogger() })
	klog.ErrorS(errors.New(`the server could not find the requested resource`), "Failed to watch", "reflector", "k8s.io/client-go/informers/factory.go:160")
	klog.Flush()
	var line map[string]any
	if err := json.Unmarshal(bytes.TrimSpace([]byte(buf.String())), &line); err != nil {
		t.Fatalf("klog's line is not one JSON object (%v):\n%s", err, buf.String())
	}
	if line["msg"] != "Failed to watch" || line["reflector"] == nil || line["level"] != "error" {
		t.Fatalf("klog's line through the logger: %v", line)
	}
}

// lockedBuffer is a logger's destination that goroutines may share:
// controller-runtime keeps the first logger a process sets, so a manager a
// later test runs in this process logs here too, from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestGCPercent: the controller's own GOGC applies only when the
// environment names none; an operator's GOGC wins.
func TestGCPercent(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	t.Setenv("GOGC", "") // restored after the test
	os.Unsetenv("GOGC")
	setGCPercent()
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("GOGC unset: GC percent %d, want %d", got, gcPercent)
	}

	t.Setenv("GOGC", "100")
	setGCPercent()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=100 set: GC percent %d, want the environment's 100", got)
	}
}

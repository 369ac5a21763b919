package e2e_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/demo"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestDemoScenarioAgainstControllerProcess runs `make demo`'s scenario with
// the controller as a separate process. Execute checks the outcomes: creates
// rejected before the circuit opens and admitted after, Ignore still waiting
// for the timeout, Bypass within 3× the healthy median, the original policy
// restored after recovery.
func TestDemoScenarioAgainstControllerProcess(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	assets, err := testenv.AssetsDir(root)
	if err != nil {
		t.Fatal(err)
	}
	env, err := demo.StartLocal(t.Context(), demo.LocalOptions{
		Assets: assets, Dir: t.TempDir(), Out: logWriter{t},
		Controller: func(_ context.Context, cfg *rest.Config, _ string) (func(), error) {
			p := startController(t, kubeconfigFile(t, cfg), "demo", "--apiserver-signal-interval=1s")
			return p.kill, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	runs, err := demo.Execute(t.Context(), env, demo.Options{Out: logWriter{t}, Creates: 7})
	if len(runs) > 0 {
		var report strings.Builder
		_ = demo.Report(&report, runs)
		t.Log("\n" + report.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || runs[0].Action != v1alpha1.OpenActionIgnore || runs[1].Action != v1alpha1.OpenActionBypass || !runs[2].Signal {
		t.Fatalf("runs = %d, want Ignore, Bypass, then Ignore with the API server signal", len(runs))
	}
}

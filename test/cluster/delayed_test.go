package cluster_test

import (
	"os"
	"strings"
	"testing"

	"github.com/tripswitch-dev/tripswitch/internal/demo"
)

// testDelayedWebhook runs `make demo`'s experiment where users run it, with
// the code `make demo-cluster` runs (internal/demo, in its Cluster
// environment): the webhook a Deployment of 2 behind a Service with a
// PodDisruptionBudget (failurePolicy Fail, timeoutSeconds 1), tripswitch
// installed by Helm, the webhook made 2 s slow and healed with Ignore, with
// Bypass and with Ignore and the API server signal. Execute checks every
// phase: creates admitted and mutated while healthy, rejected at the
// timeout while the circuit is closed, admitted unmutated while it is open
// (Ignore still waiting, Bypass not), mutated again once it closed, and the
// configuration restored byte for byte. The tables go to the log (and to
// $TRIPSWITCH_CLUSTER_REPORT).
func testDelayedWebhook(t *testing.T) {
	installTripswitch(t, nil)
	env, err := demo.StartCluster(t.Context(), demo.ClusterOptions{Config: env.config, HookImage: hookImage, Out: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	runs, err := demo.Execute(t.Context(), env, demo.Options{Out: logWriter{t}, Creates: 7})
	var report strings.Builder
	if len(runs) > 0 {
		_ = demo.Report(&report, runs)
		t.Log("\n" + report.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != len(demo.Passes) {
		t.Fatalf("%d runs, want %d (Ignore, Bypass, Ignore with the API server signal)", len(runs), len(demo.Passes))
	}
	if path := os.Getenv("TRIPSWITCH_CLUSTER_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

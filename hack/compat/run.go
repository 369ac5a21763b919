package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// buildControlPlane runs hack/tools/build.sh for release; built reports
// whether it had to build kube-apiserver (not cached).
func buildControlPlane(top, release string) (built bool, err error) {
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(top, "hack", "tools", "build.sh"), release)
	cmd.Dir, cmd.Stdout, cmd.Stderr = top, &out, &out
	err = cmd.Run()
	os.Stdout.Write(out.Bytes())
	if err != nil {
		return false, fmt.Errorf("%w: %w", errNotBuilt, err)
	}
	return !strings.Contains(out.String(), "kube-apiserver "+release+": cached"), nil
}

// discover starts the control plane in assets and asks it what it serves.
func discover(assets string) (string, map[feature]bool, error) {
	if err := os.Setenv("KUBEBUILDER_ASSETS", assets); err != nil {
		return "", nil, err
	}
	env, err := testenv.New(testenv.Options{})
	if err != nil {
		return "", nil, err
	}
	defer func() { _ = env.Stop() }()
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		return "", nil, err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return "", nil, fmt.Errorf("server version: %w", err)
	}
	_, err = env.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}, "v1")
	if err != nil && !meta.IsNoMatchError(err) {
		return "", nil, fmt.Errorf("discover MutatingAdmissionPolicy: %w", err)
	}
	return v.GitVersion, map[feature]bool{mutatingAdmissionPolicy: err == nil}, nil
}

// testEvent is a line of `go test -json`.
type testEvent struct {
	Action string
	Test   string
	Output string
}

// goTest runs one planned go test against assets, keeping its JSON stream in
// logs, and returns each test's final action (pass, fail, skip); a failure
// of the package itself (it did not build, TestMain failed) is under "".
func goTest(top, release, assets, logs string, p plannedRun, race bool) (map[string]string, error) {
	args := []string{"test", "-count=1", "-timeout=30m", "-json", "-run", p.run}
	if race {
		args = append(args, "-race")
	}
	if p.skip != "" {
		args = append(args, "-skip", p.skip)
	}
	cmd := exec.Command("go", append(args, p.pkg)...)
	cmd.Dir = filepath.Join(top, p.dir)
	// The release too: testenv refuses to start a control plane that
	// reports another (a test whose fixture ignored KUBEBUILDER_ASSETS
	// would otherwise pass on KUBE_VERSION's).
	cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+assets, testenv.ReleaseEnv+"="+release)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	name := strings.NewReplacer("/", "_", ".", "").Replace(p.dir + p.pkg)
	if werr := os.WriteFile(filepath.Join(logs, name+".json"), stdout, 0o644); werr != nil {
		return nil, werr
	}
	got := map[string]string{}
	outputs := map[string]*strings.Builder{}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e testEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		switch e.Action {
		case "pass", "fail", "skip":
			got[e.Test] = e.Action
		case "output":
			if outputs[e.Test] == nil {
				outputs[e.Test] = &strings.Builder{}
			}
			outputs[e.Test].WriteString(e.Output)
		}
	}
	if err != nil && got[""] != "fail" {
		// go test itself failed (the package did not build).
		got[""] = "fail"
		fmt.Fprintf(os.Stderr, "%s", stderr.String())
	}
	for test, action := range got {
		if action == "fail" && outputs[test] != nil && !strings.Contains(test, "/") {
			fmt.Fprintf(os.Stderr, "--- %s %s failed:\n%s", p.pkg, test, tail(outputs[test].String(), 40))
		}
	}
	return got, nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

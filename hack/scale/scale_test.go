package main

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

// The harness's short runs: a few breakers through each scenario that
// `make test` can afford, so that a change that breaks the harness (or
// what it measures: every circuit opening and closing, the configurations
// left as they were, the probes counted) fails there and not on the day
// of a measurement. The numbers themselves are for `go run ./hack/scale`
// on a quiet machine (docs/scale.md).

// runScale builds the harness and runs it with args; it returns what it
// printed and fails the test if it exits non-zero (the harness fails a
// run whose circuits do not all open or close, or that leaves a
// configuration changed).
func runScale(t *testing.T, args ...string) string {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run through make test, which builds the control plane")
	}
	bin := filepath.Join(t.TempDir(), "scale")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the harness: %v\n%s", err, out)
	}
	statSources(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("scale %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// statSources looks at every Go source, go.mod and go.sum of the
// repository: the harness builds the controller from them, out of go
// test's sight, so that go test's cache reuses a pass only while none of
// them changed (it rechecks the files a test looked at inside the module).
func statSources(t *testing.T) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if n := d.Name(); strings.HasSuffix(n, ".go") || n == "go.mod" || n == "go.sum" {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatalf("look at the sources the harness builds: %v", err)
	}
}

// tableRow returns the cells of the last table row of out that begins
// with first.
func tableRow(t *testing.T, out, first string) []string {
	t.Helper()
	var row []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "| "+first+" |") {
			row = nil
			for _, c := range strings.Split(strings.Trim(l, "|"), "|") {
				row = append(row, strings.TrimSpace(c))
			}
		}
	}
	if row == nil {
		t.Fatalf("no table row starting %q in:\n%s", first, out)
	}
	return row
}

var leadingNumber = regexp.MustCompile(`^[0-9.]+`)

// number is the number a cell begins with.
func number(t *testing.T, cell string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(leadingNumber.FindString(cell), 64)
	if err != nil {
		t.Fatalf("cell %q: %v", cell, err)
	}
	return v
}

func TestStormShort(t *testing.T) {
	out := runScale(t, "-n", "8", "-per-config", "4", "-steady", "3s")
	row := tableRow(t, out, "8")
	if got := row[len(row)-1]; got != "0" {
		t.Errorf("configurations changed after the storm: %s\n%s", got, out)
	}
	// fault → first / last open: every circuit opened, after at least the
	// three failed probes a second apart that the breakers ask for.
	if last := number(t, strings.TrimSpace(strings.Split(row[11], "/")[1])); last < 2 {
		t.Errorf("last circuit open %.2f s after the fault: sooner than three failed probes a second apart\n%s", last, out)
	}
}

func TestCostShort(t *testing.T) {
	out := runScale(t, "-scenario", "cost", "-n", "8", "-per-config", "4", "-warmup", "2s", "-steady", "3s")
	row := tableRow(t, out, "HTTPGet")
	// The probes per second, plain (before and after) and controller, are
	// printed per process; each must have probed about 8 times a second.
	rates := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || (f[0] != "plain" && f[0] != "controller") || !strings.Contains(l, "probes/s") {
			continue
		}
		rates++
		i := strings.Index(l, "probes/s")
		rate := number(t, strings.TrimSpace(l[strings.LastIndex(l[:i-1], ",")+1:i]))
		if rate < 6 || rate > 10 {
			t.Errorf("%s probed %.1f times a second, want about 8:\n%s", f[0], rate, l)
		}
	}
	if rates != 3 {
		t.Errorf("found %d probe rates, want 3 (plain, controller, plain):\n%s", rates, out)
	}
	if len(row) < 8 || !strings.HasSuffix(row[7], "×") {
		t.Errorf("no ratio in the cost row %q", row)
	}
}

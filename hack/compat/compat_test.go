package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Where the release serves everything, every check's Tests run and nothing
// is skipped; where it lacks MutatingAdmissionPolicy, the floor's MAP
// subtests of internal/controller are skipped and the test saying so runs.
func TestPlanSelectsEachChecksTests(t *testing.T) {
	byPkg := func(runs []plannedRun) map[string]plannedRun {
		out := map[string]plannedRun{}
		for _, r := range runs {
			out[r.dir+" "+r.pkg] = r
		}
		return out
	}
	all := byPkg(plan(map[feature]bool{mutatingAdmissionPolicy: true}))
	ctl := all[". ./internal/controller"]
	if ctl.skip != "" || !strings.Contains(ctl.run, "|TestFullCycle|") || !strings.Contains(ctl.run, "TestFallbackFloorThroughACycle") {
		t.Errorf("served: internal/controller runs %q skipping %q", ctl.run, ctl.skip)
	}
	if _, ok := all["test ./versions"]; ok {
		t.Error("served: the not-served test is selected")
	}
	old := byPkg(plan(map[feature]bool{}))
	if got := old[". ./internal/controller"].skip; got != "^(TestFallbackFloorThroughACycle)$/^(MutatingAdmissionPolicy)$" {
		t.Errorf("not served: internal/controller skips %q", got)
	}
	if got := old["test ./versions"].run; got != "^(TestFallbackKindNotServedIsSaid)$" {
		t.Errorf("not served: test/versions runs %q", got)
	}
	if got := old[". ./internal/floor"]; got.run != "^(TestFloorOnTheAPIServer)$" || got.skip != "" {
		t.Errorf("not served: internal/floor runs %q skipping %q (its MAP subtest checks what is said)", got.run, got.skip)
	}
}

// A check works only if each of its tests passed; a test that did not run,
// or a package that did not build, fails it.
func TestJudge(t *testing.T) {
	pass := map[string]map[string]string{}
	for _, r := range plan(map[feature]bool{}) {
		pass[r.dir+" "+r.pkg] = map[string]string{}
	}
	for _, c := range checks {
		refs := c.Tests
		if c.Needs != "" {
			refs = c.Instead
		}
		for _, r := range refs {
			pass[r.key()][r.Test] = "pass"
			if top := r.top(); top != r.Test {
				pass[r.key()][top] = "pass"
			}
		}
	}
	for _, c := range judge(map[feature]bool{}, pass) {
		want := statusWorks
		if c.Name == "Floor: MutatingAdmissionPolicy" {
			want = statusNotServed
		}
		if c.Status != want {
			t.Errorf("all passed: %s is %s, want %s (%v)", c.Name, c.Status, want, c.Tests)
		}
	}
	// A failed subtest (its package fails too), a skipped test, a test that
	// did not run, a package that failed with no test failing.
	pass[". ./internal/controller"]["TestFullCycle/Bypass"] = "fail"
	pass[". ./internal/controller"][""] = "fail"
	pass[". ./internal/controller"]["TestOwnersThroughAnOutage"] = "skip"
	delete(pass["test ./e2e"], "TestBypassTrialJudgedOnRealCalls")
	pass["test ./deploy"][""] = "fail"
	failed := map[string]bool{}
	res := result{Checks: judge(map[feature]bool{}, pass)}
	for _, c := range res.Checks {
		failed[c.Name] = c.Status == statusFails
	}
	for _, name := range []string{"Open and close with Ignore and Bypass, byte-identical", "Half-open trial judged on the API server's calls",
		"RBAC (chart and kustomize) and the admission guard on tripswitch's own writes", "Owner patterns of docs/owners.md"} {
		if !failed[name] {
			t.Errorf("%s: not failed by a failed subtest, a skipped test, a test that did not run, or a package that did not build", name)
		}
	}
	// The package failed because of its failed test: its other checks stand.
	for _, name := range []string{"CRD installs, with its validation rules and defaults", "Floor: ValidatingAdmissionPolicy"} {
		if failed[name] {
			t.Errorf("%s: failed by another check's test", name)
		}
	}
	if got, all := res.passed(); got >= all || all == 0 {
		t.Errorf("passed %d of %d tests, with some failed", got, all)
	}
}

// The table written is the table read back, and a run that disagrees with
// it is reported.
func TestTableRoundTrip(t *testing.T) {
	res := func(release string, mapServed bool) result {
		r := result{Release: release, ServerVersion: release}
		for _, c := range checks {
			s := statusWorks
			if c.Needs != "" && !mapServed {
				s = statusNotServed
			}
			r.Checks = append(r.Checks, checkResult{Name: c.Name, Status: s})
		}
		return r
	}
	all := []result{res("v1.30.14", false), res("v1.37.2", true)}
	path := filepath.Join(t.TempDir(), "install.md")
	if err := os.WriteFile(path, []byte("# Install\n\n"+tableBegin+"\nold\n"+tableEnd+"\n\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeTable(path, all); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "# Install\n\n") || !strings.HasSuffix(string(data), "\n\nafter\n") || strings.Contains(string(data), "old") {
		t.Fatalf("the table did not replace what was between its markers:\n%s", data)
	}
	if err := checkAgainst(path, all); err != nil {
		t.Fatalf("a run agreeing with the table: %v", err)
	}
	changed := res("v1.30.14", false)
	changed.Checks[2].Status = statusFails
	if err := checkAgainst(path, []result{changed}); err == nil || !strings.Contains(err.Error(), "on v1.30.14") {
		t.Fatalf("a run that disagrees: %v", err)
	}
	if err := checkAgainst(path, []result{res("v1.29.9", false)}); err == nil {
		t.Fatal("a release the table lacks: no error")
	}
}

// Every test a check names exists (as a top-level test function in its
// package): a renamed test fails here, not only after a suite's run.
func TestChecksNameTestsThatExist(t *testing.T) {
	for _, c := range checks {
		for _, r := range append(slices.Clone(c.Tests), c.Instead...) {
			files, err := filepath.Glob(filepath.Join("..", "..", r.Dir, r.Pkg, "*_test.go"))
			if err != nil || len(files) == 0 {
				t.Errorf("%s: no test files in %s (%v)", c.Name, filepath.Join(r.Dir, r.Pkg), err)
				continue
			}
			found := false
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				found = found || strings.Contains(string(data), "\nfunc "+r.top()+"(t *testing.T) {")
			}
			if !found {
				t.Errorf("%s: no func %s in %s", c.Name, r.top(), filepath.Join(r.Dir, r.Pkg))
			}
		}
	}
}

// goTest reads what go test really reports: passed, failed and skipped
// tests and subtests, and a package that does not build, which brokenPackage
// tells from a package whose test failed.
func TestGoTestReadsOutcomes(t *testing.T) {
	top := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/fake\n\ngo 1.26\n",
		"ok/a_test.go": `package ok

import "testing"

func TestPass(t *testing.T) {}
func TestFail(t *testing.T) { t.Fatal("no") }
func TestSkip(t *testing.T) { t.Skip("not here") }
func TestSub(t *testing.T) {
	t.Run("A", func(t *testing.T) {})
	t.Run("B", func(t *testing.T) { t.Error("no") })
}
`,
		"broken/b_test.go": "package broken\n\nfunc TestX(t *testing.T) {}\n",
	}
	for name, text := range files {
		path := filepath.Join(top, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := goTest(top, "v1.0.0", t.TempDir(), t.TempDir(), plannedRun{dir: ".", pkg: "./ok", run: "^(TestPass|TestFail|TestSkip|TestSub)$"}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"TestPass": "pass", "TestFail": "fail", "TestSkip": "skip", "TestSub": "fail", "TestSub/A": "pass", "TestSub/B": "fail", "": "fail"}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if brokenPackage(got) {
		t.Error("a package whose tests failed is taken for one that did not build")
	}
	got, err = goTest(top, "v1.0.0", t.TempDir(), t.TempDir(), plannedRun{dir: ".", pkg: "./broken", run: "^(TestX)$"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !brokenPackage(got) {
		t.Errorf("a package that does not build: %v", got)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Statuses of a check on a release.
const (
	// statusWorks: every test of the check passed.
	statusWorks = "works"
	// statusNotServed: the release lacks the check's feature, and the tests
	// that show tripswitch says so, with nothing else broken, passed.
	statusNotServed = "not served"
	// statusFails: a test failed, or did not run.
	statusFails = "FAILS"
)

// result is one release's run.
type result struct {
	Release string `json:"release"`
	// ServerVersion is what the API server said (/version).
	ServerVersion string           `json:"serverVersion"`
	Served        map[feature]bool `json:"served"`
	// Built: kube-apiserver was built, not found in the cache, in
	// BuildSeconds (build.sh's whole run either way).
	Built        bool          `json:"built"`
	BuildSeconds float64       `json:"buildSeconds"`
	SuiteSeconds float64       `json:"suiteSeconds"`
	Checks       []checkResult `json:"checks"`
}

// checkResult is one check on one release.
type checkResult struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	// Tests is each test's action (pass, fail, skip; "did not run").
	Tests map[string]string `json:"tests"`
}

// judge gives every check its status from the tests' outcomes, by module
// and package. A test of the check that failed, was skipped or did not run
// fails it; so does a package that failed with no test failing (it did not
// build, or its TestMain failed), since then nothing it says can be trusted.
func judge(served map[feature]bool, outcomes map[string]map[string]string) []checkResult {
	var out []checkResult
	for _, c := range checks {
		refs, ok := c.Tests, statusWorks
		if c.Needs != "" && !served[c.Needs] {
			refs, ok = c.Instead, statusNotServed
		}
		cr := checkResult{Name: c.Name, Status: ok, Tests: map[string]string{}}
		for _, r := range refs {
			got := outcomes[r.key()]
			ran := false
			for test, action := range got {
				if r.covers(test) {
					cr.Tests[r.Pkg+" "+test] = action
					ran = true
					if action != "pass" {
						cr.Status = statusFails
					}
				}
			}
			switch {
			case brokenPackage(got):
				cr.Tests[r.Pkg] = "fail (the package, not a test)"
				cr.Status = statusFails
			case !ran:
				cr.Tests[r.Pkg+" "+r.Test] = "did not run"
				cr.Status = statusFails
			}
		}
		out = append(out, cr)
	}
	return out
}

// brokenPackage: the package failed, and no test of it did.
func brokenPackage(got map[string]string) bool {
	if got[""] != "fail" {
		return false
	}
	for test, action := range got {
		if test != "" && action == "fail" {
			return false
		}
	}
	return true
}

// passed counts the tests and subtests of r's checks that passed, of all
// they name (one a test shared by two checks counts once).
func (r result) passed() (passed, all int) {
	seen := map[string]string{}
	for _, c := range r.Checks {
		maps.Copy(seen, c.Tests)
	}
	for _, action := range seen {
		if action == "pass" {
			passed++
		}
	}
	return passed, len(seen)
}

func (r result) ok() bool {
	for _, c := range r.Checks {
		if c.Status == statusFails {
			return false
		}
	}
	return true
}

// summary is what the run prints for the release.
func (r result) summary() string {
	var b strings.Builder
	build := "cached"
	if r.Built {
		build = "built"
	}
	passed, ran := r.passed()
	fmt.Fprintf(&b, "== %s (API server %s): control plane %s in %.0f s; checks in %.0f s, %d of %d tests passed\n",
		r.Release, r.ServerVersion, build, r.BuildSeconds, r.SuiteSeconds, passed, ran)
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "   %-10s %s\n", c.Status, c.Name)
		if c.Status == statusFails {
			tests := make([]string, 0, len(c.Tests))
			for t, a := range c.Tests {
				if a != "pass" {
					tests = append(tests, t+": "+a)
				}
			}
			slices.Sort(tests)
			for _, t := range tests {
				fmt.Fprintf(&b, "              %s\n", t)
			}
		}
	}
	return b.String()
}

func (r result) save(dir string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, r.Release+".json"), append(data, '\n'), 0o644)
}

// loadAll reads the results of releases from dir, in that order.
func loadAll(dir string, releases []string) ([]result, error) {
	var out []result
	for _, rel := range releases {
		data, err := os.ReadFile(filepath.Join(dir, rel+".json"))
		if err != nil {
			return nil, fmt.Errorf("no result for %s (run it): %w", rel, err)
		}
		var r result
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		out = append(out, r)
	}
	return out, nil
}

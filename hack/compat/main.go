// Command compat is the compatibility suite: for each Kubernetes release of
// the matrix (KUBE_OLDER_VERSIONS and KUBE_VERSION in
// hack/versions/versions.env), it builds that release's control plane
// (hack/tools/build.sh), learns what the API server serves, runs the
// repository's own tests that show each capability (checks.go) against it,
// and records the result in out/compat/<release>.json. With -table it writes
// the table of docs/install.md from those results; with -check-table it
// fails when a release it ran disagrees with that table.
//
//	go run ./hack/compat -releases all -table docs/install.md   # make test-versions
//	go run ./hack/compat -releases oldest -check-table docs/install.md   # in make test
//
// The tests run with the race detector (-race=false to leave it out), as
// `make test` runs them: in `make test` the suite then reuses the packages
// its other tests compiled, which costs less than compiling them a second
// time without it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tripswitch-dev/tripswitch/hack/versions"
	"github.com/tripswitch-dev/tripswitch/internal/fixtures/testenv"
)

func main() {
	// discover starts a control plane in this process: envtest logs
	// through controller-runtime, whose unset logger would print a stack.
	ctrllog.SetLogger(logr.Discard())
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("compat", flag.ContinueOnError)
	releases := fs.String("releases", "all", "all (the matrix), oldest, newest, ends (oldest and newest), none (with -table: only write the table from -out), or a comma-separated list of vX.Y.Z")
	out := fs.String("out", filepath.Join("out", "compat"), "directory for each release's results and test logs")
	table := fs.String("table", "", "write the compatibility table into this Markdown file, from -out's results for every release of the matrix")
	checkTable := fs.String("check-table", "", "fail when a release run here disagrees with this Markdown file's table")
	race := fs.Bool("race", true, "run the tests with the race detector")
	if err := fs.Parse(args); err != nil {
		return err
	}
	top, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	list, err := pick(*releases)
	if err != nil {
		return err
	}
	if !filepath.IsAbs(*out) {
		*out = filepath.Join(top, *out)
	}
	var failed []string
	var ran []result
	for _, release := range list {
		res, err := runRelease(top, *out, release, *race)
		if err != nil {
			return fmt.Errorf("%s: %w", release, err)
		}
		if err := res.save(*out); err != nil {
			return err
		}
		fmt.Print(res.summary())
		ran = append(ran, res)
		if !res.ok() {
			failed = append(failed, release)
		}
	}
	if *table != "" {
		all, err := loadAll(*out, versions.KubeMatrix())
		if err != nil {
			return fmt.Errorf("-table needs every release of the matrix: %w", err)
		}
		if err := writeTable(filepath.Join(top, *table), all); err != nil {
			return err
		}
		fmt.Printf("wrote the compatibility table of %d releases into %s\n", len(all), *table)
	}
	if *checkTable != "" {
		if err := checkAgainst(filepath.Join(top, *checkTable), ran); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("checks failed on %s (logs in %s)", strings.Join(failed, ", "), *out)
	}
	return nil
}

// pick resolves -releases against the matrix.
func pick(spec string) ([]string, error) {
	matrix := versions.KubeMatrix()
	switch spec {
	case "all":
		return matrix, nil
	case "oldest":
		return matrix[:1], nil
	case "newest":
		return matrix[len(matrix)-1:], nil
	case "ends":
		return []string{matrix[0], matrix[len(matrix)-1]}, nil
	case "none":
		return nil, nil
	}
	var out []string
	for _, r := range strings.Split(spec, ",") {
		if _, err := versions.Minor(r); err != nil {
			return nil, fmt.Errorf("-releases: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// runRelease builds release's control plane, discovers what it serves and
// runs every check on it.
func runRelease(top, out, release string, race bool) (result, error) {
	res := result{Release: release}
	fmt.Printf("== %s: control plane\n", release)
	start := time.Now()
	built, err := buildControlPlane(top, release)
	if err != nil {
		return res, err
	}
	res.BuildSeconds, res.Built = time.Since(start).Seconds(), built
	assets := filepath.Join(top, "bin", "k8s", release)
	if res.ServerVersion, res.Served, err = discover(assets); err != nil {
		return res, err
	}
	if res.ServerVersion != release {
		return res, fmt.Errorf("the API server in %s reports %s", assets, res.ServerVersion)
	}
	logs := filepath.Join(out, release)
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return res, err
	}
	start = time.Now()
	outcomes := map[string]map[string]string{} // module+package -> test -> action
	for _, g := range plan(res.Served) {
		fmt.Printf("== %s: %s %s -run %s%s\n", release, g.dir, g.pkg, g.run, skipNote(g.skip))
		got, err := goTest(top, release, assets, logs, g, race)
		if err != nil {
			return res, err
		}
		outcomes[g.dir+" "+g.pkg] = got
	}
	res.SuiteSeconds = time.Since(start).Seconds()
	res.Checks = judge(res.Served, outcomes)
	return res, nil
}

func skipNote(skip string) string {
	if skip == "" {
		return ""
	}
	return " -skip " + skip
}

// errNotBuilt is build.sh failing.
var errNotBuilt = errors.New("hack/tools/build.sh failed")

// plannedRun is one go test invocation: the tests of one package.
type plannedRun struct {
	dir, pkg  string
	run, skip string
}

// plan groups the tests every check needs on a release that serves served
// into one run per package: the tests selected, and the subtests skipped
// where a check's feature is missing (its Instead runs, not its Tests).
func plan(served map[feature]bool) []plannedRun {
	tops := map[string][]string{}
	skips := map[string][2][]string{}
	var order []string
	add := func(r testRef) {
		k := r.key()
		if _, ok := tops[k]; !ok {
			order = append(order, k)
		}
		if !slices.Contains(tops[k], r.top()) {
			tops[k] = append(tops[k], r.top())
		}
	}
	for _, c := range checks {
		refs := c.Tests
		if c.Needs != "" && !served[c.Needs] {
			refs = c.Instead
			for _, r := range c.Tests {
				if slices.Contains(c.Instead, r) {
					continue
				}
				top, sub, _ := strings.Cut(r.Test, "/")
				if sub == "" {
					continue // a whole test is simply not selected
				}
				s := skips[r.key()]
				s[0], s[1] = appendNew(s[0], top), appendNew(s[1], sub)
				skips[r.key()] = s
			}
		}
		for _, r := range refs {
			add(r)
		}
	}
	var runs []plannedRun
	for _, k := range order {
		dir, pkg, _ := strings.Cut(k, " ")
		p := plannedRun{dir: dir, pkg: pkg, run: "^(" + strings.Join(tops[k], "|") + ")$"}
		if s, ok := skips[k]; ok {
			p.skip = "^(" + strings.Join(s[0], "|") + ")$/^(" + strings.Join(s[1], "|") + ")$"
		}
		runs = append(runs, p)
	}
	return runs
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

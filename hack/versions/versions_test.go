package versions

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository: this package is hack/versions.
var root = filepath.Join("..", "..")

func read(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(data)
}

func TestParseRejectsWhatMakeAndBashReadDifferently(t *testing.T) {
	for _, tc := range []struct{ name, text string }{
		{"no equals sign", "KUBE_VERSION v1.37.2"},
		{"a space in the value", "KUBE_OLDER_VERSIONS=v1.30.14 v1.31.14"},
		{"quotes", `HELM_VERSION="v4.3.2"`},
		{"a variable", "X=$(Y)"},
		{"a lower-case key", "kube=v1"},
		{"an empty value", "KUBE_VERSION="},
		{"a key twice", "A=1\nA=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if pins, err := Parse(tc.text); err == nil {
				t.Fatalf("Parse(%q) = %v, want an error", tc.text, pins)
			}
		})
	}
	pins, err := Parse("# a comment\n\nA=v1.2.3\n  B=x,y  \n")
	if err != nil || pins["A"] != "v1.2.3" || pins["B"] != "x,y" || len(pins) != 2 {
		t.Fatalf("Parse = %v, %v; want A=v1.2.3 B=x,y", pins, err)
	}
}

// The matrix is one release per minor, every minor from the oldest to Kube's.
func TestKubeMatrixIsEveryMinorOnce(t *testing.T) {
	var prev int
	for i, release := range KubeMatrix() {
		minor, err := Minor(release)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && minor != prev+1 {
			t.Errorf("KUBE_OLDER_VERSIONS, KUBE_VERSION: %s follows minor %d; want one release per minor, oldest first, none left out", release, prev)
		}
		prev = minor
	}
}

// goModRequire returns the version a go.mod requires of a module, or "".
func goModRequire(gomod, module string) string {
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + `\s+(v\S+)`).FindStringSubmatch(gomod)
	if m == nil {
		return ""
	}
	return m[1]
}

func TestToolModulesRequireThePins(t *testing.T) {
	staging, err := Staging(Kube)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ gomod, module, want string }{
		{"hack/tools/kube-apiserver/go.mod", "k8s.io/kubernetes", Kube},
		{"hack/tools/kube-node/go.mod", "k8s.io/kubernetes", Kube},
		{"hack/tools/etcd/go.mod", "go.etcd.io/etcd/server/v3", Etcd},
		{"hack/tools/containerd/go.mod", "github.com/containerd/containerd/v2", Containerd},
		{"hack/tools/coredns/go.mod", "github.com/coredns/coredns", CoreDNS},
		{"test/go.mod", "helm.sh/helm/v4", Helm},
		{"hack/release/go.mod", "helm.sh/helm/v4", Helm},
	} {
		if got := goModRequire(read(t, tc.gomod), tc.module); got != tc.want {
			t.Errorf("%s requires %s %q; hack/versions/versions.env pins %s", tc.gomod, tc.module, got, tc.want)
		}
	}
	// Every staging module k8s.io/kubernetes replaces with a local path is
	// replaced by its published release of the same Kubernetes version.
	replace := regexp.MustCompile(`(?m)^\s*(k8s\.io/[\w.-]+) => (k8s\.io/[\w.-]+) (v\S+)$`)
	for _, gomod := range []string{"hack/tools/kube-apiserver/go.mod", "hack/tools/kube-node/go.mod"} {
		found := replace.FindAllStringSubmatch(read(t, gomod), -1)
		if len(found) < 20 {
			t.Errorf("%s: %d staging replacements; want one per staging module of k8s.io/kubernetes", gomod, len(found))
		}
		var wrong []string
		for _, m := range found {
			if m[1] != m[2] || m[3] != staging {
				wrong = append(wrong, m[1]+" => "+m[2]+" "+m[3])
			}
		}
		if len(wrong) > 0 {
			t.Errorf("%s: %d of %d staging replacements are not the module at %s (KUBE_VERSION %s), e.g. %s; regenerate it with hack/tools/kube-module.sh",
				gomod, len(wrong), len(found), staging, Kube, wrong[0])
		}
	}
}

func TestChartAndREADMEPromiseTheOldest(t *testing.T) {
	minor, err := Minor(KubeOldest())
	if err != nil {
		t.Fatal(err)
	}
	oldest := fmt.Sprintf("1.%d", minor)
	want := `kubeVersion: ">=` + oldest + `.0-0"`
	if chart := read(t, "charts/tripswitch/Chart.yaml"); !strings.Contains(chart, want) {
		t.Errorf("charts/tripswitch/Chart.yaml: want %s (the oldest tested release, %s)", want, KubeOldest())
	}
	for _, doc := range []string{"README.md", "docs/install.md"} {
		if !strings.Contains(read(t, doc), "Kubernetes "+oldest+" or later") {
			t.Errorf("%s: want \"Kubernetes %s or later\" (the oldest tested release, %s)", doc, oldest, KubeOldest())
		}
	}
}

// rule finds a pinned tool named in text and the version written beside it.
type rule struct {
	pin string
	re  *regexp.Regexp // group 1 is the version
	ok  func(version string) bool
}

func is(want string) func(string) bool {
	return func(v string) bool { return strings.TrimPrefix(v, "v") == strings.TrimPrefix(want, "v") }
}

// near is a tool's name, then up to 24 characters that are not a line's end
// or a sentence's, then the version.
func near(names, version string) *regexp.Regexp {
	return regexp.MustCompile(`(?i)(?:` + names + `)[^\n.;,()>]{0,24}?\b(v?` + version + `)\b`)
}

var rules = []rule{
	{"KUBE_VERSION or KUBE_OLDER_VERSIONS", near(`kubernetes|kube-apiserver|kubectl|kubelet|k8s|KubeVersion|KUBE_VERSION`, `1\.\d+\.\d+`),
		func(v string) bool { return slices.Contains(KubeMatrix(), "v"+strings.TrimPrefix(v, "v")) }},
	{"ETCD_VERSION", near(`etcd`, `3\.\d+\.\d+`), is(Etcd)},
	{"CONTAINERD_VERSION", near(`containerd`, `2\.\d+\.\d+`), is(Containerd)},
	{"COREDNS_VERSION", near(`coredns`, `1\.\d+\.\d+`), is(CoreDNS)},
	{"PAUSE_VERSION", regexp.MustCompile(`(?i)pause[^\n.;,()]{0,16}?\b(v?3\.\d+(?:\.\d+)?)\b`), is(Pause)},
	{"HELM_VERSION", near(`helm`, `4\.\d+\.\d+`), is(Helm)},
	{"CONTROLLER_TOOLS_VERSION", near(`controller-tools|controller-gen`, `0\.\d+\.\d+`), is(ControllerTools)},
	// What controller-gen writes into the CRDs it generates.
	{"CONTROLLER_TOOLS_VERSION", regexp.MustCompile(`controller-gen\.kubebuilder\.io/version: (v\S+)`), is(ControllerTools)},
	{"STATICCHECK_VERSION", near(`staticcheck|honnef\.co/go/tools`, `0\.\d+\.\d+`), is(Staticcheck)},
}

// Every file that could name a version (docs, scripts, manifests, Go
// source, CI) names the pinned one. CHANGELOG.md is history, go.mod files
// are checked above, go.sum follows go.mod, and this package's own tests
// spell versions on purpose.
func TestEveryVersionNamedIsThePin(t *testing.T) {
	skipDir := map[string]bool{".git": true, "bin": true, "dist": true, "out": true}
	skipFile := map[string]bool{"CHANGELOG.md": true, "go.mod": true, "go.sum": true, "versions.env": true}
	var scanned int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDir[d.Name()] && filepath.Dir(path) == root || path == filepath.Join(root, "hack", "versions") {
				return filepath.SkipDir
			}
			return nil
		}
		if skipFile[d.Name()] || !scannable(d.Name()) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		scanned++
		rel, _ := filepath.Rel(root, path)
		for _, r := range rules {
			for _, m := range r.re.FindAllStringSubmatchIndex(string(data), -1) {
				v := string(data[m[2]:m[3]])
				if !r.ok(v) {
					line := 1 + strings.Count(string(data[:m[0]]), "\n")
					t.Errorf("%s:%d: %q names %s; hack/versions/versions.env pins %s", rel, line, string(data[m[0]:m[1]]), v, r.pin)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if scanned < 100 {
		t.Fatalf("scanned %d files under %s; want the whole repository", scanned, root)
	}
}

func scannable(name string) bool {
	switch filepath.Ext(name) {
	case ".md", ".go", ".sh", ".yaml", ".yml", ".json", ".tpl", ".txt":
		return true
	}
	return name == "Makefile" || name == "run" || name == "Dockerfile"
}

// The Makefile and the scripts read versions.env; none spells a version.
func TestBuildFilesReadThePins(t *testing.T) {
	if !regexp.MustCompile(`(?m)^include hack/versions/versions\.env$`).MatchString(read(t, "Makefile")) {
		t.Errorf("Makefile: want `include hack/versions/versions.env`")
	}
	for _, script := range []string{"hack/tools/build.sh", "hack/tools/build-cluster.sh", "hack/tools/build-helm.sh", "hack/cluster/sample.sh"} {
		if !strings.Contains(read(t, script), "versions/versions.env") {
			t.Errorf("%s: does not source hack/versions/versions.env", script)
		}
	}
	literal := regexp.MustCompile(`\bv?\d+\.\d+\.\d+\b`)
	for _, f := range []string{"Makefile", "hack/tools/build.sh", "hack/tools/build-cluster.sh", "hack/tools/build-helm.sh", "hack/tools/kube-module.sh",
		"hack/cluster/test.sh", "hack/cluster/demo.sh", "hack/cluster/sample.sh", ".ci/run"} {
		for _, line := range strings.Split(read(t, f), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			if v := literal.FindString(line); v != "" {
				t.Errorf("%s: %q spells version %s; take it from hack/versions/versions.env", f, strings.TrimSpace(line), v)
			}
		}
	}
}

// docs/install.md's compatibility table (written by `make test-versions`)
// has a column for each release of the matrix, and no other: a pin changed
// without running the suite again fails here.
func TestInstallTableIsTheMatrix(t *testing.T) {
	doc := read(t, "docs/install.md")
	i, j := strings.Index(doc, "<!-- compat:"), strings.Index(doc, "<!-- /compat -->")
	if i < 0 || j < i {
		t.Fatal("docs/install.md: no compatibility table")
	}
	for _, line := range strings.Split(doc[i:j], "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		var got []string
		for _, cell := range strings.Split(strings.Trim(line, "|"), "|")[1:] {
			got = append(got, strings.TrimSpace(cell))
		}
		if !slices.Equal(got, KubeMatrix()) {
			t.Errorf("docs/install.md's table tests %v; hack/versions/versions.env's matrix is %v: run make test-versions", got, KubeMatrix())
		}
		return
	}
	t.Error("docs/install.md's compatibility table is empty: run make test-versions")
}

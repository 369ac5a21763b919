// Package modules checks the repository's module boundaries: a service that
// adopts the library must not get the controller's dependencies, and a
// module that imports the API or the controller must not get what only the
// tests, the demo and the release tool need.
package modules

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBreakerModuleIsStandardLibraryOnly: the breaker module's build list
// is the module alone, and its packages import only the standard library.
func TestBreakerModuleIsStandardLibraryOnly(t *testing.T) {
	out := goList(t, "../../breaker", "-m", "all")
	if got := strings.TrimSpace(out); got != "github.com/tripswitch-dev/tripswitch/breaker" {
		t.Fatalf("breaker's module graph has more than itself:\n%s", got)
	}
	deps := goList(t, "../../breaker", "-deps", "-test", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
	for _, p := range strings.Fields(deps) {
		if !strings.HasPrefix(strings.Trim(p, "[]"), "github.com/tripswitch-dev/tripswitch/breaker") {
			t.Errorf("breaker (or its tests) imports %s, which is not the standard library", p)
		}
	}
}

// TestLimitModuleIsStandardLibraryAndTheCore: the limit module's build list
// is itself and the breaker core (whose Clock and ConfigError it shares),
// and its packages import nothing else beyond the standard library.
func TestLimitModuleIsStandardLibraryAndTheCore(t *testing.T) {
	const self = "github.com/tripswitch-dev/tripswitch/"
	out := goList(t, "../../limit", "-m", "all")
	if got := strings.Split(strings.TrimSpace(out), "\n"); len(got) != 2 || got[0] != self+"limit" || !strings.HasPrefix(got[1], self+"breaker ") {
		t.Fatalf("limit's module graph is not itself and breaker:\n%s", out)
	}
	deps := goList(t, "../../limit", "-deps", "-test", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
	for _, p := range strings.Fields(deps) {
		if !hasPrefix(strings.Trim(p, "[]"), []string{self + "limit", self + "breaker"}) {
			t.Errorf("limit (or its tests) imports %s, which is neither the standard library nor the breaker core", p)
		}
	}
}

// TestAdapterModulesCarryOnlyTheirOwnDependencies: a user of one adapter
// gets that adapter's dependency and not the others' (nor Kubernetes).
func TestAdapterModulesCarryOnlyTheirOwnDependencies(t *testing.T) {
	const self = "github.com/tripswitch-dev/tripswitch/"
	cases := []struct {
		module  string
		allowed []string // import path prefixes besides the standard library and the module itself
		banned  []string
	}{
		{"breakerhttp", []string{self + "breaker", self + "limit"}, nil},
		{"breakergrpc", nil, []string{"github.com/prometheus/", "k8s.io/", "sigs.k8s.io/", self + "breakerhttp", self + "breakerprom"}},
		{"breakerprom", nil, []string{"google.golang.org/grpc", "k8s.io/", "sigs.k8s.io/", self + "breakerhttp", self + "breakergrpc"}},
		{"accessgate", nil, []string{"github.com/prometheus/", "google.golang.org/grpc", "k8s.io/", "sigs.k8s.io/", self + "breakergrpc", self + "breakerprom", self + "accessgateprom", "github.com/tsenart/"}},
		{"accessgateprom", nil, []string{"google.golang.org/grpc", "k8s.io/", "sigs.k8s.io/", self + "breakergrpc", self + "breakerprom", "github.com/tsenart/"}},
	}
	for _, tc := range cases {
		t.Run(tc.module, func(t *testing.T) {
			deps := goList(t, "../../"+tc.module, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
			for _, p := range strings.Fields(deps) {
				if tc.allowed != nil && !hasPrefix(p, append(tc.allowed, self+tc.module)) {
					t.Errorf("%s imports %s", tc.module, p)
				}
				if hasPrefix(p, tc.banned) {
					t.Errorf("%s imports %s", tc.module, p)
				}
			}
		})
	}
}

// TestGateModuleRequiresNoPrometheus: a user of accessgate does not get
// client_golang in its module graph; the gate's collector is the
// accessgateprom module's, and only that module requires it.
func TestGateModuleRequiresNoPrometheus(t *testing.T) {
	const client = "github.com/prometheus/client_golang"
	for module, want := range map[string]bool{"accessgate": false, "accessgateprom": true, "breakerhttp": false, "breakerprom": true} {
		out := goList(t, "../../"+module, "-m", "all")
		got := false
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, client+" ") {
				got = true
			}
		}
		if got != want {
			t.Errorf("%s's module graph holds %s: %v, want %v\n%s", module, client, got, want, out)
		}
	}
}

func hasPrefix(p string, prefixes []string) bool {
	for _, x := range prefixes {
		if strings.HasPrefix(p, x) {
			return true
		}
	}
	return false
}

func goList(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v in %s: %v\n%s", args, dir, err, out)
	}
	return string(out)
}

// heavy are the modules only tests, the demo and the release tool need.
var heavy = []string{"helm.sh/", "sigs.k8s.io/kustomize/", "gonum.org/v1/plot", "github.com/prometheus/prometheus ", "github.com/google/go-containerregistry"}

// TestControllerModuleCarriesOnlyItsRuntime: the root module (the API types
// and the controller) requires none of what only the tests, the demo and
// the release tool need, so neither does a module that imports it.
func TestControllerModuleCarriesOnlyItsRuntime(t *testing.T) {
	out := goList(t, "../..", "-m", "all")
	for _, line := range strings.Split(out, "\n") {
		if hasPrefix(line+" ", heavy) {
			t.Errorf("the controller's module graph holds %s", line)
		}
	}
}

// TestImportingTheAPIIsCheap: a user's module that imports api/v1alpha1
// (replaced by this checkout) builds with a module graph free of the heavy
// modules, and the API package imports no client, server or tripswitch
// internals: the Kubernetes API machinery and controller-runtime's scheme.
func TestImportingTheAPIIsCheap(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rootMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// The user's module takes this checkout's requirements as its go.sum
	// knows them, so that the test needs no network.
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := "1.26"
	for _, l := range strings.Split(string(rootMod), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			goVersion = v
		}
	}
	write("go.mod", "module example.com/user\n\ngo "+goVersion+"\n\nrequire github.com/tripswitch-dev/tripswitch v0.0.0\n\nreplace github.com/tripswitch-dev/tripswitch => "+root+"\n")
	write("go.sum", string(sum))
	write("main.go", `package main

import (
	"fmt"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

func main() { fmt.Println(v1alpha1.GroupVersion) }
`)
	// -mod=mod lets go add the requirements the import needs; GOPROXY=off
	// keeps it to the module cache this checkout's build filled.
	t.Setenv("GOFLAGS", "-mod=mod")
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOSUMDB", "off")
	goList(t, dir, "-deps", ".")
	// The module graph as the user's go command sees it (go mod graph works
	// from the cache alone; go list -m all would look versions up).
	cmd := exec.Command("go", "mod", "graph")
	cmd.Dir = dir
	graph, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go mod graph: %v\n%s", err, graph)
	}
	if n := strings.Count(string(graph), "\n"); n < 20 {
		t.Fatalf("go mod graph has %d edges: %s", n, graph)
	}
	for _, edge := range strings.Split(string(graph), "\n") {
		for _, m := range strings.Fields(edge) {
			if hasPrefix(strings.Replace(m, "@", " ", 1)+" ", heavy) {
				t.Errorf("importing api/v1alpha1 brings %s into the module graph", m)
			}
		}
	}
	deps := goList(t, dir, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/tripswitch-dev/tripswitch/api/v1alpha1")
	banned := append([]string{"k8s.io/client-go/", "github.com/prometheus/", "github.com/tripswitch-dev/tripswitch/internal/", "k8s.io/apiserver/"}, heavy...)
	for _, p := range strings.Fields(deps) {
		if hasPrefix(p, banned) {
			t.Errorf("api/v1alpha1 imports %s", p)
		}
	}
}

// TestControllerUsesNoLibraryModule: the controller and its internal
// packages import none of the library modules (they are released apart).
func TestControllerUsesNoLibraryModule(t *testing.T) {
	const self = "github.com/tripswitch-dev/tripswitch/"
	deps := goList(t, "../..", "-deps", "-test", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
	if !strings.Contains(deps, self+"internal/controller") {
		t.Fatalf("go list found no controller packages:\n%s", deps)
	}
	for _, p := range strings.Fields(deps) {
		if hasPrefix(p, []string{self + "breaker", self + "accessgate"}) {
			t.Errorf("the controller's build imports the library package %s", p)
		}
	}
}

// TestUnpublishedLibraryBuildsWithReplaceLines: before the library modules
// are tagged, a service uses them from a checkout with one replace line per
// tripswitch module in its build, the dependencies' own replace lines
// included (they do not reach the main module), as docs/library.md says. The
// deepest chain, accessgate over breakerhttp over limit and breaker, builds so.
func TestUnpublishedLibraryBuildsWithReplaceLines(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := os.ReadFile(filepath.Join(root, "accessgate", "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	const self = "github.com/tripswitch-dev/tripswitch/"
	mod := "module example.com/user\n\ngo 1.26\n\nrequire (\n"
	for _, m := range []string{"accessgate", "breaker", "breakerhttp", "limit"} {
		mod += "\t" + self + m + " v0.0.0\n"
	}
	mod += ")\n\nreplace (\n"
	for _, m := range []string{"accessgate", "breaker", "breakerhttp", "limit"} {
		mod += "\t" + self + m + " => " + filepath.Join(root, m) + "\n"
	}
	write("go.mod", mod+")\n")
	write("go.sum", string(sum))
	write("main.go", `package main

import (
	"fmt"

	"github.com/tripswitch-dev/tripswitch/accessgate"
	"github.com/tripswitch-dev/tripswitch/breaker"
	"github.com/tripswitch-dev/tripswitch/breakerhttp"
)

func main() {
	b, _ := breaker.New("account-access", breaker.Config{})
	fmt.Println(accessgate.CodeDenied, breakerhttp.Policy{Breaker: b}.Client() != nil)
}
`)
	t.Setenv("GOFLAGS", "-mod=mod")
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOSUMDB", "off")
	cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build with the replace lines: %v\n%s", err, out)
	}
}

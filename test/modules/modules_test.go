// Package modules checks the repository's module boundaries: a service that
// adopts the library must not get the controller's dependencies.
package modules

import (
	"os/exec"
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

// TestAdapterModulesCarryOnlyTheirOwnDependencies: a user of one adapter
// gets that adapter's dependency and not the others' (nor Kubernetes).
func TestAdapterModulesCarryOnlyTheirOwnDependencies(t *testing.T) {
	const self = "github.com/tripswitch-dev/tripswitch/"
	cases := []struct {
		module  string
		allowed []string // import path prefixes besides the standard library and the module itself
		banned  []string
	}{
		{"breakerhttp", []string{self + "breaker", "golang.org/x/sync/"}, nil},
		{"breakergrpc", nil, []string{"github.com/prometheus/", "k8s.io/", "sigs.k8s.io/", self + "breakerhttp", self + "breakerprom"}},
		{"breakerprom", nil, []string{"google.golang.org/grpc", "k8s.io/", "sigs.k8s.io/", self + "breakerhttp", self + "breakergrpc"}},
		{"accessgate", nil, []string{"google.golang.org/grpc", "k8s.io/", "sigs.k8s.io/", self + "breakergrpc", "github.com/tsenart/"}},
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

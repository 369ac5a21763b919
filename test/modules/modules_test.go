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

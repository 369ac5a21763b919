// Package versions is every version the repository pins, read from
// versions.env beside it: the file the Makefile includes and the scripts
// source, so that Go, make and bash read one set of pins. Its test holds
// every other place that names a version (go.mod files, the chart, the
// docs, constants of other modules) to this file.
package versions

import (
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

//go:embed versions.env
var file string

// The pins of versions.env, by key.
var (
	// Kube is KUBE_VERSION: the Kubernetes release the control plane,
	// `make cluster` and every test are built from.
	Kube = mustGet("KUBE_VERSION")
	// Etcd is ETCD_VERSION, the etcd every control plane runs on.
	Etcd = mustGet("ETCD_VERSION")
	// Containerd is CONTAINERD_VERSION, the runtime of `make cluster`.
	Containerd = mustGet("CONTAINERD_VERSION")
	// CoreDNS is COREDNS_VERSION, the cluster DNS of `make cluster`.
	CoreDNS = mustGet("COREDNS_VERSION")
	// Pause is PAUSE_VERSION, the sandbox image's tag (no leading v).
	Pause = mustGet("PAUSE_VERSION")
	// Helm is HELM_VERSION, of helm.sh/helm/v4: the SDK and the CLI.
	Helm = mustGet("HELM_VERSION")
	// ControllerTools is CONTROLLER_TOOLS_VERSION, controller-gen's module.
	ControllerTools = mustGet("CONTROLLER_TOOLS_VERSION")
	// Staticcheck is STATICCHECK_VERSION, honnef.co/go/tools.
	Staticcheck = mustGet("STATICCHECK_VERSION")
)

// Pins returns every KEY=value of versions.env.
func Pins() map[string]string {
	pins, err := Parse(file)
	if err != nil {
		panic(fmt.Sprintf("hack/versions/versions.env: %v", err))
	}
	return pins
}

// KubeMatrix is the compatibility suite's Kubernetes releases, oldest first:
// KUBE_OLDER_VERSIONS, then Kube.
func KubeMatrix() []string {
	return append(strings.Split(mustGet("KUBE_OLDER_VERSIONS"), ","), Kube)
}

// KubeOldest is the oldest Kubernetes release the project supports and tests.
func KubeOldest() string { return KubeMatrix()[0] }

var kubeRelease = regexp.MustCompile(`^v1\.(\d+)\.(\d+)$`)

// Minor is the minor number of a Kubernetes release vX.Y.Z (37 for v1.37.2).
func Minor(release string) (int, error) {
	m := kubeRelease.FindStringSubmatch(release)
	if m == nil {
		return 0, fmt.Errorf("kubernetes release %q: want v1.<minor>.<patch>", release)
	}
	return strconv.Atoi(m[1])
}

// Staging is the version of Kubernetes' staging modules (k8s.io/api,
// k8s.io/client-go, ...) published with a release: v0.37.2 for v1.37.2.
func Staging(release string) (string, error) {
	if !kubeRelease.MatchString(release) {
		return "", fmt.Errorf("kubernetes release %q: want v1.<minor>.<patch>", release)
	}
	return "v0." + strings.TrimPrefix(release, "v1."), nil
}

var key = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// Parse reads KEY=value lines, blank lines and # comments. A value must not
// hold spaces, quotes or $, which make and bash would read differently.
func Parse(text string) (map[string]string, error) {
	pins := map[string]string{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d: %q is not KEY=value", i+1, line)
		case !key.MatchString(k):
			return nil, fmt.Errorf("line %d: key %q: want upper case letters, digits and _", i+1, k)
		case v == "" || strings.ContainsAny(v, " \t\"'$#\\`"):
			return nil, fmt.Errorf("line %d: %s=%q: want a value without spaces, quotes, $, # or \\", i+1, k, v)
		}
		if _, dup := pins[k]; dup {
			return nil, fmt.Errorf("line %d: %s set twice", i+1, k)
		}
		pins[k] = v
	}
	return pins, nil
}

func mustGet(k string) string {
	v, ok := Pins()[k]
	if !ok {
		panic(fmt.Sprintf("hack/versions/versions.env: no %s", k))
	}
	return v
}

// Package versions holds what the compatibility suite (`make test-versions`,
// hack/compat) checks beyond the repository's own tests: what tripswitch
// says, and that nothing else breaks, on a Kubernetes release that lacks
// something it can use. The suite runs it, with the existing tests it
// selects, against each release's control plane (KUBEBUILDER_ASSETS).
package versions

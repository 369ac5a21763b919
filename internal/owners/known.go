package owners

import (
	"strings"

	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// Kind is what kind of writer a field manager is.
type Kind int

// Kinds of writers.
const (
	// Unknown: judged by how and when it writes (see Judge).
	Unknown Kind = iota
	// Tool: a person's tool; it writes when someone runs it.
	Tool
	// Controller: it reconciles the configuration whenever it differs
	// from what it wants.
	Controller
	// GitOps: it applies manifests; it puts back what drifted only when
	// set to (Argo CD's selfHeal), so it counts as a controller only
	// when it came back to write after the configuration was created.
	GitOps
)

// Project is a known writer of webhook configurations: who it is, how it
// writes, and its own way to fail open. Every entry comes from the
// project's own source or documentation (docs/owners.md cites them).
type Project struct {
	Name string
	Kind Kind
	// Puts says what the project's writes put back over tripswitch's open;
	// the zero value: only what its managedFields show (see Judge).
	Puts Reverts
	// Writes says how it writes, for a message.
	Writes string
	// FailOpen is the project's own setting that makes its webhook fail
	// open, "" when it has none (or needs none).
	FailOpen string
}

// Reverts is what a writer puts back over an open circuit.
type Reverts struct {
	// Policy: the failurePolicy, so openAction Ignore (and a half-open
	// trial, which sets Ignore for its sample) is undone.
	Policy bool
	// Condition: tripswitch's matchCondition, so openAction Bypass is undone.
	Condition bool
}

// fields are the fields of the webhook entry r puts back, as the open
// actions' table names them (circuit.Changes).
func (r Reverts) fields() circuit.Field {
	var f circuit.Field
	if r.Policy {
		f |= circuit.FieldFailurePolicy
	}
	if r.Condition {
		f |= circuit.FieldMatchCondition
	}
	return f
}

// known are the projects told by their field manager's name. Names are
// compared in lower case.
var known = []struct {
	match func(manager string) bool
	Project
}{
	{prefix("kyverno"), Project{Name: "Kyverno", Kind: Controller,
		Puts:   Reverts{Policy: true, Condition: true},
		Writes: "rebuilds its whole configurations from its policies and writes them with Update, annotations, failurePolicy and matchConditions included",
		FailOpen: "per policy spec.failurePolicy: Ignore (Kyverno puts those policies in its -ignore webhooks), or for all of them Kyverno's --forceFailurePolicyIgnore flag " +
			"(Helm: features.forceFailurePolicyIgnore.enabled=true); --autoUpdateWebhooks=false (Helm: features.autoUpdateWebhooks.enabled=false) stops it rewriting " +
			"the configurations, and from following new policies"}},
	{or(prefix("pilot-discovery"), prefix("istio")), Project{Name: "Istio", Kind: Controller,
		Puts:     Reverts{Policy: true},
		Writes:   "sets failurePolicy Fail (and the caBundle) on every webhook of its validating configurations with Update once its validation is ready, keeping what else the object holds",
		FailOpen: "Helm value base.validationFailurePolicy (base and istiod charts); global.configValidation=false removes the validating webhook"}},
	{contains("gatekeeper"), Project{Name: "Gatekeeper", Kind: Controller,
		Writes:   "injects its caBundle with Update of the object it read",
		FailOpen: "Helm values validatingWebhookFailurePolicy (its default is Ignore) and mutatingWebhookFailurePolicy"}},
	{or(prefix("cert-manager-cainjector"), prefix("cainjector")), Project{Name: "cert-manager", Kind: Controller,
		Writes: "server-side applies the caBundle alone"}},
	{or(prefix("kustomize-controller"), prefix("helm-controller")), Project{Name: "Flux", Kind: Controller,
		Puts:     Reverts{Policy: true},
		Writes:   "server-side applies its manifests again at every interval, taking back the fields they set",
		FailOpen: "the failurePolicy in the manifests Flux applies"}},
	{prefix("argocd"), Project{Name: "Argo CD", Kind: GitOps,
		Writes:   "applies its manifests on sync, and again whenever they drift only with selfHeal",
		FailOpen: "the failurePolicy in the manifests Argo CD applies, or ignoreDifferences on it with RespectIgnoreDifferences=true"}},
	{or(prefix("kubectl"), exact("helm"), exact("before-first-apply")), Project{Name: "a person's tool", Kind: Tool}},
}

// Known returns the project a field manager belongs to, if it is a known one.
func Known(manager string) (Project, bool) {
	m := strings.ToLower(manager)
	for _, k := range known {
		if k.match(m) {
			return k.Project, true
		}
	}
	return Project{}, false
}

func prefix(p string) func(string) bool {
	return func(m string) bool { return strings.HasPrefix(m, p) }
}
func contains(s string) func(string) bool {
	return func(m string) bool { return strings.Contains(m, s) }
}
func exact(s string) func(string) bool { return func(m string) bool { return m == s } }

func or(fs ...func(string) bool) func(string) bool {
	return func(m string) bool {
		for _, f := range fs {
			if f(m) {
				return true
			}
		}
		return false
	}
}

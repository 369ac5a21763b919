package policy

import (
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// ApprovedIn reads the names of kind's configurations that rules allow to
// get, sorted; all is true when a rule allows every name.
func ApprovedIn(rules []authorizationv1.ResourceRule, kind v1alpha1.TargetKind) (names []string, all bool) {
	resource := resourceOf(kind)
	for _, rule := range rules {
		if !matches(rule.Verbs, "get") || !matches(rule.APIGroups, admissionregistrationv1.GroupName) || !matches(rule.Resources, resource) {
			continue
		}
		if len(rule.ResourceNames) == 0 {
			return nil, true
		}
		names = append(names, rule.ResourceNames...)
	}
	slices.Sort(names)
	return slices.Compact(names), false
}

func matches(values []string, want string) bool {
	return slices.Contains(values, want) || slices.Contains(values, "*")
}

func resourceOf(kind v1alpha1.TargetKind) string {
	return strings.ToLower(string(kind)) + "s"
}

// NotApprovedMessage says that the controller may not read t's
// configuration. names are the approved names of its kind; unsure is set
// when RBAC's rules could not say (a rule for every name, or an incomplete
// review), err when they could not be read.
func NotApprovedMessage(t v1alpha1.Target, names []string, unsure bool, err error) string {
	approve := approveHint(t)
	switch {
	case err != nil:
		return fmt.Sprintf("tripswitch may not read %s %s (and could not list the approved names: %v). If the name is right, %s", t.Kind, t.ConfigurationName, err, approve)
	case slices.Contains(names, t.ConfigurationName):
		return fmt.Sprintf("tripswitch may not read %s %s, although its RBAC rules name it (another authorizer or a rule for another verb may deny it). "+
			"Check the rule: %s", t.Kind, t.ConfigurationName, approve)
	case unsure:
		return fmt.Sprintf("tripswitch may not read %s %s: RBAC does not approve it. %s", t.Kind, t.ConfigurationName, capitalize(approve))
	}
	listed := "none is approved"
	if len(names) > 0 {
		listed = "the approved ones are " + strings.Join(names, ", ")
	}
	msg := fmt.Sprintf("tripswitch may not read %s %s: it is not an approved configuration name (%s). ", t.Kind, t.ConfigurationName, listed)
	if near := NearestName(t.ConfigurationName, names); near != "" {
		msg += fmt.Sprintf("Did you mean %s? spec.target.configurationName is immutable: delete this breaker and create it again with configurationName %s. ", near, near)
	} else {
		msg += "Check spec.target.configurationName (`tripswitch check` says whether the configuration exists). "
	}
	return msg + "If " + t.ConfigurationName + " is the configuration you mean, " + approve
}

// approveHint says how to approve t's configuration, for each way of
// installing tripswitch.
func approveHint(t v1alpha1.Target) string {
	return fmt.Sprintf("approve it with Helm (--set 'approvedWebhookConfigurations.%s={...,%s}') or, with kustomize, add %s to resourceNames in "+
		"config/rbac/webhook_configurations.yaml", circuit.ShortKind(t.Kind), t.ConfigurationName, t.ConfigurationName)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// NearestName is the name among names closest to name by edit distance, if
// one is close enough to be a typo of it (at most a third of its letters
// differ, and at most 3); empty otherwise.
func NearestName(name string, names []string) string {
	best, bestD := "", 0
	for _, n := range names {
		if d := editDistance(name, n); d > 0 && d <= 3 && 3*d <= len(name) && (best == "" || d < bestD) {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes
// (configuration names are DNS subdomains: ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

package webhookchain

import (
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

type A = admissionregistrationv1.OperationType

func rule(ops []A, groups, resources []string, scope *admissionregistrationv1.ScopeType) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{Operations: ops,
		Rule: admissionregistrationv1.Rule{APIGroups: groups, APIVersions: []string{"v1"}, Resources: resources, Scope: scope}}
}

var (
	create  = []A{admissionregistrationv1.Create}
	update  = []A{admissionregistrationv1.Update}
	all     = []A{admissionregistrationv1.OperationAll}
	core    = []string{""}
	apps    = []string{"apps"}
	anyG    = []string{"*"}
	ns      = ptr.To(admissionregistrationv1.NamespacedScope)
	cluster = ptr.To(admissionregistrationv1.ClusterScope)
	anyS    = ptr.To(admissionregistrationv1.AllScopes)
)

func TestOverlaps(t *testing.T) {
	pods := rule(create, core, []string{"pods"}, nil)
	for _, tc := range []struct {
		name string
		a, b admissionregistrationv1.RuleWithOperations
		want bool
	}{
		{"same rule", pods, pods, true},
		{"other operation", pods, rule(update, core, []string{"pods"}, nil), false},
		{"every operation", pods, rule(all, core, []string{"pods"}, nil), true},
		{"other group", pods, rule(create, apps, []string{"pods"}, nil), false},
		{"any group", pods, rule(create, anyG, []string{"pods"}, nil), true},
		{"other resource", pods, rule(create, core, []string{"configmaps"}, nil), false},
		{"every resource", pods, rule(create, core, []string{"*"}, nil), true},
		{"a subresource is not the resource", pods, rule(create, core, []string{"pods/exec"}, nil), false},
		{"* has no subresources", rule(create, core, []string{"pods/exec"}, nil), rule(create, core, []string{"*"}, nil), false},
		{"*/* is everything", rule(create, core, []string{"pods/exec"}, nil), rule(create, core, []string{"*/*"}, nil), true},
		{"pods/* and pods/exec", rule(create, core, []string{"pods/*"}, nil), rule(create, core, []string{"pods/exec"}, nil), true},
		{"*/status and pods/status", rule(create, core, []string{"*/status"}, nil), rule(create, core, []string{"pods/status"}, nil), true},
		{"*/status and pods/exec", rule(create, core, []string{"*/status"}, nil), rule(create, core, []string{"pods/exec"}, nil), false},
		{"scopes apart", rule(create, core, []string{"*"}, ns), rule(create, core, []string{"*"}, cluster), false},
		{"any scope", rule(create, core, []string{"*"}, anyS), rule(create, core, []string{"*"}, cluster), true},
		{"versions ignored (matchPolicy Equivalent)", pods, func() admissionregistrationv1.RuleWithOperations {
			r := pods
			r.APIVersions = []string{"v2"}
			return r
		}(), true},
	} {
		if got := Overlaps([]admissionregistrationv1.RuleWithOperations{tc.a}, []admissionregistrationv1.RuleWithOperations{tc.b}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		if got := Overlaps([]admissionregistrationv1.RuleWithOperations{tc.b}, []admissionregistrationv1.RuleWithOperations{tc.a}); got != tc.want {
			t.Errorf("%s (swapped): %v, want %v", tc.name, got, tc.want)
		}
	}
	if Overlaps(nil, []admissionregistrationv1.RuleWithOperations{pods}) {
		t.Error("a webhook without rules matches nothing")
	}
}

func hook(cfg, name string, kind v1alpha1.TargetKind, timeout int32, resources ...string) Hook {
	w := circuit.Webhook{Configuration: cfg, Name: name, Kind: kind, Rules: []admissionregistrationv1.RuleWithOperations{rule(create, core, resources, nil)}}
	if timeout > 0 {
		w.TimeoutSeconds = ptr.To(timeout)
	}
	return Hook{Webhook: w}
}

func TestJudge(t *testing.T) {
	const mut, val = v1alpha1.MutatingWebhookConfiguration, v1alpha1.ValidatingWebhookConfiguration
	target := hook("t", "target.example.com", mut, 20, "pods").Webhook
	reinvoked := hook("r", "r.example.com", mut, 15, "pods")
	reinvoked.Reinvoked = true
	for _, tc := range []struct {
		name    string
		target  circuit.Webhook
		all     []Hook
		dl      time.Duration
		worst   time.Duration
		exceeds bool
		chain   int
	}{
		{"alone", target, nil, 0, 20 * time.Second, false, 1},
		{"target listed too (counted once)", target, []Hook{{Webhook: target}}, 0, 20 * time.Second, false, 1},
		{"mutating in series", target, []Hook{hook("a", "a.example.com", mut, 30, "pods"), hook("b", "b.example.com", mut, 0, "pods")}, 0, 60 * time.Second, false, 3},
		{"one second more exceeds", target, []Hook{hook("a", "a.example.com", mut, 30, "pods"), hook("b", "b.example.com", mut, 11, "pods")}, 0, 61 * time.Second, true, 3},
		{"validating in parallel: the longest counts", target, []Hook{hook("v1", "v1.example.com", val, 30, "pods"), hook("v2", "v2.example.com", val, 25, "*")}, 0, 50 * time.Second, false, 3},
		{"no overlap, not counted", target, []Hook{hook("c", "c.example.com", mut, 30, "configmaps"), hook("v", "v.example.com", val, 30, "secrets")}, 0, 20 * time.Second, false, 1},
		{"reinvoked counts twice", target, []Hook{reinvoked}, 0, 50 * time.Second, false, 2},
		{"a shorter deadline", target, []Hook{hook("v", "v.example.com", val, 15, "pods")}, 30 * time.Second, 35 * time.Second, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Judge(tc.target, tc.all, tc.dl)
			if v.Worst != tc.worst || v.Exceeds != tc.exceeds || v.Mutating+v.Validating != tc.chain {
				t.Fatalf("worst %v exceeds %v chain %v+%v, want %v %v %d", v.Worst, v.Exceeds, v.Mutating, v.Validating, tc.worst, tc.exceeds, tc.chain)
			}
			c := v.Condition(3)
			if c.Type != v1alpha1.ConditionPreflight || c.ObservedGeneration != 3 ||
				tc.exceeds != (c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonChainExceedsDeadline) {
				t.Fatalf("condition %+v", c)
			}
			if tc.exceeds && !strings.Contains(c.Message, "longer than the API server's request deadline") {
				t.Fatalf("message %q", c.Message)
			}
		})
	}
}

// TestMessageIsBounded: a chain of 1,000 overlapping webhooks names the six
// longest, the longest first, and counts the rest (a condition's message
// longer than 32 KiB makes the whole status write fail).
func TestMessageIsBounded(t *testing.T) {
	const mut = v1alpha1.MutatingWebhookConfiguration
	target := hook("t", "target.example.com", mut, 1, "pods").Webhook
	var watched []Hook
	for i := range 1000 {
		watched = append(watched, hook(fmt.Sprintf("cfg-%03d", i/4), fmt.Sprintf("w%d.example.com", i%4), mut, int32(1+i%30), "pods"))
	}
	v := JudgeAmong(target, nil, watched, 0)
	if !v.Exceeds || v.Mutating != 1001 || len(v.Message) > 1024 {
		t.Fatalf("%d webhooks, message of %d bytes: %s", v.Mutating, len(v.Message), v.Message)
	}
	// The longest are 30 s, first met first; the target (1 s) is not named.
	if !strings.HasSuffix(v.Message, ": cfg-007/w1.example.com 30s, cfg-014/w3.example.com 30s, cfg-022/w1.example.com 30s, cfg-029/w3.example.com 30s, cfg-037/w1.example.com 30s, cfg-044/w3.example.com 30s, and 995 more") {
		t.Fatalf("message %s", v.Message)
	}
}

// BenchmarkJudgeAmong1000: what one breaker's preflight costs when the
// watched configurations hold 1,000 webhooks that all overlap (hack/scale's
// layout), judged again once per gathering of them.
func BenchmarkJudgeAmong1000(b *testing.B) {
	const mut = v1alpha1.MutatingWebhookConfiguration
	target := hook("t", "target.example.com", mut, 1, "pods").Webhook
	var watched []Hook
	for i := range 1000 {
		watched = append(watched, hook(fmt.Sprintf("cfg-%03d", i/4), fmt.Sprintf("w%d.example.com", i%4), mut, 1, "pods"))
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = JudgeAmong(target, nil, watched, 0)
	}
}

// TestSameChains: two gatherings differ for the chain only in what it is
// judged on; a circuit opening (failurePolicy, matchConditions) is not.
func TestSameChains(t *testing.T) {
	const mut, val = v1alpha1.MutatingWebhookConfiguration, v1alpha1.ValidatingWebhookConfiguration
	gather := func(edit func([]Hook)) []Hook {
		hs := []Hook{hook("b", "b.example.com", val, 5, "pods"), hook("a", "a.example.com", mut, 5, "pods"), hook("a", "c.example.com", mut, 0, "pods")}
		if edit != nil {
			edit(hs)
		}
		Sort(hs)
		return hs
	}
	base := gather(nil)
	if base[0].Name != "a.example.com" || base[1].Name != "c.example.com" || base[2].Kind != val {
		t.Fatalf("sorted %v", base)
	}
	for name, tc := range map[string]struct {
		edit func([]Hook)
		same bool
	}{
		"opened: failurePolicy and a matchCondition": {func(hs []Hook) {
			hs[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			hs[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "tripswitch.dev/circuit-open", Expression: "false"}}
		}, true},
		"timeout unset is the default 10s": {func(hs []Hook) { hs[2].TimeoutSeconds = ptr.To(int32(10)) }, true},
		"a timeout":                        {func(hs []Hook) { hs[0].TimeoutSeconds = ptr.To(int32(6)) }, false},
		"a rule": {func(hs []Hook) {
			hs[1].Rules = []admissionregistrationv1.RuleWithOperations{rule(create, core, []string{"secrets"}, nil)}
		}, false},
		"reinvocation":   {func(hs []Hook) { hs[1].Reinvoked = true }, false},
		"a webhook gone": {func(hs []Hook) { hs[0].Name = "renamed.example.com" }, false},
	} {
		if got := SameChains(base, gather(tc.edit)); got != tc.same {
			t.Errorf("%s: same %v, want %v", name, got, tc.same)
		}
	}
	if SameChains(base, base[:2]) {
		t.Error("a shorter gathering is the same")
	}
}

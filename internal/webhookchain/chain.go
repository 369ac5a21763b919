// Package webhookchain says whether the admission webhooks that can match
// the same request as a breaker's target can, with every circuit closed,
// take longer than the API server's request deadline: the preflight a
// breaker's Preflight condition reports. Judge is pure; Read lists what it
// judges.
//
// How the API server calls webhooks decides the sum: mutating webhooks run
// one after another (and one with reinvocationPolicy IfNeeded may run a
// second time), validating webhooks run in parallel. So the worst case is
// the sum of the mutating timeouts, each reinvocable one counted twice, plus
// the longest validating timeout.
//
// Overlap is judged on rules alone (operations, API groups, resources and
// subresources, scope): selectors and matchConditions may keep two webhooks
// apart in practice, and versions are ignored because matchPolicy
// Equivalent (the default) matches a request in every version of the
// resource. So a chain is reported when it can exceed the deadline, never
// missed when it can.
package webhookchain

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// DefaultRequestDeadline is kube-apiserver's --request-timeout default.
const DefaultRequestDeadline = 60 * time.Second

// defaultTimeout is admissionregistration/v1's timeoutSeconds default.
const defaultTimeout = 10 * time.Second

// Hook is one webhook as the chain needs it.
type Hook struct {
	circuit.Webhook
	// Reinvoked: a mutating webhook with reinvocationPolicy IfNeeded, which
	// the API server may call a second time on one request.
	Reinvoked bool
}

// Verdict is the worst case of one target's chain.
type Verdict struct {
	// Exceeds: Worst is longer than Deadline.
	Exceeds bool
	// Worst is the longest the webhooks can take on one request.
	Worst time.Duration
	// Deadline is the API server's request deadline judged against.
	Deadline time.Duration
	// Mutating and Validating count the webhooks of each kind in the chain,
	// the target included.
	Mutating, Validating int
	// Message explains the verdict for the Preflight condition. It names
	// at most MessageWebhooks of the chain, the longest first, so that it
	// stays short however many webhooks match (a condition's message is
	// bounded, and a status that cannot be written reports nothing).
	Message string
}

// MessageWebhooks is how many webhooks a verdict's message names.
const MessageWebhooks = 6

// Timeout is the webhook's configured timeout (v1's default when unset).
func Timeout(w circuit.Webhook) time.Duration {
	if w.TimeoutSeconds == nil || *w.TimeoutSeconds <= 0 {
		return defaultTimeout
	}
	return time.Duration(*w.TimeoutSeconds) * time.Second
}

// Judge returns the worst case of every webhook in all whose rules overlap
// the target's (the target is included whether or not all holds it),
// against deadline (DefaultRequestDeadline when 0).
func Judge(target circuit.Webhook, all []Hook, deadline time.Duration) Verdict {
	return JudgeAmong(target, all, nil, deadline)
}

// JudgeAmong is Judge on the webhooks of own (the target's configuration,
// as read) and of watched (other configurations; any entry of the target's
// configuration there is skipped, so a watch that lags its read counts
// nothing twice).
func JudgeAmong(target circuit.Webhook, own, watched []Hook, deadline time.Duration) Verdict {
	if deadline <= 0 {
		deadline = DefaultRequestDeadline
	}
	v := Verdict{Deadline: deadline}
	mine := func(w circuit.Webhook) bool { return w.Configuration == target.Configuration && w.Kind == target.Kind }
	var serial, parallel time.Duration
	var top topHooks
	add := func(h Hook) {
		t := Timeout(h.Webhook)
		if h.Mutating() {
			v.Mutating++
			if h.Reinvoked {
				t *= 2
			}
			serial += t
		} else {
			v.Validating++
			parallel = max(parallel, t)
		}
		top.add(h, t)
	}
	isTarget := func(h Hook) bool { return h.Name == target.Name && mine(h.Webhook) }
	self := Hook{Webhook: target}
find:
	for _, list := range [2][]Hook{own, watched} {
		for _, h := range list {
			if isTarget(h) {
				self.Reinvoked = h.Reinvoked
				break find
			}
		}
	}
	add(self)
	for _, h := range own {
		if !isTarget(h) && Overlaps(target.Rules, h.Rules) {
			add(h)
		}
	}
	for _, h := range watched {
		if isTarget(h) || (len(own) > 0 && mine(h.Webhook)) {
			continue // the target's configuration counts as read
		}
		if Overlaps(target.Rules, h.Rules) {
			add(h)
		}
	}
	v.Worst = serial + parallel
	v.Exceeds = v.Worst > deadline
	n := v.Mutating + v.Validating
	if v.Exceeds {
		v.Message = fmt.Sprintf("with every circuit closed, the %d webhooks that can match the same requests can take %s (mutating in series, validating in parallel), longer than the API server's request deadline of %s: %s",
			n, v.Worst, deadline, top.String(n))
	} else {
		v.Message = fmt.Sprintf("the %d webhooks that can match the same requests take at most %s, within the API server's request deadline of %s", n, v.Worst, deadline)
	}
	return v
}

// topHooks keeps the MessageWebhooks longest webhooks of a chain, in the
// order met among equals.
type topHooks struct {
	n    int
	list [MessageWebhooks]struct {
		h Hook
		t time.Duration
	}
}

func (x *topHooks) add(h Hook, t time.Duration) {
	i := x.n
	if i == MessageWebhooks {
		if t <= x.list[i-1].t {
			return
		}
		i--
	} else {
		x.n++
	}
	for ; i > 0 && x.list[i-1].t < t; i-- {
		x.list[i] = x.list[i-1]
	}
	x.list[i].h, x.list[i].t = h, t
}

// String names the kept webhooks, and how many more the chain has of all.
func (x *topHooks) String(all int) string {
	parts := make([]string, 0, x.n+1)
	for _, e := range x.list[:x.n] {
		id := e.h.Configuration + "/" + e.h.Name
		if e.h.Mutating() && e.h.Reinvoked {
			id += " (reinvoked)"
		}
		parts = append(parts, fmt.Sprintf("%s %s", id, e.t))
	}
	if more := all - x.n; more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(parts, ", ")
}

// Condition is the verdict as the breaker's Preflight condition: True
// within the deadline, False past it. It never makes Ready False.
func (v Verdict) Condition(generation int64) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionPreflight, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonWithinDeadline,
		Message: v.Message, ObservedGeneration: generation}
	if v.Exceeds {
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonChainExceedsDeadline
	}
	return c
}

// Overlaps reports whether some request can match a rule of a and a rule of b.
func Overlaps(a, b []admissionregistrationv1.RuleWithOperations) bool {
	for _, x := range a {
		for _, y := range b {
			if ruleOverlaps(x, y) {
				return true
			}
		}
	}
	return false
}

func ruleOverlaps(a, b admissionregistrationv1.RuleWithOperations) bool {
	ops := func(o []admissionregistrationv1.OperationType) []string {
		s := make([]string, len(o))
		for i, x := range o {
			s[i] = string(x)
		}
		return s
	}
	return intersects(ops(a.Operations), ops(b.Operations)) &&
		intersects(a.APIGroups, b.APIGroups) &&
		resourcesOverlap(a.Resources, b.Resources) &&
		scopesOverlap(a.Scope, b.Scope)
}

// intersects: some value is in both lists, "*" matching any.
func intersects(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == "*" || y == "*" || x == y {
				return true
			}
		}
	}
	return false
}

func resourcesOverlap(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if resourceOverlaps(x, y) {
				return true
			}
		}
	}
	return false
}

// resourceOverlaps compares resource[/subresource] patterns as the API
// server matches them: "*" is every resource but no subresource, "*/*"
// everything, "pods/*" every subresource of pods, "*/status" the status of
// every resource.
func resourceOverlaps(a, b string) bool {
	ar, as, aSub := strings.Cut(a, "/")
	br, bs, bSub := strings.Cut(b, "/")
	if ar != "*" && br != "*" && ar != br {
		return false
	}
	if aSub != bSub {
		return false
	}
	return !aSub || as == "*" || bs == "*" || as == bs
}

func scopesOverlap(a, b *admissionregistrationv1.ScopeType) bool {
	if a == nil || b == nil || *a == admissionregistrationv1.AllScopes || *b == admissionregistrationv1.AllScopes {
		return true
	}
	return *a == *b
}

// Read lists every webhook of both kinds that r can read. The controller's
// ServiceAccount may read only the approved configurations, so there it
// sees part of the chain; `tripswitch check`, with an operator's
// credentials, sees all of it.
func Read(ctx context.Context, r client.Reader) ([]Hook, error) {
	var out []Hook
	for _, kind := range circuit.Kinds {
		cfgs, err := circuit.List(ctx, r, kind)
		if err != nil {
			return nil, fmt.Errorf("preflight: %w", err)
		}
		for _, cfg := range cfgs {
			out = append(out, Hooks(cfg)...)
		}
	}
	return out, nil
}

// Sort orders hooks by kind, configuration and name, so that two
// gatherings of the same configurations compare equal (SameChains).
func Sort(hooks []Hook) {
	slices.SortFunc(hooks, func(a, b Hook) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Configuration, b.Configuration), cmp.Compare(a.Name, b.Name))
	})
}

// SameChains reports whether two sorted gatherings hold the same webhooks
// with the same rules, timeouts and reinvocation: what a chain is judged
// on. Their policies, matchConditions and records may differ (an open
// changes only those).
func SameChains(a, b []Hook) bool {
	return slices.EqualFunc(a, b, func(x, y Hook) bool {
		return x.Kind == y.Kind && x.Configuration == y.Configuration && x.Name == y.Name && x.Reinvoked == y.Reinvoked &&
			Timeout(x.Webhook) == Timeout(y.Webhook) && equality.Semantic.DeepEqual(x.Rules, y.Rules)
	})
}

// Hooks are cfg's webhooks as the chain needs them.
func Hooks(cfg *circuit.Configuration) []Hook {
	m, _ := cfg.Object.(*admissionregistrationv1.MutatingWebhookConfiguration)
	out := make([]Hook, 0, len(cfg.Webhooks))
	for i, w := range cfg.Webhooks {
		h := Hook{Webhook: w}
		if m != nil && i < len(m.Webhooks) {
			p := m.Webhooks[i].ReinvocationPolicy
			h.Reinvoked = p != nil && *p == admissionregistrationv1.IfNeededReinvocationPolicy
		}
		out = append(out, h)
	}
	return out
}

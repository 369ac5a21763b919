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
	"context"
	"fmt"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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
	// Mutating are the mutating webhooks in the chain (target included),
	// configuration/webhook, in the order read.
	Mutating []string
	// Validating are the validating ones.
	Validating []string
	// Message explains the verdict for the Preflight condition.
	Message string
}

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
	if deadline <= 0 {
		deadline = DefaultRequestDeadline
	}
	v := Verdict{Deadline: deadline}
	same := func(w circuit.Webhook) bool {
		return w.Configuration == target.Configuration && w.Kind == target.Kind && w.Name == target.Name
	}
	chain := []Hook{{Webhook: target}}
	for _, h := range all {
		switch {
		case same(h.Webhook):
			chain[0].Reinvoked = h.Reinvoked
		case Overlaps(target.Rules, h.Rules):
			chain = append(chain, h)
		}
	}
	var serial, parallel time.Duration
	var detail []string
	for _, w := range chain {
		t := Timeout(w.Webhook)
		id := w.Configuration + "/" + w.Name
		if w.Mutating() {
			v.Mutating = append(v.Mutating, id)
			if w.Reinvoked {
				t *= 2
				id += " (reinvoked)"
			}
			serial += t
		} else {
			v.Validating = append(v.Validating, id)
			parallel = max(parallel, t)
		}
		detail = append(detail, fmt.Sprintf("%s %s", id, t))
	}
	v.Worst = serial + parallel
	v.Exceeds = v.Worst > deadline
	if v.Exceeds {
		v.Message = fmt.Sprintf("with every circuit closed, the %d webhooks that can match the same requests can take %s (mutating in series, validating in parallel), longer than the API server's request deadline of %s: %s",
			len(chain), v.Worst, deadline, strings.Join(detail, ", "))
	} else {
		v.Message = fmt.Sprintf("the %d webhooks that can match the same requests take at most %s, within the API server's request deadline of %s", len(chain), v.Worst, deadline)
	}
	return v
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
			m, _ := cfg.Object.(*admissionregistrationv1.MutatingWebhookConfiguration)
			for i, w := range cfg.Webhooks {
				h := Hook{Webhook: w}
				if m != nil && i < len(m.Webhooks) {
					p := m.Webhooks[i].ReinvocationPolicy
					h.Reinvoked = p != nil && *p == admissionregistrationv1.IfNeededReinvocationPolicy
				}
				out = append(out, h)
			}
		}
	}
	return out, nil
}

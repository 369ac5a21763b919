package check

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/owners"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/webhookchain"
)

// Result is how one check came out.
type Result string

// Results, from good to bad.
const (
	OK      Result = "ok"
	Warning Result = "warning"
	Problem Result = "problem"
)

// The checks, in the order they are reported.
const (
	CheckTarget     = "target"
	CheckApproval   = "approval"
	CheckConflict   = "conflict"
	CheckFailOpen   = "failOpen"
	CheckProbe      = "probe"
	CheckPermission = "permissions"
	// CheckDeadline: the webhooks that can match the same requests fit the
	// API server's request deadline with every circuit closed (a warning at
	// worst: the breaker still works).
	CheckDeadline = "deadline"
	// CheckOwner: no other controller undoes what the breaker's open
	// changes (owners.Judge, from managedFields and owner references).
	CheckOwner = "owner"
)

// Finding is the outcome of one check of one breaker.
type Finding struct {
	Check   string `json:"check"`
	Result  Result `json:"result"`
	Message string `json:"message"`
}

// Breaker is every finding about one breaker.
type Breaker struct {
	Name string `json:"name"`
	// Target is KIND/CONFIGURATION/WEBHOOK.
	Target   string    `json:"target"`
	Findings []Finding `json:"findings"`
}

// Worst is the worst result among the breaker's findings.
func (b Breaker) Worst() Result {
	worst := OK
	for _, f := range b.Findings {
		if rank(f.Result) > rank(worst) {
			worst = f.Result
		}
	}
	return worst
}

func rank(r Result) int { return slices.Index([]Result{OK, Warning, Problem}, r) }

// Report is the outcome of a check.
type Report struct {
	// Controller is the user whose permissions were checked.
	Controller string    `json:"controller"`
	Breakers   []Breaker `json:"breakers"`
	Problems   int       `json:"problems"`
	Warnings   int       `json:"warnings"`
}

// Options configure Run.
type Options struct {
	// Client has the operator's credentials.
	Client client.Client
	// Namespace and ServiceAccount name the controller's ServiceAccount,
	// whose permissions are checked. Defaults: tripswitch-system, tripswitch.
	Namespace, ServiceAccount string
	// Breakers limits the check to these names; empty: every breaker.
	Breakers []string
	// Prober, if set, also probes each webhook from where the check runs
	// (the controller's own view is read from the breaker's status either way).
	Prober probe.Prober
}

// Run checks the breakers. An error means the check could not be made (the
// breakers could not be listed); what it found is in the Report.
func Run(ctx context.Context, opts Options) (Report, error) {
	if opts.Namespace == "" {
		opts.Namespace = "tripswitch-system"
	}
	if opts.ServiceAccount == "" {
		opts.ServiceAccount = "tripswitch"
	}
	sa := serviceAccount{namespace: opts.Namespace, name: opts.ServiceAccount}
	rep := Report{Controller: sa.user(), Breakers: []Breaker{}}
	var list v1alpha1.WebhookCircuitBreakerList
	if err := opts.Client.List(ctx, &list); err != nil {
		return rep, fmt.Errorf("list WebhookCircuitBreakers: %w", err)
	}
	for _, name := range opts.Breakers {
		if !slices.ContainsFunc(list.Items, func(b v1alpha1.WebhookCircuitBreaker) bool { return b.Name == name }) {
			return rep, fmt.Errorf("breaker %s: %w", name, apierrors.NewNotFound(v1alpha1.GroupVersion.WithResource("webhookcircuitbreakers").GroupResource(), name))
		}
	}
	c := checker{Options: opts, sa: sa, all: list.Items, names: map[v1alpha1.TargetKind][]string{}}
	for i := range list.Items {
		b := &list.Items[i]
		if len(opts.Breakers) > 0 && !slices.Contains(opts.Breakers, b.Name) {
			continue
		}
		out := c.breaker(ctx, b)
		for _, f := range out.Findings {
			switch f.Result {
			case Problem:
				rep.Problems++
			case Warning:
				rep.Warnings++
			}
		}
		rep.Breakers = append(rep.Breakers, out)
	}
	return rep, nil
}

// checker holds what one Run shares between breakers.
type checker struct {
	Options
	sa  serviceAccount
	all []v1alpha1.WebhookCircuitBreaker
	// names caches the configurations of each kind that exist.
	names map[v1alpha1.TargetKind][]string
	// hooks caches every webhook, read once per Run for the deadline check.
	hooks     []webhookchain.Hook
	hooksErr  error
	hooksRead bool
}

func (c *checker) breaker(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker) Breaker {
	t := b.Spec.Target
	out := Breaker{Name: b.Name, Target: t.Key()}
	add := func(check string, r Result, format string, args ...any) {
		out.Findings = append(out.Findings, Finding{Check: check, Result: r, Message: fmt.Sprintf(format, args...)})
	}
	spec := b.Spec.Resolve()
	cfg, exists := c.target(ctx, b, add)
	c.approval(ctx, b, exists, add)
	c.conflict(b, add)
	if cfg != nil {
		c.failOpen(b, spec, cfg, add)
		c.owner(b, spec, cfg, add)
	}
	c.probe(ctx, b, spec.Probe, cfg, add)
	c.permissions(ctx, b, spec, cfg, add)
	if cfg != nil {
		c.deadline(ctx, b, cfg, add)
	}
	return out
}

// deadline: the chain of webhooks that can match the target's requests,
// judged against the API server's default request deadline.
func (c *checker) deadline(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, cfg *circuit.Configuration, add addFunc) {
	i := cfg.Index(b.Spec.Target.WebhookName)
	if i < 0 {
		return
	}
	if !c.hooksRead {
		c.hooks, c.hooksErr = webhookchain.Read(ctx, c.Client)
		c.hooksRead = true
	}
	if c.hooksErr != nil {
		add(CheckDeadline, Warning, "could not list the webhook configurations with your credentials, so the webhooks that match the same requests are unknown: %v", c.hooksErr)
		return
	}
	v := webhookchain.Judge(cfg.Webhooks[i], c.hooks, 0)
	if v.Exceeds {
		add(CheckDeadline, Warning, "%s", v.Message)
		return
	}
	add(CheckDeadline, OK, "%s", v.Message)
}

type addFunc func(check string, r Result, format string, args ...any)

// owner: another controller that writes the webhook undoes the open
// (a problem), may undo it (a warning), or leaves it alone.
func (c *checker) owner(b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, cfg *circuit.Configuration, add addFunc) {
	if cfg.Index(b.Spec.Target.WebhookName) < 0 {
		return
	}
	v := owners.Judge(cfg.Object, b.Spec.Target.WebhookName, spec.Action, spec.HalfOpen != nil, policy.LastOwned(b))
	switch v.Reason {
	case owners.ReasonUndoesOpen:
		add(CheckOwner, Problem, "%s", v.Message)
	case owners.ReasonMayUndoOpen:
		add(CheckOwner, Warning, "%s", v.Message)
	default:
		add(CheckOwner, OK, "%s", v.Message)
	}
}

// target: the configuration exists and holds the webhook. exists is false
// only when the configuration is known to be missing.
func (c *checker) target(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, add addFunc) (cfg *circuit.Configuration, exists bool) {
	t := b.Spec.Target
	obj, err := circuit.NewObject(t.Kind)
	if err != nil {
		add(CheckTarget, Problem, "spec.target.kind %q: %v", t.Kind, err)
		return nil, true
	}
	switch err := c.Client.Get(ctx, client.ObjectKey{Name: t.ConfigurationName}, obj); {
	case apierrors.IsNotFound(err):
		msg := fmt.Sprintf("%s %s not found: spec.target.configurationName names no configuration", t.Kind, t.ConfigurationName)
		if near := policy.NearestName(t.ConfigurationName, c.existing(ctx, t.Kind)); near != "" {
			msg += fmt.Sprintf("; did you mean %s? (the target is immutable: recreate the breaker with that name)", near)
		}
		add(CheckTarget, Problem, "%s", msg)
		return nil, false
	case err != nil:
		add(CheckTarget, Warning, "could not read %s %s with your credentials: %v", t.Kind, t.ConfigurationName, err)
		return nil, true
	}
	cfg, err = circuit.View(obj)
	if err != nil {
		add(CheckTarget, Problem, "read %s %s: %v", t.Kind, t.ConfigurationName, err)
		return nil, true
	}
	if cfg.Index(t.WebhookName) < 0 {
		var names []string
		for _, w := range cfg.Webhooks {
			names = append(names, w.Name)
		}
		add(CheckTarget, Problem, "spec.target.webhookName: %s %s has no webhook %s (it has: %s)", t.Kind, t.ConfigurationName, t.WebhookName, strings.Join(names, ", "))
		return cfg, true
	}
	add(CheckTarget, OK, "webhook %s found in %s %s", t.WebhookName, t.Kind, t.ConfigurationName)
	return cfg, true
}

// existing are the names of kind's configurations, listed once per Run.
func (c *checker) existing(ctx context.Context, kind v1alpha1.TargetKind) []string {
	if names, ok := c.names[kind]; ok {
		return names
	}
	cfgs, err := circuit.List(ctx, c.Client, kind)
	var names []string
	if err == nil {
		for _, cfg := range cfgs {
			names = append(names, cfg.Object.GetName())
		}
	}
	slices.Sort(names)
	c.names[kind] = names
	return names
}

// conflict: another breaker names the same webhook.
func (c *checker) conflict(b *v1alpha1.WebhookCircuitBreaker, add addFunc) {
	key := b.Spec.Target.Key()
	var peers []v1alpha1.WebhookCircuitBreaker
	var names []string
	for _, o := range c.all {
		if o.Name != b.Name && o.Spec.Target.Key() == key {
			peers = append(peers, o)
			names = append(names, o.Name)
		}
	}
	switch winner := policy.Winner(b, peers); {
	case len(peers) == 0:
		add(CheckConflict, OK, "no other breaker names this webhook")
	case winner != "":
		add(CheckConflict, Problem, "breaker %s names the same webhook and is older, so it owns it: this breaker is Conflicted and never opens the circuit; delete one of the two", winner)
	case len(names) == 1:
		add(CheckConflict, Warning, "this breaker owns the webhook, but breaker %s names it too (it is Conflicted and never opens it); delete it", names[0])
	default:
		add(CheckConflict, Warning, "this breaker owns the webhook, but breakers %s name it too (they are Conflicted and never open it); delete them", strings.Join(names, ", "))
	}
}

// failOpen: the webhook already fails open the way the breaker would open it.
func (c *checker) failOpen(b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, cfg *circuit.Configuration, add addFunc) {
	st := circuit.Inspect(cfg, b.Spec.Target.WebhookName)
	switch {
	case st.Index < 0:
		return
	case st.Record != nil:
		add(CheckFailOpen, OK, "the circuit is open: tripswitch holds %s on it since %s (breaker %s)", st.Record.Action, st.Record.OpenedAt.UTC().Format("2006-01-02T15:04:05Z"), st.Record.Breaker)
	case st.FailsOpenWithoutRecord(spec.Action):
		add(CheckFailOpen, Problem, "%s", circuit.AlreadyOpen(spec.Action))
	default:
		add(CheckFailOpen, OK, "the webhook fails closed, so opening its circuit (%s) changes something", spec.Action)
	}
}

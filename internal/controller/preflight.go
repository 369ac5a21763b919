package controller

import (
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/webhookchain"
)

// chainRefresh is how often, at most, the webhooks of the watched
// configurations are gathered again for the preflight: in a storm every
// open changes a configuration, and the preflight, which judges timeouts
// and rules and not circuits, must not cost the decisions anything.
const chainRefresh = 5 * time.Second

// watchedHooks are the webhooks of every watched configuration, gathered
// once per change of them (at most every chainRefresh) for every breaker.
type watchedHooks struct {
	mu    sync.Mutex
	gen   uint64 // the watches' generation they were gathered at
	at    time.Time
	hooks []webhookchain.Hook // sorted by kind, configuration, name
	// id changes when a gathering differs in what a chain is judged on
	// (rules, timeouts, reinvocation): an open or close changes none of
	// it, so a storm judges no chain again.
	id uint64
}

// chainMemo is a breaker's preflight verdict and the gathering it was
// judged on.
type chainMemo struct {
	id      uint64
	verdict webhookchain.Verdict
}

// preflight judges the chain of webhooks that can match the same requests
// as the breaker's (webhookchain.JudgeAmong): its own configuration as read
// and every configuration the target watches hold, which are the approved
// ones breakers target (the controller may read no other; `tripswitch
// check`, with an operator's credentials, judges them all).
func (r *Reconciler) preflight(breaker string, cfg *circuit.Configuration, target circuit.Webhook) webhookchain.Verdict {
	id, watched := r.watched()
	if id != 0 { // 0: no watches, nothing to remember
		if m := r.memory.get(breaker).chain; m != nil && m.id == id {
			return m.verdict
		}
	}
	v := webhookchain.JudgeAmong(target, webhookchain.Hooks(cfg), watched, r.requestDeadline())
	if id != 0 {
		r.memory.update(breaker, func(m *memory) { m.chain = &chainMemo{id: id, verdict: v} })
	}
	return v
}

// watched gathers the watched configurations' webhooks again when they
// changed and chainRefresh has passed since the last gathering, and
// returns the gathering's id and webhooks (read only).
func (r *Reconciler) watched() (uint64, []webhookchain.Hook) {
	gen := r.Targets.Generation()
	if gen == 0 {
		return 0, nil
	}
	w := &r.chains
	w.mu.Lock()
	defer w.mu.Unlock()
	now := r.Clock.Now()
	if w.gen != gen && (w.gen == 0 || now.Sub(w.at) >= chainRefresh || now.Before(w.at)) {
		var hooks []webhookchain.Hook
		r.Targets.Each(func(o client.Object) {
			if c, err := circuit.View(o); err == nil {
				hooks = append(hooks, webhookchain.Hooks(c)...)
			}
		})
		webhookchain.Sort(hooks)
		if w.id == 0 || !webhookchain.SameChains(w.hooks, hooks) {
			w.id++
		}
		w.gen, w.at, w.hooks = gen, now, hooks
	}
	return w.id, w.hooks
}

func (r *Reconciler) requestDeadline() time.Duration {
	if r.RequestDeadline > 0 {
		return r.RequestDeadline
	}
	return webhookchain.DefaultRequestDeadline
}

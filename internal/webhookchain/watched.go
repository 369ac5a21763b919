package webhookchain

import (
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// Refresh is how often, at most, Watched gathers the watched
// configurations' webhooks again: in a storm every open changes a
// configuration, and a preflight, which judges timeouts and rules, not
// circuits, must not cost the decisions anything.
const Refresh = 5 * time.Second

// Source is what Watched gathers from: *targetwatch.Targets.
type Source interface {
	// Generation changes whenever a watched configuration does (0: there
	// are no watches).
	Generation() uint64
	// Each calls fn with every watched configuration listed; fn must
	// neither change nor keep it.
	Each(fn func(client.Object))
}

// Watched judges breakers' chains on the webhooks of every watched
// configuration, gathered once per change of them (at most every Refresh)
// for every breaker, and keeps each breaker's verdict until a gathering
// differs in what a chain is judged on (SameChains: an open or close
// changes none of it, so a storm judges no chain again). The zero value is
// ready to use.
type Watched struct {
	mu       sync.Mutex
	gen      uint64 // the source's generation the hooks were gathered at
	at       time.Time
	hooks    []Hook // sorted (Sort)
	id       uint64 // changes when a gathering differs (SameChains)
	verdicts map[string]memo
}

type memo struct {
	id      uint64
	verdict Verdict
}

// Judge is JudgeAmong for breaker's target, its configuration own as read
// against the gathered webhooks of src; with no watches (generation 0)
// nothing is remembered.
func (w *Watched) Judge(src Source, now time.Time, breaker string, own *circuit.Configuration, target circuit.Webhook, deadline time.Duration) Verdict {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.gather(src, now)
	if m, ok := w.verdicts[breaker]; ok && id != 0 && m.id == id {
		return m.verdict
	}
	v := JudgeAmong(target, Hooks(own), w.hooks, deadline)
	if id != 0 {
		if w.verdicts == nil {
			w.verdicts = map[string]memo{}
		}
		w.verdicts[breaker] = memo{id: id, verdict: v}
	}
	return v
}

// Forget drops what is kept of breaker.
func (w *Watched) Forget(breaker string) {
	w.mu.Lock()
	delete(w.verdicts, breaker)
	w.mu.Unlock()
}

// gather gathers src's webhooks again when they changed and Refresh has
// passed since the last gathering, and returns the gathering's id.
// Callers hold w.mu.
func (w *Watched) gather(src Source, now time.Time) uint64 {
	gen := src.Generation()
	if gen == 0 {
		w.hooks = nil
		return 0
	}
	if w.gen != gen && (w.gen == 0 || now.Sub(w.at) >= Refresh || now.Before(w.at)) {
		var hooks []Hook
		src.Each(func(o client.Object) {
			if c, err := circuit.View(o); err == nil {
				hooks = append(hooks, Hooks(c)...)
			}
		})
		Sort(hooks)
		if w.id == 0 || !SameChains(w.hooks, hooks) {
			w.id++
		}
		w.gen, w.at, w.hooks = gen, now, hooks
	}
	return w.id
}

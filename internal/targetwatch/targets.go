// Package targetwatch watches the webhook configurations breakers target,
// one watch per configuration selected by name, and serves the reconciler's
// reads of them from what the watches saw.
package targetwatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Targets watches the webhook configurations that breakers target, one
// watch per configuration, each selecting its one name with
// fieldSelector=metadata.name=<name>: RBAC with resourceNames allows exactly
// that and no cluster-wide list. An edit to a watched configuration is seen
// when it happens (onChange names the breakers that target it), and reads are
// served from what the watch saw, so a steady breaker costs the API server
// nothing. It is a controller-runtime Runnable that runs on the leader only.
type Targets struct {
	client   kubernetes.Interface
	onChange func(breaker string)

	mu       sync.Mutex
	ctx      context.Context // nil until Start
	watches  map[targetKey]*targetWatch
	breakers map[string]targetKey // breaker -> what it targets
	// gen counts changes to the set of watched configurations and to each.
	gen atomic.Uint64
	// watchTimeout, if set, replaces minWatchTimeout (tests).
	watchTimeout time.Duration
}

type targetKey struct {
	kind v1alpha1.TargetKind
	name string
}

// targetWatch is one configuration's watch: one goroutine that lists the
// configuration by name, then watches it, decoding each event as it reads
// it (follow). No reflector: client-go's costs four goroutines per watch (its
// loop, its resync timer, its stream decoder and HTTP/2's writer) where
// this costs two (this loop and HTTP/2's writer), and a thousand breakers
// on 250 configurations hold 250 watches.
type targetWatch struct {
	key   targetKey
	users map[string]bool // breakers targeting it
	stop  context.CancelFunc
	// view is what the current run saw (a run of its own per term as leader).
	view *view
}

// view is what one run of a watch saw: seen is the configuration as last
// listed or watched (nil: not listed yet); synced is set once the run's
// first list is in.
type view struct {
	seen   atomic.Pointer[snapshot]
	synced atomic.Bool
}

// snapshot is a configuration as a watch saw it: obj nil when it does not
// exist.
type snapshot struct{ obj client.Object }

func (s *snapshot) exists() bool { return s != nil && s.obj != nil }

func (s *snapshot) version() string {
	if s == nil || s.obj == nil {
		return ""
	}
	return s.obj.GetResourceVersion()
}

// New returns a watcher that reports changes through onChange.
func New(cs kubernetes.Interface, onChange func(breaker string)) *Targets {
	return &Targets{client: cs, onChange: onChange, watches: map[targetKey]*targetWatch{}, breakers: map[string]targetKey{}}
}

// Start runs the watches until ctx ends.
func (t *Targets) Start(ctx context.Context) error {
	t.mu.Lock()
	t.ctx = ctx
	for _, w := range t.watches {
		t.run(w)
	}
	t.mu.Unlock()
	<-ctx.Done()
	t.mu.Lock()
	for _, w := range t.watches {
		w.stop = nil
	}
	t.ctx = nil
	t.mu.Unlock()
	return nil
}

// NeedLeaderElection: only the leader reads targets.
func (t *Targets) NeedLeaderElection() bool { return true }

// Get returns breaker's target configuration from its watch once the watch
// has synced; ok is false until then (or when not watched), and the caller
// reads from the API server instead. found is false when the configuration
// does not exist. The object is a copy.
func (t *Targets) Get(breaker string, kind v1alpha1.TargetKind, name string) (obj client.Object, found, ok bool) {
	key := targetKey{kind, name}
	t.mu.Lock()
	t.ensure(breaker, key)
	w := t.watches[key]
	running, v := w.stop != nil, w.view
	t.mu.Unlock()
	if !running || !v.synced.Load() {
		return nil, false, false
	}
	seen := v.seen.Load()
	if !seen.exists() {
		return nil, false, true
	}
	return seen.obj.DeepCopyObject().(client.Object), true, true
}

// Listing reports whether the configuration's watch is running and has not
// listed it yet. When it has, it calls onChange for the configuration's
// breakers, whether the configuration exists or not.
func (t *Targets) Listing(kind v1alpha1.TargetKind, name string) bool {
	t.mu.Lock()
	w, ok := t.watches[targetKey{kind, name}]
	running := ok && w.stop != nil
	var v *view
	if running {
		v = w.view
	}
	t.mu.Unlock()
	return running && !v.synced.Load()
}

// Users returns the breakers that target the configuration, as far as
// their reconciles have said so through Get.
func (t *Targets) Users(kind v1alpha1.TargetKind, name string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.watches[targetKey{kind, name}]
	if !ok {
		return nil
	}
	users := make([]string, 0, len(w.users))
	for b := range w.users {
		users = append(users, b)
	}
	return users
}

// Forget stops watching for breaker; a watch no breaker needs is stopped.
func (t *Targets) Forget(breaker string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.release(breaker)
}

// ensure records that breaker targets key, starting key's watch if needed.
// Callers hold t.mu.
func (t *Targets) ensure(breaker string, key targetKey) {
	if old, ok := t.breakers[breaker]; ok && old != key {
		t.release(breaker) // the target changed (a recreated breaker)
	}
	t.breakers[breaker] = key
	w, ok := t.watches[key]
	if !ok {
		w = &targetWatch{key: key, users: map[string]bool{}}
		t.watches[key] = w
		t.run(w)
	}
	w.users[breaker] = true
}

func (t *Targets) release(breaker string) {
	key, ok := t.breakers[breaker]
	if !ok {
		return
	}
	delete(t.breakers, breaker)
	w := t.watches[key]
	delete(w.users, breaker)
	if len(w.users) == 0 {
		if w.stop != nil {
			w.stop()
		}
		delete(t.watches, key)
		t.gen.Add(1)
	}
}

// run starts w's watch if the watcher is running. Callers hold t.mu. Each
// run lists afresh: what an earlier run (an earlier term as leader) saw is
// not served until then.
func (t *Targets) run(w *targetWatch) {
	if t.ctx == nil || w.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(t.ctx)
	w.stop = cancel
	w.view = &view{}
	go t.follow(ctx, w.key, w.view, "")
}

// Generation changes whenever a watched configuration does, or one is
// watched or no longer watched: what was judged on Each stays true while
// it is unchanged.
func (t *Targets) Generation() uint64 { return t.gen.Load() }

// Each calls fn with every watched configuration that its watch has
// listed, outside the watcher's lock. The objects are the watches' own:
// fn must neither change nor keep them.
func (t *Targets) Each(fn func(client.Object)) {
	var objs []client.Object
	t.mu.Lock()
	for _, w := range t.watches {
		if w.stop == nil || !w.view.synced.Load() {
			continue
		}
		if seen := w.view.seen.Load(); seen.exists() {
			objs = append(objs, seen.obj)
		}
	}
	t.mu.Unlock()
	for _, o := range objs {
		fn(o)
	}
}

// changed tells every breaker targeting key to look again.
func (t *Targets) changed(key targetKey) {
	t.gen.Add(1)
	t.mu.Lock()
	var users []string
	if w, ok := t.watches[key]; ok {
		for b := range w.users {
			users = append(users, b)
		}
	}
	t.mu.Unlock()
	for _, b := range users {
		t.onChange(b)
	}
}

// Package targetwatch watches the webhook configurations breakers target,
// one watch per configuration selected by name, and serves the reconciler's
// reads of them from the watches' stores.
package targetwatch

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Targets watches the webhook configurations that breakers target, one
// watch per configuration, each selecting its one name with
// fieldSelector=metadata.name=<name>: RBAC with resourceNames allows exactly
// that and no cluster-wide list. An edit to a watched configuration is seen
// when it happens (onChange names the breakers that target it), and reads are
// served from the watch's store, so a steady breaker costs the API server
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
}

type targetKey struct {
	kind v1alpha1.TargetKind
	name string
}

// targetWatch is one configuration's watch: a reflector (list, then watch,
// relisting when the watch breaks) into a store of its own. No informer:
// nothing here needs its event queue and handler goroutines, which cost
// three more goroutines and a growing buffer per configuration.
type targetWatch struct {
	key   targetKey
	store *store
	users map[string]bool // breakers targeting it
	stop  context.CancelFunc
}

// store keeps one configuration as its reflector lists and watches it, and
// calls changed when it did change.
type store struct {
	cache.Store
	changed func()
	// synced is set once the reflector's first list is in.
	synced atomic.Bool
}

func (s *store) Add(obj any) error    { return s.then(s.Store.Add(obj)) }
func (s *store) Update(obj any) error { return s.then(s.Store.Update(obj)) }
func (s *store) Delete(obj any) error { return s.then(s.Store.Delete(obj)) }

func (s *store) then(err error) error {
	if err == nil {
		s.changed()
	}
	return err
}

// Replace takes a list: the first, after which changed is called whatever
// it holds (breakers wait for it: see Targets.Listing), or a relist after
// the watch broke, after which changed is called only if the list differs
// from what the store held (a relist of unchanged configurations wakes no
// breaker).
func (s *store) Replace(list []any, resourceVersion string) error {
	before := s.versions()
	if err := s.Store.Replace(list, resourceVersion); err != nil {
		return err
	}
	if first := !s.synced.Swap(true); first || !maps.Equal(before, s.versions()) {
		s.changed()
	}
	return nil
}

func (s *store) versions() map[string]string {
	out := map[string]string{}
	for _, o := range s.Store.List() {
		if m, err := meta.Accessor(o); err == nil {
			out[m.GetName()] = m.GetResourceVersion()
		}
	}
	return out
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
	running := w.stop != nil
	t.mu.Unlock()
	if !running || !w.store.synced.Load() {
		return nil, false, false
	}
	item, exists, err := w.store.GetByKey(name)
	if err != nil {
		return nil, false, false
	}
	if !exists {
		return nil, false, true
	}
	return item.(client.Object).DeepCopyObject().(client.Object), true, true
}

// Listing reports whether the configuration's watch is running and has not
// listed it yet. When it has, it calls onChange for the configuration's
// breakers, whether the configuration exists or not.
func (t *Targets) Listing(kind v1alpha1.TargetKind, name string) bool {
	t.mu.Lock()
	w, ok := t.watches[targetKey{kind, name}]
	running := ok && w.stop != nil
	t.mu.Unlock()
	return running && !w.store.synced.Load()
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
		w = &targetWatch{key: key, users: map[string]bool{},
			store: &store{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), changed: func() { t.changed(key) }}}
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

// run starts w's reflector if the watcher is running. Callers hold t.mu.
// Each run lists afresh: what an earlier run (an earlier term as leader)
// stored is not served until then.
func (t *Targets) run(w *targetWatch) {
	if t.ctx == nil || w.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(t.ctx)
	w.stop = cancel
	w.store.synced.Store(false)
	go t.reflector(w).RunWithContext(ctx)
}

// Generation changes whenever a watched configuration does, or one is
// watched or no longer watched: what was judged on Each stays true while
// it is unchanged.
func (t *Targets) Generation() uint64 { return t.gen.Load() }

// Each calls fn with every watched configuration that its watch has
// listed, outside the watcher's lock. The objects are the stores' own:
// fn must neither change nor keep them.
func (t *Targets) Each(fn func(client.Object)) {
	var objs []client.Object
	t.mu.Lock()
	for _, w := range t.watches {
		if w.stop == nil || !w.store.synced.Load() {
			continue
		}
		for _, item := range w.store.List() {
			if o, ok := item.(client.Object); ok {
				objs = append(objs, o)
			}
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

func (t *Targets) reflector(w *targetWatch) *cache.Reflector {
	key := w.key
	selector := fields.OneTermEqualSelector("metadata.name", key.name).String()
	api := t.client.AdmissionregistrationV1()
	opts := cache.ReflectorOptions{Name: "targetwatch " + string(key.kind) + "/" + key.name}
	if key.kind == v1alpha1.ValidatingWebhookConfiguration {
		c := api.ValidatingWebhookConfigurations()
		return cache.NewReflectorWithOptions(byName(selector, c.List, c.Watch), &admissionregistrationv1.ValidatingWebhookConfiguration{}, w.store, opts)
	}
	c := api.MutatingWebhookConfigurations()
	return cache.NewReflectorWithOptions(byName(selector, c.List, c.Watch), &admissionregistrationv1.MutatingWebhookConfiguration{}, w.store, opts)
}

// byName lists and watches with the field selector that picks one name.
func byName[L runtime.Object](selector string,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return watchFn(ctx, o)
		},
	}
}

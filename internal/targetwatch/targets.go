// Package targetwatch watches the webhook configurations breakers target,
// one watch per configuration selected by name, and serves the reconciler's
// reads of them from the watches' stores.
package targetwatch

import (
	"context"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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
}

type targetKey struct {
	kind v1alpha1.TargetKind
	name string
}

type targetWatch struct {
	informer cache.SharedIndexInformer
	users    map[string]bool // breakers targeting it
	stop     context.CancelFunc
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
	if !running || !w.informer.HasSynced() {
		return nil, false, false
	}
	item, exists, err := w.informer.GetStore().GetByKey(name)
	if err != nil {
		return nil, false, false
	}
	if !exists {
		return nil, false, true
	}
	return item.(client.Object).DeepCopyObject().(client.Object), true, true
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
		w = &targetWatch{informer: t.newInformer(key), users: map[string]bool{}}
		t.watches[key] = w
		_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { t.changed(key) },
			UpdateFunc: func(any, any) { t.changed(key) },
			DeleteFunc: func(any) { t.changed(key) },
		})
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
	}
}

// run starts w's informer if the watcher is running. Callers hold t.mu.
func (t *Targets) run(w *targetWatch) {
	if t.ctx == nil || w.stop != nil {
		return
	}
	ctx, cancel := context.WithCancel(t.ctx)
	w.stop = cancel
	go w.informer.RunWithContext(ctx)
}

// changed tells every breaker targeting key to look again.
func (t *Targets) changed(key targetKey) {
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

func (t *Targets) newInformer(key targetKey) cache.SharedIndexInformer {
	selector := fields.OneTermEqualSelector("metadata.name", key.name).String()
	api := t.client.AdmissionregistrationV1()
	if key.kind == v1alpha1.ValidatingWebhookConfiguration {
		c := api.ValidatingWebhookConfigurations()
		return cache.NewSharedIndexInformer(byName(selector, c.List, c.Watch), &admissionregistrationv1.ValidatingWebhookConfiguration{}, 0, cache.Indexers{})
	}
	c := api.MutatingWebhookConfigurations()
	return cache.NewSharedIndexInformer(byName(selector, c.List, c.Watch), &admissionregistrationv1.MutatingWebhookConfiguration{}, 0, cache.Indexers{})
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

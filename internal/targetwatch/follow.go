package targetwatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restwatch "k8s.io/client-go/rest/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/owners"
)

// minWatchTimeout is the least a watch request asks the API server to keep
// it open; each asks for a random span up to twice it, as client-go's
// reflector does, so that watches started together do not all end together.
const minWatchTimeout = 5 * time.Minute

// Backoff after a failed list or watch: from minBackoff, doubling to
// maxBackoff, as client-go's reflector does.
const (
	minBackoff = 800 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// follow keeps v current with one configuration until ctx ends: it lists
// it by name, then watches it from the list's resourceVersion, watching
// again from the last version seen when a watch ends, and listing again
// when the API server no longer has that version (410 Gone). A run starts
// with rv "", a list.
func (t *Targets) follow(ctx context.Context, key targetKey, v *view, rv string) {
	logger := log.FromContext(ctx).WithValues("configuration", key.name, "kind", key.kind)
	backoff := minBackoff
	for ctx.Err() == nil {
		var err error
		if rv == "" {
			rv, err = t.list(ctx, key, v)
		} else {
			rv, err = t.watch(ctx, key, v, rv)
		}
		if err == nil {
			backoff = minBackoff
			continue
		}
		if ctx.Err() != nil {
			return
		}
		logger.V(1).Info("watch of a target configuration failed; retrying", "error", err.Error(), "after", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// selector picks the one configuration: RBAC with resourceNames authorizes
// a list or watch that carries it, and nothing wider.
func (k targetKey) selector() string {
	return fields.OneTermEqualSelector("metadata.name", k.name).String()
}

// list reads the configuration by name into v and returns the list's
// resourceVersion, to watch from.
func (t *Targets) list(ctx context.Context, key targetKey, v *view) (string, error) {
	opts := metav1.ListOptions{FieldSelector: key.selector()}
	api := t.client.AdmissionregistrationV1()
	var (
		list runtime.Object
		err  error
	)
	if key.kind == v1alpha1.ValidatingWebhookConfiguration {
		list, err = api.ValidatingWebhookConfigurations().List(ctx, opts)
	} else {
		list, err = api.MutatingWebhookConfigurations().List(ctx, opts)
	}
	if err != nil {
		return "", fmt.Errorf("list %s %s: %w", key.kind, key.name, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return "", fmt.Errorf("list %s %s: %w", key.kind, key.name, err)
	}
	var obj client.Object
	for _, item := range items {
		if o, ok := item.(client.Object); ok && o.GetName() == key.name {
			obj = o
		}
	}
	t.see(key, v, obj, true)
	rv, err := meta.NewAccessor().ResourceVersion(list)
	if err != nil || rv == "" {
		return "", fmt.Errorf("list %s %s: no resourceVersion to watch from", key.kind, key.name)
	}
	return rv, nil
}

// watch follows the configuration from rv until the watch ends, and
// returns the last resourceVersion seen: the next watch's start, or "" to
// list again.
func (t *Targets) watch(ctx context.Context, key targetKey, v *view, rv string) (string, error) {
	resource := "mutatingwebhookconfigurations"
	if key.kind == v1alpha1.ValidatingWebhookConfiguration {
		resource = "validatingwebhookconfigurations"
	}
	stream, err := jsonStream()
	if err != nil {
		return rv, err
	}
	least := int64(cmp.Or(t.watchTimeout, minWatchTimeout) / time.Second)
	timeout := least + rand.Int64N(least+1)
	began := time.Now()
	body, err := t.client.AdmissionregistrationV1().RESTClient().Get().Resource(resource).
		VersionedParams(&metav1.ListOptions{FieldSelector: key.selector(), ResourceVersion: rv, Watch: true,
			AllowWatchBookmarks: true, TimeoutSeconds: &timeout}, scheme.ParameterCodec).
		SetHeader("Accept", runtime.ContentTypeJSON).
		Stream(ctx)
	if err != nil {
		if gone(err) {
			return "", nil
		}
		return rv, fmt.Errorf("watch %s %s: %w", key.kind, key.name, err)
	}
	defer body.Close()
	events := restwatch.NewDecoder(streaming.NewDecoder(stream.Framer.NewFrameReader(body), stream.Serializer),
		scheme.Codecs.UniversalDeserializer())
	for seen := false; ; seen = true {
		typ, obj, err := events.Decode()
		switch {
		case err != nil && ctx.Err() != nil:
			return rv, nil // our time is up
		case errors.Is(err, io.EOF) && !seen && time.Since(began) < time.Second:
			// Ended at once, with nothing: an API server shutting down, or
			// a proxy between. Watching again at once would spin.
			return rv, fmt.Errorf("watch %s %s: ended at once", key.kind, key.name)
		case errors.Is(err, io.EOF):
			return rv, nil // the watch's time is up
		case err != nil:
			return rv, fmt.Errorf("watch %s %s: %w", key.kind, key.name, err)
		}
		if typ == watch.Error {
			if status := apierrors.FromObject(obj); gone(status) {
				return "", nil
			} else {
				return rv, fmt.Errorf("watch %s %s: %w", key.kind, key.name, status)
			}
		}
		o, ok := obj.(client.Object)
		if !ok {
			return rv, fmt.Errorf("watch %s %s: an event of %T", key.kind, key.name, obj)
		}
		rv = o.GetResourceVersion()
		switch typ {
		case watch.Added, watch.Modified:
			t.see(key, v, o, false)
		case watch.Deleted:
			t.see(key, v, nil, false)
		}
	}
}

// jsonStream decodes a watch's JSON stream of events.
var jsonStream = sync.OnceValues(func() (*runtime.StreamSerializerInfo, error) {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok || info.StreamSerializer == nil {
		return nil, errors.New("client-go's scheme has no JSON stream serializer")
	}
	return info.StreamSerializer, nil
})

// gone reports whether the API server no longer has the version asked for.
func gone(err error) bool { return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) }

// see records what a list or an event says of the configuration (obj nil:
// it does not exist), and tells its breakers when that changed it. A run's
// first list always tells them (they wait for it: see Targets.Listing);
// a list after that, or an event, only when the version differs (a relist
// of an unchanged configuration wakes no breaker).
func (t *Targets) see(key targetKey, v *view, obj client.Object, list bool) {
	if obj != nil {
		// Only its writers are read (internal/owners), and they were the
		// larger part of a small object.
		owners.Trim(obj)
	}
	next := &snapshot{obj: obj}
	prev := v.seen.Swap(next)
	first := list && !v.synced.Swap(true)
	if first || prev.exists() != next.exists() || prev.version() != next.version() {
		t.changed(key)
	}
}

package remediate

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/reference"
)

// maxNote is the events API's limit on an event's note.
const maxNote = 1024

// EventWriter is a Recorder that writes each event at once through the
// events.k8s.io API, for a command that must not exit with events still
// queued. Events about cluster-scoped objects go to "default", as
// client-go's recorder puts them.
type EventWriter struct {
	Client kubernetes.Interface
	// Scheme resolves typed objects' kinds; unstructured ones carry theirs.
	Scheme *runtime.Scheme
	// Controller and Instance are the events' reportingController and
	// reportingInstance.
	Controller, Instance string
	// Timeout bounds each write. Default 10s.
	Timeout time.Duration

	mu  sync.Mutex
	err error
}

// Eventf writes one event; a failure is kept for Err, not returned.
func (w *EventWriter) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	ev, err := w.build(regarding, related, eventtype, reason, action, fmt.Sprintf(note, args...))
	if err == nil {
		timeout := w.Timeout
		if timeout <= 0 {
			timeout = 10 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		_, err = w.Client.EventsV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
		cancel()
	}
	if err != nil {
		w.mu.Lock()
		if w.err == nil {
			w.err = fmt.Errorf("record event %s: %w", reason, err)
		}
		w.mu.Unlock()
	}
}

// Err is the first event that could not be written, if any.
func (w *EventWriter) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *EventWriter) build(regarding, related runtime.Object, eventtype, reason, action, note string) (*eventsv1.Event, error) {
	ref, err := reference.GetReference(w.Scheme, regarding)
	if err != nil {
		return nil, err
	}
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	now := time.Now()
	prefix := ref.Name
	if len(prefix) > 200 {
		prefix = prefix[:200] // an event's name is at most 253 characters
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", prefix, now.UnixNano()), Namespace: ns},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: w.Controller,
		ReportingInstance:   w.Instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Note:                note,
		Type:                eventtype,
	}
	if related != nil {
		var rel *corev1.ObjectReference
		if rel, err = reference.GetReference(w.Scheme, related); err == nil {
			ev.Related = rel
		}
	}
	return ev, nil
}

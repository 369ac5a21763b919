package schedule

import (
	"context"
	"fmt"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// eventConcurrency is how many events are sent to the API server at once.
const eventConcurrency = 4

// EventRecorder returns the breakers' event recorder, its broadcaster run
// by mgr. The events.k8s.io broadcaster sends every event from a goroutine
// of its own, so the thousand CircuitOpened events of a storm would all
// compete at once with the patches that open the circuits; here at most
// eventConcurrency are in flight, and the rest follow as they finish (none
// is dropped).
func EventRecorder(mgr ctrl.Manager, cs kubernetes.Interface) (events.EventRecorder, error) {
	b := events.NewBroadcaster(&boundedSink{
		sink:  &events.EventSinkImpl{Interface: cs.EventsV1()},
		slots: make(chan struct{}, eventConcurrency),
	})
	err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
			return fmt.Errorf("start recording events: %w", err)
		}
		<-ctx.Done()
		b.Shutdown()
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("add event broadcaster: %w", err)
	}
	return b.NewRecorder(mgr.GetScheme(), "tripswitch"), nil
}

// boundedSink sends at most cap(slots) events at a time.
type boundedSink struct {
	sink  events.EventSink
	slots chan struct{}
}

// do runs send in a free slot.
func (s *boundedSink) do(send func() (*eventsv1.Event, error)) (*eventsv1.Event, error) {
	s.slots <- struct{}{}
	defer func() { <-s.slots }()
	return send()
}

func (s *boundedSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	return s.do(func() (*eventsv1.Event, error) { return s.sink.Create(ctx, e) })
}

func (s *boundedSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	return s.do(func() (*eventsv1.Event, error) { return s.sink.Update(ctx, e) })
}

func (s *boundedSink) Patch(ctx context.Context, old *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	return s.do(func() (*eventsv1.Event, error) { return s.sink.Patch(ctx, old, data) })
}

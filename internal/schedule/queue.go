package schedule

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The queue priorities of a breaker's reconciles. Watch events and
// resyncs are 0.
const (
	// PriorityDecision: a probe verdict reached a threshold, so the
	// reconcile may open or close a circuit.
	PriorityDecision = 100
	// PriorityReport: only the status is behind (a deferred status write, or
	// a probe change no decision acts on).
	PriorityReport = handler.LowPriority
)

// Queue hands the controller's workqueue, once it starts, to the probe
// monitor and the target watches: they add breakers to it directly, so no
// notification is ever dropped (with reconciles only on change, a dropped
// one would not come again) and a breaker queued twice is reconciled once.
// The zero value is ready; until Start, adds are dropped.
type Queue struct {
	mu sync.Mutex
	q  workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// Start is a source.Func: the controller calls it with its queue.
func (r *Queue) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	r.mu.Lock()
	r.q = q
	r.mu.Unlock()
	return nil
}

// Add queues breaker at priority 0.
func (r *Queue) Add(breaker string) { r.AddAt(breaker, 0) }

// AddAt queues breaker at priority p: controller-runtime's queue serves
// higher priorities first, and raises an item queued lower (FIFO within a
// priority).
func (r *Queue) AddAt(breaker string, p int) {
	r.mu.Lock()
	q := r.q
	r.mu.Unlock()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: breaker}}
	switch pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); {
	case ok:
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, req)
	case q != nil:
		q.Add(req)
	}
}

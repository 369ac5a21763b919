package limit

import (
	"log/slog"
	"runtime/debug"
	"sync"
)

// LimitChange is a limiter's limit moving from From to To: an adaptive
// limit's new estimate, or a bulkhead resized with SetMaxConcurrentCalls.
// An OnLimitChanged hook receives it (failsafe-go's OnLimitChanged).
type LimitChange struct {
	// Limiter is the limiter's name.
	Limiter string
	// From and To are the limit before and after the change.
	From, To int
}

// Rejection is a call a limiter refused: it was full, and a caller that
// could wait found no permit within its wait. An OnRejected hook receives
// it (failsafe-go's OnFull, Resilience4j's BulkheadOnCallRejectedEvent).
type Rejection struct {
	// Limiter is the limiter's name.
	Limiter string
	// Limit is the limit that rejected the call.
	Limit int
}

// hooks calls a limiter's hooks. A hook that panics is logged and does not
// affect the call that caused it, the limiter or the hooks after it, as
// the breaker contains its event consumers.
type hooks struct {
	name     string
	logger   *slog.Logger
	onChange func(LimitChange)
	onReject func(Rejection)

	mu         sync.Mutex
	pending    []LimitChange
	delivering bool
}

// rejected calls onReject, which is set, on the rejected caller's
// goroutine. Kept out of line, so that a rejection without a hook stays
// small.
//
//go:noinline
func (h *hooks) rejected(limit int) {
	h.call("OnRejected", func() { h.onReject(Rejection{Limiter: h.name, Limit: limit}) })
}

// changed queues a change for onChange; the caller holds the lock that
// orders the changes and calls deliver once it has released it.
func (h *hooks) changed(from, to int64) {
	if h.onChange == nil {
		return
	}
	h.mu.Lock()
	h.pending = append(h.pending, LimitChange{Limiter: h.name, From: int(from), To: int(to)})
	h.mu.Unlock()
}

// deliver calls onChange with the queued changes, in order, exactly once,
// outside the limiter's locks: whoever finds no delivery under way
// delivers everything queued, including changes queued meanwhile, so a
// hook may call back into the limiter.
func (h *hooks) deliver() {
	if h.onChange == nil {
		return
	}
	h.mu.Lock()
	if h.delivering {
		h.mu.Unlock()
		return
	}
	h.delivering = true
	for len(h.pending) > 0 {
		c := h.pending[0]
		h.pending = h.pending[1:]
		h.mu.Unlock()
		h.call("OnLimitChanged", func() { h.onChange(c) })
		h.mu.Lock()
	}
	h.delivering = false
	h.mu.Unlock()
}

func (h *hooks) call(hook string, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			h.logger.Error("limit hook panicked", "limiter", h.name, "hook", hook, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	fn()
}

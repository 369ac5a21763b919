package limit

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// AdaptiveConfig configures an Adaptive limit. The zero value of each field
// means its default.
type AdaptiveConfig struct {
	// InitialLimit is the limit before the first estimate. Default 20, or
	// MinLimit if higher, or MaxLimit if lower.
	InitialLimit int
	// MinLimit and MaxLimit bound the estimate. Defaults 1 and 200; a
	// MinLimit or InitialLimit above 200 needs a MaxLimit at least as
	// high.
	MinLimit, MaxLimit int
	// WindowSamples is how many timed calls make one window, the unit of
	// each estimate (the limit, while it is lower). A window also spans
	// at least twice its fastest call, so that the calls that queued
	// behind the fastest are in it, and at least 10 ms. Default 20.
	WindowSamples int
	// Clock times the calls; default the system clock. Everything the
	// limit times follows it: an injected clock that stands still holds
	// the window open, and one that moves closes it, as the system clock
	// would.
	Clock breaker.Clock
	// OnLimitChanged, if set, is called with each change of the limit, in
	// order, outside the limit's locks (so it may call back into it), on
	// the goroutine whose call completed the window.
	OnLimitChanged func(LimitChange)
	// OnRejected, if set, is called with each call the limit rejects, on
	// the rejected caller's goroutine before Acquire returns. Keep it
	// cheap: it runs on the path that sheds load.
	OnRejected func(Rejection)
	// Logger receives what the limit cannot return to a caller: a panic in
	// a hook. Default: slog.Default().
	Logger *slog.Logger
}

// Adaptive is a concurrency limit that follows the callee's capacity: it
// grows while the latency of calls stays at the callee's latency without
// load, and shrinks when latency rises because calls queue (the algorithm,
// Vegas, and why: docs/limits.md, and vegas in the source). A call beyond the
// current limit is rejected at once with a *LimitedError; there is no wait,
// since a wait would add to the latency the limit reads. It is safe for
// concurrent use.
type Adaptive struct {
	name  string
	cfg   AdaptiveConfig
	s     sem
	full  atomic.Pointer[LimitedError]
	base  time.Time
	hooks hooks

	// epoch counts changes of the limit: a call admitted under an older
	// limit teaches nothing about the current one.
	epoch atomic.Uint64
	// want is how many more calls the current window times densely: the
	// next ones admitted.
	want atomic.Int64
	// sparse, once the window has its samples and waits for its span to
	// pass, is the admission number it began waiting at, with bit 32 set:
	// from then on the calls admitted 1, 2, 4, 8, ... admissions later are
	// timed, and every sparseEvery-th after that, so that a window closes
	// soon after its span passes on the configured clock (however long a
	// clock that stands still held it open) at the cost of a few timed
	// calls. 0: none.
	sparse atomic.Uint64

	mu  sync.Mutex // guards win and est
	win window
	est vegas
}

// window gathers the timed calls of one estimate.
type window struct {
	start      int64 // since Adaptive.base, ns
	n          int
	min        float64   // the fastest call, ns
	rtts       []float64 // the calls' latencies (up to its capacity), ns
	load, peak float64   // the calls in flight at the admissions: sum, most
}

// latency is the window's latency: the mean of its fastest three quarters
// of calls (see vegas). It leaves the latencies sorted.
func (w *window) latency() float64 {
	slices.Sort(w.rtts)
	fast := w.rtts[:max(len(w.rtts)*3/4, 1)]
	var sum float64
	for _, r := range fast {
		sum += r
	}
	return sum / float64(len(fast))
}

// sparseEvery is the longest gap, in admissions, between the calls a
// window that waits for its span times: one call in 1,024 reads the clock
// then.
const sparseEvery = 1024

// minWindow is the shortest window: at a fast call site it bounds the
// windows, and so the timed calls, to a hundred a second.
const minWindow = 10 * time.Millisecond

// maxKept is the most latencies a window keeps for its estimate (the
// samples beyond it count toward the window's size and fastest call).
const maxKept = 1024

// defaultMaxLimit is MaxLimit's default.
const defaultMaxLimit = 200

// NewAdaptive returns an adaptive limit, or a *breaker.ConfigError naming
// the invalid field.
func NewAdaptive(name string, cfg AdaptiveConfig) (*Adaptive, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	a := &Adaptive{name: name, cfg: cfg, base: cfg.Clock.Now()}
	a.hooks = hooks{name: name, logger: cfg.Logger, onChange: cfg.OnLimitChanged, onReject: cfg.OnRejected}
	a.full.Store(&LimitedError{Limiter: name, Limit: cfg.InitialLimit})
	a.s.rejected = newCounter()
	a.s.adaptive = a
	a.est.limit = float64(cfg.InitialLimit)
	a.win.rtts = make([]float64, 0, min(2*cfg.WindowSamples, maxKept))
	a.s.limit.Store(int64(cfg.InitialLimit))
	a.want.Store(int64(a.windowSize()))
	return a, nil
}

// defaults validates c and applies its defaults. A MinLimit or an
// InitialLimit above the default MaxLimit is refused rather than raising
// MaxLimit silently: the limit could then never come down to what the
// MaxLimit documentation promises.
func (c *AdaptiveConfig) defaults() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"MinLimit", c.MinLimit}, {"MaxLimit", c.MaxLimit}, {"InitialLimit", c.InitialLimit}, {"WindowSamples", c.WindowSamples}} {
		if f.v < 0 || f.v > math.MaxInt32 {
			return &breaker.ConfigError{Field: f.name, Value: f.v, Reason: "must be in [1, 2^31-1] (0 means the default)"}
		}
	}
	maxNote := ""
	if c.MaxLimit == 0 {
		c.MaxLimit = defaultMaxLimit
		maxNote = fmt.Sprintf(" (%d, its default; set MaxLimit too)", defaultMaxLimit)
	}
	if c.MinLimit == 0 {
		c.MinLimit = 1
	}
	switch {
	case c.MinLimit > c.MaxLimit:
		return &breaker.ConfigError{Field: "MinLimit", Value: c.MinLimit, Reason: "must not be above MaxLimit" + maxNote}
	case c.InitialLimit == 0:
		c.InitialLimit = min(max(20, c.MinLimit), c.MaxLimit)
	case c.InitialLimit < c.MinLimit || c.InitialLimit > c.MaxLimit:
		return &breaker.ConfigError{Field: "InitialLimit", Value: c.InitialLimit, Reason: fmt.Sprintf("must be within [MinLimit, MaxLimit], [%d, %d]%s", c.MinLimit, c.MaxLimit, maxNote)}
	}
	if c.WindowSamples == 0 {
		c.WindowSamples = 20
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Name returns the limit's name.
func (a *Adaptive) Name() string { return a.name }

// Config returns the configuration with defaults applied.
func (a *Adaptive) Config() AdaptiveConfig { return a.cfg }

// Acquire admits a call if fewer than the current limit are in flight, and
// returns a *LimitedError otherwise. Neither takes a lock or allocates; a
// call the current window times reads the clock.
func (a *Adaptive) Acquire(context.Context) (Permit, error) {
	w := a.s.tryAcquire()
	if w == 0 {
		return Permit{}, a.reject()
	}
	if a.want.Load() > 0 && a.want.Add(-1) >= 0 {
		return a.timed(w), nil
	}
	if from := a.sparse.Load(); from != 0 {
		if d := admissionNumber(w) - uint32(from); d&(d-1) == 0 || d&(sparseEvery-1) == 0 {
			return a.timed(w), nil
		}
	}
	return Permit{s: &a.s}, nil
}

// reject counts a rejection, tells the hook and returns the rejection.
func (a *Adaptive) reject() *LimitedError {
	a.s.countRejection()
	full := a.full.Load()
	if a.hooks.onReject != nil {
		a.hooks.rejected(full.Limit)
	}
	return full
}

// timed is the permit of a call the current window times, admitted with
// word w, kept out of Acquire so that the paths most calls take (untimed,
// rejected) stay small.
//
//go:noinline
func (a *Adaptive) timed(w uint64) Permit {
	start := max(int64(a.cfg.Clock.Now().Sub(a.base)), 1)
	return Permit{s: &a.s, start: start, tag: uint64(uint32(a.epoch.Load()))<<32 | uint64(uint32(inFlight(w)))}
}

// Metrics reads the limit's numbers: MaxAllowedConcurrentCalls is the
// current limit. Rejected counts from EnableRejectionCount on.
func (a *Adaptive) Metrics() Metrics { return a.s.metrics() }

// EnableRejectionCount makes Metrics count the calls the limit rejects,
// from now on (see Bulkhead.EnableRejectionCount); breakerprom's
// LimitCollector calls it.
func (a *Adaptive) EnableRejectionCount() { a.s.counting.Store(true) }

// timeMore lets one more call be timed. want may be below zero (callers
// that raced for its last unit each took one), so it is raised to at least
// one: otherwise a window could wait for a sample no call will give.
func (a *Adaptive) timeMore() {
	for {
		v := a.want.Load()
		if a.want.CompareAndSwap(v, max(v, 0)+1) {
			return
		}
	}
}

// windowSize is how many samples a window needs: WindowSamples, or the
// limit when that is fewer.
func (a *Adaptive) windowSize() int {
	return max(1, min(a.cfg.WindowSamples, int(a.s.limit.Load())))
}

// sample records a timed call that began at start (since a.base) with the
// tag of its admission (see Permit), and updates the limit when the window
// is complete: it has its samples and its span has passed on the clock.
func (a *Adaptive) sample(start int64, tag uint64) {
	now := int64(a.cfg.Clock.Now().Sub(a.base))
	rtt := float64(max(now-start, 1))
	epoch, load := uint32(tag>>32), uint32(tag)
	a.mu.Lock()
	if epoch != uint32(a.epoch.Load()) {
		a.mu.Unlock()
		return // admitted under another limit
	}
	w := &a.win
	if w.n == 0 || rtt < w.min {
		w.min = rtt
	}
	w.n++
	if len(w.rtts) < cap(w.rtts) {
		w.rtts = append(w.rtts, rtt)
	}
	w.load += float64(load)
	w.peak = max(w.peak, float64(load))
	if w.n < a.windowSize() {
		a.timeMore() // one more sample, in place of this one
		a.mu.Unlock()
		return
	}
	if span := max(2*w.min, float64(minWindow)); float64(now-w.start) < span {
		// Enough samples, but the span has not passed: time sparsely
		// until it has (see Adaptive.sparse).
		if a.sparse.Load() == 0 {
			a.sparse.Store(1<<32 | uint64(admissionNumber(a.s.word.Load())))
		}
		a.mu.Unlock()
		return
	}
	o := observation{rtt: w.latency(), min: w.min, inFlight: w.load / float64(w.n), peak: w.peak}
	*w = window{start: now, rtts: w.rtts[:0]}
	a.sparse.Store(0)
	prev := a.s.limit.Load()
	next := int64(math.Round(a.est.update(o, float64(a.cfg.MinLimit), float64(a.cfg.MaxLimit))))
	if next != prev {
		a.epoch.Add(1)
		a.full.Store(&LimitedError{Limiter: a.name, Limit: int(next)})
		a.s.setLimit(next)
		a.hooks.changed(prev, next)
	}
	a.want.Store(int64(a.windowSize()))
	a.mu.Unlock()
	a.hooks.deliver()
}

package limit

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// AdaptiveConfig configures an Adaptive limit. The zero value of each field
// means its default.
type AdaptiveConfig struct {
	// InitialLimit is the limit before the first estimate. Default 20.
	InitialLimit int
	// MinLimit and MaxLimit bound the estimate. Defaults 1 and 200.
	MinLimit, MaxLimit int
	// WindowSamples is how many timed calls make one window, the unit of
	// each estimate (the limit, while it is lower). A window also spans
	// at least twice its fastest call, so that the calls that queued
	// behind the fastest are in it, and at least 10 ms, so that a fast
	// call site times a few hundred calls a second, not all of them.
	// Default 20.
	WindowSamples int
	// Clock times the calls; default the system clock.
	Clock breaker.Clock
}

// Adaptive is a concurrency limit that follows the callee's capacity: it
// grows while the latency of calls stays at the callee's latency without
// load, and shrinks when latency rises because calls queue (see the package
// documentation for the algorithm, Vegas, and why). A call beyond the
// current limit is rejected at once with a *LimitedError; there is no wait,
// since a wait would add to the latency the limit reads. It is safe for
// concurrent use.
type Adaptive struct {
	name string
	cfg  AdaptiveConfig
	s    sem
	full *LimitedError
	base time.Time

	// epoch counts changes of the limit: a call admitted under an older
	// limit teaches nothing about the current one.
	epoch atomic.Uint64
	// want is how many more calls the current window times; the others
	// read no clock.
	want atomic.Int64

	mu  sync.Mutex // guards win and est
	win window
	est vegas
}

// window gathers the timed calls of one estimate.
type window struct {
	start         int64 // since Adaptive.base, ns
	n             int
	sum, min, max float64
	inFlight      int64
	waking        bool // a timer will time one more call when the window may close
}

const (
	// minWindow is the shortest window: at a fast call site it bounds the
	// windows, and so the timed calls, to a few hundred a second.
	minWindow = 10 * time.Millisecond
	// maxTimed is how many timed calls (in WindowSamples) a window takes
	// before it stops timing and waits for its span to pass.
	maxTimed = 10
)

// NewAdaptive returns an adaptive limit, or a *breaker.ConfigError naming
// the invalid field.
func NewAdaptive(name string, cfg AdaptiveConfig) (*Adaptive, error) {
	if cfg.MinLimit == 0 {
		cfg.MinLimit = 1
	}
	if cfg.MaxLimit == 0 {
		cfg.MaxLimit = max(200, cfg.MinLimit, cfg.InitialLimit)
	}
	if cfg.InitialLimit == 0 {
		cfg.InitialLimit = min(max(20, cfg.MinLimit), cfg.MaxLimit)
	}
	if cfg.WindowSamples == 0 {
		cfg.WindowSamples = 20
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"MinLimit", cfg.MinLimit}, {"MaxLimit", cfg.MaxLimit}, {"InitialLimit", cfg.InitialLimit}, {"WindowSamples", cfg.WindowSamples}} {
		if f.v < 1 || f.v > math.MaxInt32 {
			return nil, &breaker.ConfigError{Field: f.name, Value: f.v, Reason: "must be in [1, 2^31-1] (0 means the default)"}
		}
	}
	switch {
	case cfg.MinLimit > cfg.MaxLimit:
		return nil, &breaker.ConfigError{Field: "MinLimit", Value: cfg.MinLimit, Reason: "must not be above MaxLimit"}
	case cfg.InitialLimit < cfg.MinLimit || cfg.InitialLimit > cfg.MaxLimit:
		return nil, &breaker.ConfigError{Field: "InitialLimit", Value: cfg.InitialLimit, Reason: "must be within [MinLimit, MaxLimit]"}
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	a := &Adaptive{name: name, cfg: cfg, full: &LimitedError{Limiter: name, Limit: cfg.InitialLimit}, base: cfg.Clock.Now()}
	a.s.rejected = newCounter()
	a.est.limit = float64(cfg.InitialLimit)
	a.s.limit.Store(int64(cfg.InitialLimit))
	a.want.Store(int64(a.windowSize()))
	return a, nil
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
	if !a.s.tryAcquire() {
		a.s.rejected.add()
		return Permit{}, a.full
	}
	if a.want.Load() > 0 && a.want.Add(-1) >= 0 {
		return a.timed(), nil
	}
	return Permit{s: &a.s, a: a}, nil
}

// timed is the permit of a call the current window times, kept out of
// Acquire so that the paths most calls take (untimed, rejected) stay small.
//
//go:noinline
func (a *Adaptive) timed() Permit {
	return Permit{s: &a.s, a: a, epoch: a.epoch.Load(), start: max(int64(a.cfg.Clock.Now().Sub(a.base)), 1)}
}

// Metrics reads the limit's numbers: MaxAllowedConcurrentCalls is the
// current limit.
func (a *Adaptive) Metrics() Metrics { return a.s.metrics() }

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

// sample records a timed call that began at start (since a.base) under
// epoch, and updates the limit when the window is complete.
func (a *Adaptive) sample(start int64, epoch uint64) {
	now := int64(a.cfg.Clock.Now().Sub(a.base))
	rtt := float64(max(now-start, 1))
	inFlight := a.s.inFlight.Load()
	a.mu.Lock()
	defer a.mu.Unlock()
	if epoch != a.epoch.Load() {
		return // admitted under another limit
	}
	w := &a.win
	if w.n == 0 || rtt < w.min {
		w.min = rtt
	}
	w.n++
	w.sum += rtt
	w.max = max(w.max, rtt)
	w.inFlight = max(w.inFlight, inFlight)
	span := max(2*w.min, float64(minWindow))
	if elapsed := float64(now - w.start); w.n < a.windowSize() || elapsed < span {
		// Not complete: time one more call, or, with enough of them,
		// wait until the span has passed and time one then.
		if w.n < maxTimed*a.cfg.WindowSamples {
			a.timeMore()
		} else if !w.waking {
			w.waking = true
			time.AfterFunc(time.Duration(span-elapsed), a.timeMore)
		}
		return
	}
	o := observation{avg: w.sum / float64(w.n), min: w.min, max: w.max, inFlight: w.inFlight}
	*w = window{start: now}
	prev := a.s.limit.Load()
	next := int64(math.Round(a.est.update(o, float64(a.cfg.MinLimit), float64(a.cfg.MaxLimit))))
	if next != prev {
		a.epoch.Add(1)
		a.s.setLimit(next)
	}
	a.want.Store(int64(a.windowSize()))
}

package probe

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"time"
)

// The monitor's loop: one timer for every probe, the groups due next on a
// heap.

// idleWait is how long the scheduler sleeps with nothing to probe: it is
// woken when something is.
const idleWait = time.Hour

// Start runs the monitor's scheduler until ctx ends, then lets the probes
// in flight end unrecorded.
func (m *Monitor) Start(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	for _, g := range m.groups {
		if g.run == nil {
			m.schedule(g, m.spread(g))
		}
	}
	m.mu.Unlock()
	timer := m.clock.NewTimer(idleWait)
	defer timer.Stop()
	for {
		m.mu.Lock()
		now := m.clock.Now()
		for len(m.due) > 0 && !m.due[0].tick.After(now) {
			m.launch(heap.Pop(&m.due).(*group))
		}
		wait := idleWait
		if len(m.due) > 0 {
			wait = m.due[0].tick.Sub(now)
		}
		m.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			m.mu.Lock()
			m.ctx = nil
			for len(m.due) > 0 {
				heap.Pop(&m.due)
			}
			m.mu.Unlock()
			return nil
		case <-timer.C():
		case <-m.wake:
		}
	}
}

// spread is a new schedule's first tick: at random within an interval, and
// its first probe has no lag. Callers hold m.mu; g is not probing.
func (m *Monitor) spread(g *group) time.Time {
	g.prevStart = time.Time{}
	return m.clock.Now().Add(time.Duration(rand.Int64N(int64(g.every) + 1)))
}

// schedule queues g's next probe at tick, and wakes the scheduler if it is
// now the soonest. Callers hold m.mu.
func (m *Monitor) schedule(g *group, tick time.Time) {
	g.tick = tick
	if g.index >= 0 {
		heap.Fix(&m.due, g.index)
	} else {
		heap.Push(&m.due, g)
	}
	if g.index == 0 {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// launch starts g's probe, due now, and moves its tick past now, as a
// ticker drops the ticks its reader missed. Callers hold m.mu.
func (m *Monitor) launch(g *group) {
	m.launches++
	ctx, cancel := context.WithCancel(m.ctx)
	r := &run{seq: m.launches, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	g.run = r
	now := m.clock.Now()
	g.tick = g.tick.Add(g.every * (now.Sub(g.tick)/g.every + 1))
	go m.probe(g, r, g.target)
}

// probe runs one probe of g, then delivers its result to g's members and
// queues g's next probe.
func (m *Monitor) probe(g *group, r *run, t Target) {
	defer close(r.done)
	defer r.cancel()
	start := m.clock.Now()
	lag := time.Duration(0)
	if !g.prevStart.IsZero() {
		lag = max(start.Sub(g.prevStart)-g.every, 0)
	}
	g.prevStart = start
	pctx, cancel := context.WithTimeout(r.ctx, t.Timeout)
	wallStart := time.Now() // the stall meter's clock, whatever m.clock is
	res := m.prober.Probe(pctx, t)
	cancel()
	res = m.judgeStall(res, wallStart, time.Now(), t.Timeout)
	if res.Latency == 0 {
		res.Latency = m.clock.Since(start)
	}
	res.Lag = lag

	m.mu.Lock()
	// Stop cancels the probe of a group it leaves empty under m.mu, so this
	// check cannot race it: such a result is never recorded. (A result
	// checked just before the monitor's context ended is still delivered,
	// as any probe's that ends with it.)
	if r.ctx.Err() != nil {
		g.run = nil
		if m.ctx != nil && m.groups[g.key] == g && g.index < 0 {
			m.schedule(g, m.spread(g)) // the monitor started again meanwhile
		}
		m.mu.Unlock()
		return
	}
	now := m.clock.Now()
	g.out = g.out[:0]
	for _, mem := range g.members {
		if mem.joined >= r.seq {
			continue // joined after this probe began
		}
		prev := mem.obs
		s := mem.settings
		mem.obs = observe(mem.obs, res, s)
		mem.obs = lateness(mem.obs, res.Lag, s.Interval)
		mem.obs = starvation(mem.obs, res, now)
		mem.obs = healthySince(prev, mem.obs, now)
		g.out = append(g.out, delivery{m: mem, change: Compare(prev, mem.obs)})
	}
	m.mu.Unlock()
	// g stays probing (g.run) until its result is out: its next probe, or
	// one a new term of the monitor would start, comes after.
	for _, d := range g.out {
		d.m.deliver.Lock()
		if !d.m.stopped.Load() {
			m.notify(d.m.key, res, d.change)
		}
		d.m.deliver.Unlock()
	}
	m.mu.Lock()
	g.run = nil
	if m.ctx != nil && m.groups[g.key] == g && g.index < 0 {
		m.schedule(g, g.tick)
	}
	m.mu.Unlock()
}

// dueHeap orders groups by their next tick.
type dueHeap []*group

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].tick.Before(h[j].tick) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *dueHeap) Push(x any) {
	g := x.(*group)
	g.index = len(*h)
	*h = append(*h, g)
}

func (h *dueHeap) Pop() any {
	old := *h
	g := old[len(old)-1]
	old[len(old)-1] = nil
	g.index = -1
	*h = old[:len(old)-1]
	return g
}

// remove takes g out of the heap.
func (h *dueHeap) remove(g *group) { heap.Remove(h, g.index) }

package probe

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Settings are one monitored webhook's probe settings.
type Settings struct {
	Target           Target
	Interval         time.Duration
	FailureThreshold int32
	SuccessThreshold int32
}

// StallMeter says how long the process could not run in a span of time;
// *stall.Watch implements it.
type StallMeter interface {
	Stalled(from, to time.Time) time.Duration
}

// starvedShare: a timeout is discarded when the controller could not run
// for at least this share of the probe's timeout. A healthy controller
// loses well under a millisecond to a garbage collection; a CPU-throttled
// one loses most of each 100 ms period once its quota is spent.
const starvedShare = 4

// minStarved is the least stall that discards a timeout, whatever the
// timeout: below it, scheduling noise.
const minStarved = 20 * time.Millisecond

// Monitor probes every registered webhook at its interval and calls notify
// after every probe, saying what the probe changed (see Compare).
//
// One scheduler serves every webhook: a heap of next-probe times, on one
// timer, run by Start's own goroutine; each probe runs in a goroutine of
// its own that ends with it, so a steady monitor holds no goroutine per
// webhook. Webhooks whose probes would be the same request, judged the
// same way (the same destination, path, trust, kind, timeout and interval:
// the webhooks of one Service probed on its health path, say), share each
// probe: one request, whose result each folds into its own observation
// against its own thresholds. Each group keeps a ticker's schedule: a
// random first probe within an interval (breakers created together, or all
// of them after a start or failover, would otherwise probe in lockstep),
// then one per interval, a tick missed while a probe ran taken at once and
// the others dropped.
//
// It is a controller-runtime Runnable: probes run only while Start's
// context lives, which under leader election means only while this replica
// leads.
type Monitor struct {
	prober Prober
	notify func(key string, r Result, c Change)
	clock  clock.WithTicker

	// Stalls, if set before Start, judges the timeouts a prober left
	// unconfirmed (Result.TimedOut: a request never written in time, a
	// probe blocked behind held requests): one during which the controller
	// could not run for a quarter of the probe's timeout is Discarded (see
	// Observation.Starved). The HTTPProber confirms the rest itself.
	Stalls StallMeter

	mu      sync.Mutex
	ctx     context.Context // nil until Start
	members map[string]*member
	groups  map[probeKey]*group
	due     dueHeap       // groups waiting for their next probe, soonest first
	wake    chan struct{} // the soonest probe changed
	// launches counts the probes started: a member that joined its group
	// after a probe started gets none of that probe.
	launches uint64
	groupIDs uint64
}

// member is one monitored webhook (one key).
type member struct {
	key      string
	settings Settings
	obs      Observation
	group    *group
	joined   uint64 // Monitor.launches when it joined its group
	// deliver is held while a result is delivered to the member, by
	// whichever group's probe (it may have moved since); stopped is set by
	// Stop, which then takes deliver once: nothing is delivered to it
	// after that.
	deliver sync.Mutex
	stopped atomic.Bool
}

// group is the members that share probes, and their schedule.
type group struct {
	key    probeKey
	target Target // Key names the group (see HTTPProber's held requests)
	every  time.Duration
	// members, in the order they joined.
	members []*member
	// tick is the next tick of the group's ticker; index is its place in
	// Monitor.due, -1 when not there (probing, or the monitor not running).
	tick  time.Time
	index int
	// run is the probe in flight, until its result is delivered: a group
	// has at most one, so prevStart and out are its goroutine's alone.
	run *run
	// prevStart is when the last probe began (its next one's lag).
	prevStart time.Time
	// out is the deliveries of the last probe (reused).
	out []delivery
}

type delivery struct {
	m      *member
	change Change
}

// run is one probe in flight.
type run struct {
	seq    uint64
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed once its result is delivered or dropped
}

// NewMonitor returns a monitor using prober. notify is called after every
// probe, outside any lock, with what the probe changed (see Compare): a
// caller that reconciles only on a change does the same work for 200 steady
// webhooks as for none, and one that serves DecisionChange first opens and
// closes circuits first when every webhook fails at once.
func NewMonitor(prober Prober, clk clock.WithTicker, notify func(key string, r Result, c Change)) *Monitor {
	return &Monitor{prober: prober, notify: notify, clock: clk, members: map[string]*member{},
		groups: map[probeKey]*group{}, wake: make(chan struct{}, 1)}
}

// NeedLeaderElection keeps probing on the leader only.
func (m *Monitor) NeedLeaderElection() bool { return true }

// Ensure starts probing key with s, or updates its settings. A change that
// makes its probe another request (or another interval) moves it to that
// probe's schedule; new thresholds judge the counts at once.
func (m *Monitor) Ensure(key string, s Settings) {
	gk := keyOf(key, s)
	m.mu.Lock()
	defer m.mu.Unlock()
	mem, ok := m.members[key]
	if !ok {
		mem = &member{key: key}
		m.members[key] = mem
	}
	mem.settings = s
	if mem.obs.Last.Status != "" {
		mem.obs.Verdict = verdictOf(mem.obs, s)
	}
	if mem.group != nil && mem.group.key == gk {
		return
	}
	var from *group // the schedule it leaves
	if mem.group != nil {
		from = mem.group
		m.leave(mem)
	}
	g, ok := m.groups[gk]
	if !ok {
		m.groupIDs++
		// A zero interval is a settings bug: probe once a second, not in a loop.
		g = &group{key: gk, target: s.Target, every: cmp.Or(max(s.Interval, 0), time.Second), index: -1}
		g.target.Key = fmt.Sprintf("probe-%d", m.groupIDs)
		m.groups[gk] = g
		switch {
		case m.ctx == nil:
		case from != nil && from.every == g.every && !from.tick.IsZero():
			// New settings (new endpoints, a rotated caBundle) keep the
			// probe's schedule: its next probe comes when it would have.
			m.schedule(g, from.tick)
		default:
			m.schedule(g, m.spread(g))
		}
	}
	mem.group, mem.joined = g, m.launches
	g.members = append(g.members, mem)
}

// Stop stops probing key and forgets its observation. When it returns, no
// result is delivered for key any more, and a probe that only key needed
// has been cancelled and has returned.
func (m *Monitor) Stop(key string) {
	m.mu.Lock()
	mem, ok := m.members[key]
	if !ok {
		m.mu.Unlock()
		return
	}
	delete(m.members, key)
	mem.stopped.Store(true)
	r := m.leave(mem)
	m.mu.Unlock()
	if r != nil {
		<-r.done
	}
	// A barrier: a delivery to mem under way ends first; later ones skip it.
	mem.deliver.Lock()
	//lint:ignore SA2001 the lock is the wait
	mem.deliver.Unlock()
}

// leave takes mem out of its group; a group left empty is dropped and its
// probe cancelled (returned, for the caller to wait for). Callers hold m.mu.
func (m *Monitor) leave(mem *member) *run {
	g := mem.group
	mem.group = nil
	for i, o := range g.members {
		if o == mem {
			g.members = append(g.members[:i], g.members[i+1:]...)
			break
		}
	}
	if len(g.members) > 0 {
		return nil
	}
	delete(m.groups, g.key)
	if g.index >= 0 {
		m.due.remove(g)
	}
	if g.run != nil {
		g.run.cancel()
		return g.run
	}
	return nil
}

// Observe returns key's current observation; false if key is not monitored.
func (m *Monitor) Observe(key string) (Observation, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem, ok := m.members[key]
	if !ok {
		return Observation{}, false
	}
	return mem.obs, true
}

// probeKey is what makes two members' probes one: every field of the
// target the prober reads or branches on (where the request goes, its
// path, its trust, its kind and body's versions, whether the webhook is a
// Service, the endpoints it covers), its timeout and its interval. A
// target that cannot be located is probed alone (its own key): it is
// reported Unknown, with its own reason.
type probeKey struct {
	url, serverName, caBundle string
	kind                      string
	reviewVersions            string
	endpoints, endpointsErr   string
	service, endpointMode     bool
	timeout, interval         time.Duration
	alone                     string
}

func keyOf(key string, s Settings) probeKey {
	t := s.Target
	k := probeKey{caBundle: string(t.ClientConfig.CABundle), kind: string(t.Kind), timeout: t.Timeout, interval: s.Interval,
		service: t.ClientConfig.Service != nil, endpointMode: t.EndpointMode, endpoints: strings.Join(t.Endpoints, ","), endpointsErr: t.EndpointsErr}
	if t.Kind == v1alpha1.ProbeAdmissionReview {
		k.reviewVersions = strings.Join(t.ReviewVersions, ",")
	}
	var err error
	if k.url, k.serverName, err = locate(t); err != nil {
		k.alone = key
	}
	return k
}

// judgeStall discards an unconfirmed timeout the controller caused: it
// could not run for a large part of the probe (see starvedShare), or its
// own goroutine ran that late after the deadline.
func (m *Monitor) judgeStall(r Result, from, to time.Time, timeout time.Duration) Result {
	if r.Status != Unhealthy || !r.TimedOut {
		return r
	}
	lost := r.Overrun
	if m.Stalls != nil {
		lost = max(lost, m.Stalls.Stalled(from, to))
	}
	if lost < max(timeout/starvedShare, minStarved) {
		return r
	}
	r.Status, r.Discard = Discarded, DiscardStarved
	r.Reason = fmt.Sprintf("%s, but the controller could not run for %s of it (CPU-throttled, paused or starved): not counted",
		r.Reason, lost.Round(time.Millisecond))
	return r
}

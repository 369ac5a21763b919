// Package stall measures how long this process could not run: paused
// (SIGSTOP), throttled by its cgroup's CPU quota (what a Kubernetes CPU
// limit is), or waiting for a CPU on a busy node. A probe that timed out
// while the controller itself could not run says nothing about the webhook
// it probed; the probe monitor asks a Watch before it counts one.
//
// The measure is a heartbeat: a goroutine that wakes every Period on the
// monotonic clock and records every wake-up that came late. A process that
// is not scheduled wakes late by as long as it was not; a healthy one wakes
// within a fraction of a millisecond. Beside it, every tenth beat reads the
// Go scheduler's own latencies (runtime/metrics /sched/latencies:seconds):
// a timer-woken heartbeat may jump the run queue that hundreds of runnable
// goroutines, or a garbage collector's assists, make every other goroutine
// wait in. Where the process's cgroup exposes cpu.stat (v1 or v2), its
// throttling counters are read for reports, so one can say which it was.
package stall

import (
	"context"
	"sync"
	"time"
)

// DefaultPeriod is how often the heartbeat wakes: fine enough to see a
// 100 ms CFS period's throttling, cheap enough (a timer wake-up) to cost
// nothing measurable.
const DefaultPeriod = 10 * time.Millisecond

// slack is how late a wake-up may be before it counts as a stall: timer
// granularity and an ordinary scheduling delay are not one.
const slack = 2 * time.Millisecond

// keep bounds the stalls remembered: at one stall per period, the last
// ~40 s at the default period, far more than the longest probe timeout.
const keep = 4096

// Watch is a heartbeat. The zero value is not ready: use New.
type Watch struct {
	period time.Duration
	// cpuStat is the cpu.stat to read: "" finds the process's own cgroup's
	// at each read (a process moved into a cgroup after it started, as a
	// harness does, reads the new one), "-" none.
	cpuStat string

	mu       sync.Mutex
	lastBeat time.Time // monotonic; zero until the heartbeat runs
	// all holds every stall; paused only the heartbeat's late wake-ups
	// (the process did not run at all), without the scheduler's latencies.
	all, paused ring
	// queueWait are the last two readings of the run queue's latency.
	queueWait [2]time.Duration
	started   bool
}

type interval struct{ from, to time.Time }

// ring is the last keep stalls, in time order, and their total.
type ring struct {
	ivs   [keep]interval
	next  int   // index of the next stall
	n     int   // stalls held
	total int64 // nanoseconds stalled since Start
}

// Options configure New.
type Options struct {
	// Period is the heartbeat's; zero means DefaultPeriod.
	Period time.Duration
	// CPUStat is the cgroup cpu.stat file to read; empty means the process's
	// own cgroup's (v2, else v1 cpu,cpuacct); "-" means none.
	CPUStat string
}

// New returns a Watch that measures once Start runs.
func New(opts Options) *Watch {
	if opts.Period <= 0 {
		opts.Period = DefaultPeriod
	}
	return &Watch{period: opts.Period, cpuStat: opts.CPUStat}
}

// Start runs the heartbeat until ctx ends.
func (w *Watch) Start(ctx context.Context) error {
	t := time.NewTicker(w.period)
	defer t.Stop()
	sched := newSchedLatency()
	beats := 0
	w.mu.Lock()
	w.lastBeat = time.Now()
	w.started = true
	w.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		now := time.Now()
		beats++
		var queued time.Duration
		if beats%schedEvery == 0 {
			queued = sched.wait()
		}
		w.mu.Lock()
		// A ticker drops the ticks it could not deliver, so a late wake-up
		// shows as a gap longer than the period.
		if late := now.Sub(w.lastBeat) - w.period; late > slack {
			iv := interval{from: now.Add(-late), to: now}
			w.all.add(iv)
			w.paused.add(iv)
		}
		if queued > slack {
			w.all.add(interval{from: now.Add(-queued), to: now})
		}
		if beats%schedEvery == 0 {
			w.queueWait[0], w.queueWait[1] = w.queueWait[1], queued
		}
		w.lastBeat = now
		w.mu.Unlock()
	}
}

// schedEvery is how many beats apart the scheduler's latencies are read.
const schedEvery = 10

// add records a stall, merged into the last one where they overlap (a
// throttled period shows both as a late beat and as run-queue latency).
func (r *ring) add(iv interval) {
	if r.n > 0 {
		last := &r.ivs[(r.next-1+keep)%keep]
		if !iv.from.After(last.to) {
			if iv.to.After(last.to) {
				r.total += int64(iv.to.Sub(last.to))
				last.to = iv.to
			}
			if iv.from.Before(last.from) {
				r.total += int64(last.from.Sub(iv.from))
				last.from = iv.from
			}
			return
		}
	}
	r.ivs[r.next] = iv
	r.next = (r.next + 1) % keep
	r.n = min(r.n+1, keep)
	r.total += int64(iv.to.Sub(iv.from))
}

// within sums the stalls' overlaps with [from, to].
func (r *ring) within(from, to time.Time) time.Duration {
	var sum time.Duration
	for i := range r.n {
		iv := r.ivs[(r.next-1-i+keep)%keep]
		if !iv.to.After(from) {
			break // in time order: older ones end earlier still
		}
		sum += overlap(iv, from, to)
	}
	return sum
}

// NeedLeaderElection: the heartbeat runs on every replica (it costs a timer).
func (w *Watch) NeedLeaderElection() bool { return false }

// Stalled reports how much of [from, to] this process could not run, or
// its goroutines waited to, as the heartbeat and the scheduler's latencies
// saw it, including a stall still in progress (the heartbeat itself has not
// run since). Zero before Start, and on a nil Watch.
func (w *Watch) Stalled(from, to time.Time) time.Duration { return w.stalled(from, to, false) }

// Paused reports how much of [from, to] this process did not run at all
// (stopped, throttled, not scheduled), as the heartbeat alone saw it:
// unlike Stalled, a busy run queue within a running stretch is not counted.
func (w *Watch) Paused(from, to time.Time) time.Duration { return w.stalled(from, to, true) }

func (w *Watch) stalled(from, to time.Time, pausedOnly bool) time.Duration {
	if w == nil || !to.After(from) {
		return 0
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		return 0
	}
	r := &w.all
	if pausedOnly {
		r = &w.paused
	}
	sum := r.within(from, to)
	if late := now.Sub(w.lastBeat) - w.period; late > slack {
		sum += overlap(interval{from: now.Add(-late), to: now}, from, to)
	}
	return min(sum, to.Sub(from))
}

// Ran reports whether this process ran without a pause for d at some time
// within [from, to], as the heartbeat saw it (Paused's stalls, and one still
// in progress). Before Start, and on a nil Watch, whether [from, to] is d
// long.
func (w *Watch) Ran(from, to time.Time, d time.Duration) bool {
	if w == nil {
		return to.Sub(from) >= d
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		return to.Sub(from) >= d
	}
	// Walk back from to, stall by stall (newest first), for a gap of d.
	end := to
	gap := func(iv interval) (found, done bool) {
		if end.Sub(later(iv.to, from)) >= d {
			return true, true
		}
		if iv.from.Before(end) {
			end = iv.from
		}
		return false, !end.After(from)
	}
	if late := now.Sub(w.lastBeat) - w.period; late > slack {
		if found, done := gap(interval{from: now.Add(-late), to: now}); done {
			return found
		}
	}
	r := &w.paused
	for i := range r.n {
		iv := r.ivs[(r.next-1-i+keep)%keep]
		if !iv.to.After(from) {
			break // in time order: older ones end earlier still
		}
		if found, done := gap(iv); done {
			return found
		}
	}
	return end.Sub(from) >= d
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// QueueWait is how long goroutines that became ready waited to run, lately
// (the 99th percentile, the larger of the last two 100 ms readings): while
// it is long, a goroutine's answer may sit unread although the process
// runs. Zero on a nil Watch.
func (w *Watch) QueueWait() time.Duration {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(w.queueWait[0], w.queueWait[1])
}

// Total is how long the process was stalled since Start, in all.
func (w *Watch) Total() time.Duration {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Duration(w.all.total)
}

// Throttling reads the cgroup's CPU throttling counters (a file read: for
// reports and metrics, not for every probe); ok is false where
// no cpu.stat is readable (no cgroup CPU controller, or no quota set).
func (w *Watch) Throttling() (t Throttling, ok bool) {
	if w == nil || w.cpuStat == "-" {
		return Throttling{}, false
	}
	c := &cgroupCPU{path: w.cpuStat}
	if w.cpuStat == "" {
		if c = findCgroupCPU(); c == nil {
			return Throttling{}, false
		}
	}
	return c.read()
}

func overlap(iv interval, from, to time.Time) time.Duration {
	start, end := iv.from, iv.to
	if start.Before(from) {
		start = from
	}
	if end.After(to) {
		end = to
	}
	if !end.After(start) {
		return 0
	}
	return end.Sub(start)
}

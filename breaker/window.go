package breaker

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// counts is a window's aggregate.
type counts struct {
	calls, failures, slow int64
}

// window is a sliding window of outcomes.
// Both take the current Unix second; count windows ignore it.
type window interface {
	record(sec int64, failure, slow bool)
	snapshot(sec int64) counts
}

func newWindow(c Config) window {
	if c.WindowType == CountBased {
		return &countWindow{ring: make([]uint8, c.WindowSize)}
	}
	return newTimeWindow(c.WindowSize)
}

const (
	outcomeFailure uint8 = 1 << iota
	outcomeSlow
	outcomePresent
)

// countWindow keeps the last len(ring) outcomes. Its running totals change
// together, so it takes a mutex; the lock-free path is the time window's.
type countWindow struct {
	mu   sync.Mutex
	ring []uint8
	pos  int
	tot  counts
}

func (w *countWindow) record(_ int64, failure, slow bool) {
	o := outcomePresent
	if failure {
		o |= outcomeFailure
	}
	if slow {
		o |= outcomeSlow
	}
	w.mu.Lock()
	w.tot.add(w.ring[w.pos], -1)
	w.ring[w.pos] = o
	w.tot.add(o, 1)
	w.pos = (w.pos + 1) % len(w.ring)
	w.mu.Unlock()
}

func (c *counts) add(o uint8, d int64) {
	if o&outcomePresent == 0 {
		return
	}
	c.calls += d
	if o&outcomeFailure != 0 {
		c.failures += d
	}
	if o&outcomeSlow != 0 {
		c.slow += d
	}
}

func (w *countWindow) snapshot(int64) counts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tot
}

// timeWindow keeps per-second buckets for the last size seconds. Writers
// pick a stripe at random, so concurrent calls rarely share a cache line;
// readers merge every stripe. A bucket belongs to one epoch second and is
// reset, under its stripe's mutex, when that slot is reused; buckets outside
// the window are skipped on read, so a quiet period expires them without any
// call arriving.
type timeWindow struct {
	size    int64 // seconds in the window
	slots   int64 // buckets per stripe: size rounded up to a power of two
	mask    uintptr
	stripes []stripe
}

type stripe struct {
	mu      sync.Mutex // taken only to reset a bucket for a new second
	buckets []bucket
	_       [40]byte // keep neighbouring stripes' headers off one cache line
}

// bucket is padded to a cache line.
type bucket struct {
	epoch                 atomic.Int64
	calls, failures, slow atomic.Int64
	_                     [32]byte
}

// maxBuckets bounds a window's memory (stripes × seconds × 64 bytes).
const maxBuckets = 1 << 16

func newTimeWindow(seconds int) *timeWindow {
	// Four stripes per P, so that goroutines running at once rarely share
	// one (stripes are picked by stack address, not by P).
	n := 4 << bits.Len(uint(runtime.GOMAXPROCS(0)-1))
	n = min(n, 64)
	for n > 1 && n*seconds > maxBuckets/2 {
		n /= 2
	}
	slots := 1 << bits.Len(uint(seconds-1))
	w := &timeWindow{size: int64(seconds), slots: int64(slots), mask: uintptr(n - 1), stripes: make([]stripe, n)}
	for i := range w.stripes {
		w.stripes[i].buckets = make([]bucket, slots)
		for j := range w.stripes[i].buckets {
			w.stripes[i].buckets[j].epoch.Store(-1 << 62)
		}
	}
	return w
}

func (w *timeWindow) record(sec int64, failure, slow bool) {
	s := &w.stripes[stripeHint()&w.mask]
	b := &s.buckets[sec&(w.slots-1)]
	if b.epoch.Load() != sec {
		s.roll(b, sec)
	}
	b.calls.Add(1)
	if failure {
		b.failures.Add(1)
	}
	if slow {
		b.slow.Add(1)
	}
}

// roll resets b for second sec unless another writer already did.
func (s *stripe) roll(b *bucket, sec int64) {
	s.mu.Lock()
	if e := b.epoch.Load(); e < sec {
		b.calls.Store(0)
		b.failures.Store(0)
		b.slow.Store(0)
		b.epoch.Store(sec)
	}
	s.mu.Unlock()
}

func (w *timeWindow) snapshot(sec int64) counts {
	var c counts
	for i := range w.stripes {
		for j := range w.stripes[i].buckets {
			b := &w.stripes[i].buckets[j]
			if e := b.epoch.Load(); e > sec-w.size && e <= sec {
				c.calls += b.calls.Load()
				c.failures += b.failures.Load()
				c.slow += b.slow.Load()
			}
		}
	}
	return c
}

// stripeHint spreads goroutines over stripes by the address of their stack:
// distinct for goroutines running at once, stable within one, and nearly
// free, unlike a random number. Stacks are at least 2 KiB apart, hence the
// shift; murmur3's finaliser mixes the few bits that differ into all of them.
func stripeHint() uintptr {
	var marker byte
	h := uint64(uintptr(unsafe.Pointer(&marker)) >> 11)
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return uintptr(h)
}

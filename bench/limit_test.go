package bench

import (
	"context"
	"testing"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"golang.org/x/sync/semaphore"

	"github.com/tripswitch-dev/tripswitch/limit"
)

// A concurrency limit's cost per call: take a permit and give it back
// (RunParallel, so ns/op is wall time per call with every P busy), and a
// rejection by a full limit. Each is sized so that the acquire rows never
// reject. The bare channel semaphore is the floor the goal is measured
// against: select on a buffered channel to take, receive to give back.

const roomy = 1 << 20

// limiter is one library's acquire and release, and its try-acquire of a
// full limit.
type limiter struct {
	name    string
	acquire func() bool // takes and gives back a permit; false if rejected
	full    func() bool // tries a limit that is full; true if (wrongly) admitted
}

func limiters(b *testing.B) []limiter {
	ctx := context.Background()
	ch, fullCh := make(chan struct{}, roomy), make(chan struct{}, 1)
	fullCh <- struct{}{}
	sem, fullSem := semaphore.NewWeighted(roomy), semaphore.NewWeighted(1)
	fullSem.TryAcquire(1)
	fsb, fullFsb := bulkhead.New[any](roomy), bulkhead.New[any](1)
	fullFsb.TryAcquirePermit()
	fsa := adaptivelimiter.NewBuilder[any]().WithLimits(1, roomy, roomy).Build()
	fullFsa := adaptivelimiter.NewBuilder[any]().WithLimits(1, 1, 1).Build()
	if _, ok := fullFsa.TryAcquirePermit(); !ok {
		b.Fatal("failsafe-go's adaptive limiter admitted nothing")
	}
	tsb := must(limit.NewBulkhead("bench", limit.BulkheadConfig{MaxConcurrentCalls: roomy}))
	fullTsb := must(limit.NewBulkhead("bench", limit.BulkheadConfig{MaxConcurrentCalls: 1}))
	tsa := must(limit.NewAdaptive("bench", limit.AdaptiveConfig{MinLimit: roomy, InitialLimit: roomy, MaxLimit: roomy}))
	fullTsa := must(limit.NewAdaptive("bench", limit.AdaptiveConfig{MinLimit: 1, InitialLimit: 1, MaxLimit: 1}))
	for _, l := range []limit.Limiter{fullTsb, fullTsa} {
		if _, err := l.Acquire(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return []limiter{
		{"bare-channel", func() bool {
			select {
			case ch <- struct{}{}:
				<-ch
				return true
			default:
				return false
			}
		}, func() bool {
			select {
			case fullCh <- struct{}{}:
				return true
			default:
				return false
			}
		}},
		{"x-sync-semaphore", func() bool {
			if !sem.TryAcquire(1) {
				return false
			}
			sem.Release(1)
			return true
		}, func() bool { return fullSem.TryAcquire(1) }},
		{"failsafe-go-bulkhead", func() bool {
			if !fsb.TryAcquirePermit() {
				return false
			}
			fsb.ReleasePermit()
			return true
		}, func() bool { return fullFsb.TryAcquirePermit() }},
		{"failsafe-go-adaptive", func() bool {
			p, ok := fsa.TryAcquirePermit()
			if ok {
				p.Record()
			}
			return ok
		}, func() bool { _, ok := fullFsa.TryAcquirePermit(); return ok }},
		{"tripswitch-bulkhead", func() bool {
			p, err := tsb.Acquire(ctx)
			p.Release()
			return err == nil
		}, func() bool { _, err := fullTsb.Acquire(ctx); return err == nil }},
		{"tripswitch-adaptive", func() bool {
			p, err := tsa.Acquire(ctx)
			p.Release()
			return err == nil
		}, func() bool { _, err := fullTsa.Acquire(ctx); return err == nil }},
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// BenchmarkLimitAcquireRelease: a permit taken and given back, every P
// busy. Goal: tripswitch's bulkhead ≤ 1.5× bare-channel at -cpu 1 and 2,
// 0 allocs.
func BenchmarkLimitAcquireRelease(b *testing.B) {
	for _, l := range limiters(b) {
		b.Run(l.name, func(b *testing.B) {
			run(b, true, func() {
				if !l.acquire() {
					b.Fatal("rejected")
				}
			})
		})
	}
}

// BenchmarkLimitRejection: a call refused by a full limit, every P busy.
// Goal: tripswitch ≤ 1.5× bare-channel at -cpu 1 and 2, counting off (the
// default); the -counted rows are the same with Metrics counting the
// rejections, as with breakerprom's collector.
func BenchmarkLimitRejection(b *testing.B) {
	ls := limiters(b)
	ctx := context.Background()
	for _, name := range []string{"tripswitch-bulkhead-counted", "tripswitch-adaptive-counted"} {
		var l limit.Limiter = must(limit.NewBulkhead("bench", limit.BulkheadConfig{MaxConcurrentCalls: 1}))
		if name == "tripswitch-adaptive-counted" {
			l = must(limit.NewAdaptive("bench", limit.AdaptiveConfig{MinLimit: 1, InitialLimit: 1, MaxLimit: 1}))
		}
		if _, err := l.Acquire(ctx); err != nil {
			b.Fatal(err)
		}
		l.(interface{ EnableRejectionCount() }).EnableRejectionCount()
		ls = append(ls, limiter{name: name, full: func() bool { _, err := l.Acquire(ctx); return err == nil }})
	}
	for _, l := range ls {
		b.Run(l.name, func(b *testing.B) {
			run(b, true, func() {
				if l.full() {
					b.Fatal("admitted")
				}
			})
		})
	}
}

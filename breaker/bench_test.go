package breaker_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

func benchBreaker(b *testing.B, wt breaker.WindowType) *breaker.Breaker {
	cb, err := breaker.New("bench", breaker.Config{WindowType: wt, WindowSize: 60, MinimumNumberOfCalls: 100, FailureRateThreshold: 50})
	if err != nil {
		b.Fatal(err)
	}
	return cb
}

// BenchmarkClosedSuccess is the hot path: admit, succeed, record.
func BenchmarkClosedSuccess(b *testing.B) {
	for _, wt := range []breaker.WindowType{breaker.TimeBased, breaker.CountBased} {
		b.Run(wt.String()+"/serial", func(b *testing.B) {
			cb := benchBreaker(b, wt)
			b.ReportAllocs()
			for b.Loop() {
				p, _ := cb.Allow()
				p.Done(breaker.Success)
			}
		})
		b.Run(wt.String()+"/parallel", func(b *testing.B) {
			cb := benchBreaker(b, wt)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, _ := cb.Allow()
					p.Done(breaker.Success)
				}
			})
		})
	}
}

func BenchmarkExecuteClosedSuccess(b *testing.B) {
	cb := benchBreaker(b, breaker.TimeBased)
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 1, nil }
	b.ReportAllocs()
	for b.Loop() {
		_, _ = breaker.Execute(ctx, cb, fn)
	}
}

func BenchmarkOpenRejection(b *testing.B) {
	cb := benchBreaker(b, breaker.TimeBased)
	cb.Open()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = cb.Allow()
	}
}

func BenchmarkHalfOpenRejection(b *testing.B) {
	clk := newClock()
	cb, err := breaker.New("bench", breaker.Config{WaitDurationInOpenState: time.Second, PermittedNumberOfCallsInHalfOpenState: 1, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	cb.Open()
	clk.Advance(time.Second)
	if _, err := cb.Allow(); err != nil { // takes the only permit
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = cb.Allow()
	}
}

// BenchmarkFailureCostByWindowLength: with a time window the cost of a
// failure does not depend on how long the window is.
func BenchmarkFailureCostByWindowLength(b *testing.B) {
	for _, size := range []int{60, 86400} {
		b.Run(fmt.Sprintf("window=%ds", size), func(b *testing.B) {
			cb, err := breaker.New("bench", breaker.Config{WindowType: breaker.TimeBased, WindowSize: size, MinimumNumberOfCalls: 100, FailureRateThreshold: 60})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				p, _ := cb.Allow()
				if i++; i%2 == 0 {
					p.Done(breaker.Failure)
				} else {
					p.Done(breaker.Success)
				}
			}
		})
	}
}

// BenchmarkMemoryPerBreaker reports the heap a 60s TIME_BASED breaker holds
// at GOMAXPROCS=16 once its window is full (a call every second for two
// minutes), and after it has opened and closed 100 times.
func BenchmarkMemoryPerBreaker(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	for _, cycles := range []int{0, 100} {
		b.Run(fmt.Sprintf("opened=%d", cycles), func(b *testing.B) {
			const n = 200
			for b.Loop() {
				clk := newClock()
				before := heapInUse()
				keep := make([]*breaker.Breaker, n)
				for i := range keep {
					cb, err := breaker.New("m", breaker.Config{WindowType: breaker.TimeBased, WindowSize: 60, MinimumNumberOfCalls: 100, Clock: clk})
					if err != nil {
						b.Fatal(err)
					}
					keep[i] = cb
				}
				for range cycles {
					for _, cb := range keep {
						cb.Open()
						cb.Close()
					}
				}
				for range 120 {
					clk.Advance(time.Second)
					for _, cb := range keep {
						p, _ := cb.Allow()
						p.Done(breaker.Success)
					}
				}
				b.ReportMetric(float64(heapInUse()-before)/n, "B/breaker")
				runtime.KeepAlive(keep)
			}
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkClosedSuccessCounting is the closed path with Totals counting on
// (what breakerprom enables): one more atomic add per call.
func BenchmarkClosedSuccessCounting(b *testing.B) {
	for _, wt := range []breaker.WindowType{breaker.TimeBased, breaker.CountBased} {
		b.Run(wt.String(), func(b *testing.B) {
			cb := benchBreaker(b, wt)
			cb.EnableTotals()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, _ := cb.Allow()
					p.Done(breaker.Success)
				}
			})
		})
	}
}

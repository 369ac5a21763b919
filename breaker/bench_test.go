package breaker_test

import (
	"context"
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

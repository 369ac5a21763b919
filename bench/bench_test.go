// Package bench compares tripswitch's breaker with its Go peers on the same
// workloads: a call that succeeds through a CLOSED circuit, serial and in
// parallel, through each library's executor API and its direct permit API.
package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eapache/go-resiliency/breaker"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/sony/gobreaker/v2"

	tsbreaker "github.com/tripswitch-dev/tripswitch/breaker"
)

// Every peer is configured alike where it can be: a 60s time-based rolling
// window, a 50% failure-rate threshold after 100 calls.
const (
	window   = 60 * time.Second
	minCalls = 100
)

func tripswitch(b *testing.B) *tsbreaker.Breaker {
	return tripswitchWith(b, tsbreaker.TimeBased, 50)
}

func tripswitchWith(b *testing.B, wt tsbreaker.WindowType, threshold float64) *tsbreaker.Breaker {
	size := int(window / time.Second)
	if wt == tsbreaker.CountBased {
		size = 100
	}
	cb, err := tsbreaker.New("bench", tsbreaker.Config{WindowType: wt, WindowSize: size, MinimumNumberOfCalls: minCalls, FailureRateThreshold: threshold})
	if err != nil {
		b.Fatal(err)
	}
	return cb
}

func gobreakerSettings() gobreaker.Settings {
	return gobreaker.Settings{
		Name: "bench", Interval: window, BucketPeriod: time.Second, Timeout: time.Minute,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.Requests >= minCalls && float64(c.TotalFailures)/float64(c.Requests) >= 0.5
		},
	}
}

func failsafeBreaker() circuitbreaker.CircuitBreaker[int] {
	return circuitbreaker.NewBuilder[int]().WithFailureRateThreshold(0.5, minCalls, window).Build()
}

func ok() (int, error)                   { return 1, nil }
func okCtx(context.Context) (int, error) { return 1, nil }
func okErr() error                       { return nil }

// run benchmarks op serially or with RunParallel.
func run(b *testing.B, parallel bool, op func()) {
	b.ReportAllocs()
	if !parallel {
		for b.Loop() {
			op()
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			op()
		}
	})
}

func BenchmarkClosedSuccess(b *testing.B) {
	for _, mode := range []struct {
		name     string
		parallel bool
	}{{"serial", false}, {"parallel", true}} {
		b.Run("tripswitch-direct/"+mode.name, func(b *testing.B) {
			cb := tripswitch(b)
			run(b, mode.parallel, func() {
				p, err := cb.Allow()
				if err == nil {
					p.Done(tsbreaker.Success)
				}
			})
		})
		b.Run("tripswitch-execute/"+mode.name, func(b *testing.B) {
			cb := tripswitch(b)
			ctx := context.Background()
			run(b, mode.parallel, func() { _, _ = tsbreaker.Execute(ctx, cb, okCtx) })
		})
		b.Run("gobreaker-v2-rolling-execute/"+mode.name, func(b *testing.B) {
			cb := gobreaker.NewCircuitBreaker[int](gobreakerSettings())
			run(b, mode.parallel, func() { _, _ = cb.Execute(ok) })
		})
		b.Run("gobreaker-v2-rolling-twostep/"+mode.name, func(b *testing.B) {
			cb := gobreaker.NewTwoStepCircuitBreaker[int](gobreakerSettings())
			run(b, mode.parallel, func() {
				if done, err := cb.Allow(); err == nil {
					done(nil)
				}
			})
		})
		b.Run("failsafe-go-executor/"+mode.name, func(b *testing.B) {
			exec := failsafe.With[int](failsafeBreaker())
			run(b, mode.parallel, func() { _, _ = exec.Get(ok) })
		})
		b.Run("failsafe-go-direct/"+mode.name, func(b *testing.B) {
			cb := failsafeBreaker()
			run(b, mode.parallel, func() {
				if cb.TryAcquirePermit() {
					cb.RecordSuccess()
				}
			})
		})
		b.Run("eapache-no-window/"+mode.name, func(b *testing.B) {
			cb := breaker.New(minCalls, 1, time.Minute)
			run(b, mode.parallel, func() { _ = cb.Run(okErr) })
		})
	}
}

// BenchmarkOpenRejection measures failing fast.
func BenchmarkOpenRejection(b *testing.B) {
	b.Run("tripswitch", func(b *testing.B) {
		cb := tripswitch(b)
		cb.Open()
		run(b, false, func() { _, _ = cb.Allow() })
	})
	b.Run("gobreaker-v2-rolling", func(b *testing.B) {
		s := gobreakerSettings()
		s.ReadyToTrip = func(gobreaker.Counts) bool { return true }
		cb := gobreaker.NewTwoStepCircuitBreaker[int](s)
		if done, err := cb.Allow(); err == nil {
			done(context.Canceled) // one failure trips it
		}
		run(b, false, func() { _, _ = cb.Allow() })
	})
	b.Run("failsafe-go-direct", func(b *testing.B) {
		cb := failsafeBreaker()
		cb.Open()
		run(b, false, func() { _ = cb.TryAcquirePermit() })
	})
}

// mixedThreshold keeps every circuit CLOSED under the mixed workloads (at
// most 50% failures), so the benchmark measures recording and deciding, not
// rejecting.
const mixedThreshold = 60

// BenchmarkMixed is the failure path: calls through a CLOSED circuit of
// which every 20th (5%) or every 2nd (50%) fails. Run it with -cpu 1,2 and
// with -cpu 16 for the cost at GOMAXPROCS=16.
func BenchmarkMixed(b *testing.B) {
	for _, every := range []int{20, 2} {
		pct := fmt.Sprintf("%dpct", 100/every)
		for _, wt := range []tsbreaker.WindowType{tsbreaker.CountBased, tsbreaker.TimeBased} {
			b.Run(pct+"/tripswitch-"+strings.ToLower(strings.TrimSuffix(wt.String(), "_BASED")), func(b *testing.B) {
				cb := tripswitchWith(b, wt, mixedThreshold)
				mixed(b, every, func(fail bool) {
					if p, err := cb.Allow(); err == nil {
						if fail {
							p.Done(tsbreaker.Failure)
						} else {
							p.Done(tsbreaker.Success)
						}
					}
				})
				if s := cb.State(); s != tsbreaker.Closed {
					b.Fatalf("circuit %s: the workload must keep it closed", s)
				}
			})
		}
		b.Run(pct+"/gobreaker-v2-rolling-twostep", func(b *testing.B) {
			s := gobreakerSettings()
			s.ReadyToTrip = func(c gobreaker.Counts) bool {
				return c.Requests >= minCalls && float64(c.TotalFailures)/float64(c.Requests) >= mixedThreshold/100.0
			}
			cb := gobreaker.NewTwoStepCircuitBreaker[int](s)
			mixed(b, every, func(fail bool) {
				if done, err := cb.Allow(); err == nil {
					if fail {
						done(errFail)
					} else {
						done(nil)
					}
				}
			})
			if s := cb.State(); s != gobreaker.StateClosed {
				b.Fatalf("gobreaker %s: the workload must keep it closed", s)
			}
		})
		b.Run(pct+"/failsafe-go-direct", func(b *testing.B) {
			cb := circuitbreaker.NewBuilder[int]().WithFailureRateThreshold(mixedThreshold/100.0, minCalls, window).Build()
			mixed(b, every, func(fail bool) {
				if cb.TryAcquirePermit() {
					if fail {
						cb.RecordFailure()
					} else {
						cb.RecordSuccess()
					}
				}
			})
			if !cb.IsClosed() {
				b.Fatal("failsafe-go circuit opened: the workload must keep it closed")
			}
		})
	}
}

var errFail = errors.New("fail")

// mixed runs op in parallel, failing every every-th call of each goroutine.
func mixed(b *testing.B, every int, op func(fail bool)) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			op(i%every == 0)
		}
	})
}

package accessgate_test

import (
	"context"
	"testing"

	"github.com/tripswitch-dev/tripswitch/accessgate"
)

// BenchmarkCacheHit is a decision served from the cache (goal: ≤ 100 ns,
// 0 allocations), serial and from every core at once.
func BenchmarkCacheHit(b *testing.B) {
	gate, err := accessgate.New(accessgate.Config{Logger: discard(),
		Lookup: accessgate.LookupFunc(func(context.Context, string, string) (bool, error) { return true, nil })})
	if err != nil {
		b.Fatal(err)
	}
	defer gate.Close()
	ctx := context.Background()
	if err := gate.Check(ctx, "alice", "orders"); err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if gate.Check(ctx, "alice", "orders") != nil {
				b.Fatal("denied")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if gate.Check(ctx, "alice", "orders") != nil {
					b.Fatal("denied")
				}
			}
		})
	})
}

package accessgate_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tripswitch-dev/tripswitch/accessgate"
)

// FuzzDistinctPairsNeverShareAnEntry: two different (subject, resource)
// pairs never share a lookup or a cache entry, whatever bytes they hold: the
// service allows only the first pair, and the second is denied both while
// the first's lookup is in flight and from the cache afterwards.
//
//	go test -run '^$' -fuzz FuzzDistinctPairsNeverShareAnEntry
func FuzzDistinctPairsNeverShareAnEntry(f *testing.F) {
	f.Add("a\x00b", "c", "a", "b\x00c")
	f.Add("1:a", "b", "1", ":ab")
	f.Add("ab", "", "a", "b")
	f.Add("fresh:x", "y", "x", "y")
	f.Add("é", "r", "\xc3", "\xa9r")
	f.Fuzz(func(t *testing.T, s1, r1, s2, r2 string) {
		if s1 == "" || r1 == "" || s2 == "" || r2 == "" || (s1 == s2 && r1 == r2) {
			t.Skip()
		}
		var calls atomic.Int64
		release := make(chan struct{})
		started := make(chan struct{}, 2)
		g, err := accessgate.New(accessgate.Config{Logger: discard(), Lookup: accessgate.LookupFunc(func(_ context.Context, s, r string) (bool, error) {
			calls.Add(1)
			if s == s1 && r == r1 {
				started <- struct{}{}
				<-release
				return true, nil
			}
			return false, nil
		})})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		ctx := context.Background()
		var wg sync.WaitGroup
		var first error
		wg.Go(func() { first = g.Check(ctx, s1, r1) })
		<-started
		// The first pair's lookup is held: a second pair that shared its
		// flight would wait for it (and hang the run, which the fuzzer
		// reports) and then get its allow.
		if err := g.Check(ctx, s2, r2); !errors.Is(err, accessgate.ErrDenied) {
			t.Fatalf("(%q, %q) while (%q, %q) is looked up: %v, want denied", s2, r2, s1, r1, err)
		}
		close(release)
		wg.Wait()
		if first != nil {
			t.Fatalf("(%q, %q): %v, want allowed", s1, r1, first)
		}
		if err := g.Check(ctx, s2, r2); !errors.Is(err, accessgate.ErrDenied) {
			t.Fatalf("(%q, %q) from the cache: %v, want denied", s2, r2, err)
		}
		if err := g.Check(ctx, s1, r1); err != nil {
			t.Fatalf("(%q, %q) from the cache: %v, want allowed", s1, r1, err)
		}
		if n := calls.Load(); n != 2 {
			t.Fatalf("%d lookups, want one per pair", n)
		}
	})
}

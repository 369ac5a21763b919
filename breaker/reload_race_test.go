package breaker_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/tripswitch-dev/tripswitch/breaker"
)

// TestConcurrentReloadsLeaveOneFileEverywhere: two Reloads racing each other
// are ordered; once both returned, every circuit, the ones that existed and
// the ones created after, has the settings of one and the same file.
func TestConcurrentReloadsLeaveOneFileEverywhere(t *testing.T) {
	files := make([]breaker.File, 2)
	for i, threshold := range []int{30, 40} {
		f, err := breaker.ParseFile(fmt.Appendf(nil, `{"defaults":{"failureRateThreshold":%d}}`, threshold))
		if err != nil {
			t.Fatal(err)
		}
		files[i] = f
	}
	for round := range 200 {
		r, err := breaker.NewRegistry(breaker.Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			r.Get(fmt.Sprintf("old-%d", i))
		}
		var wg sync.WaitGroup
		for _, f := range files {
			wg.Go(func() {
				if _, err := r.Reload(f); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for i := range 50 {
			r.Get(fmt.Sprintf("new-%d", i))
		}
		want := r.Get("old-0").Config().FailureRateThreshold
		for _, b := range r.All() {
			if got := b.Config().FailureRateThreshold; got != want {
				t.Fatalf("round %d: %s has failureRateThreshold %v, old-0 %v: the circuits hold a mix of both files", round, b.Name(), got, want)
			}
		}
	}
}

package policy

import (
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

func TestCheckMaxOpen(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	const hour = time.Hour
	for _, tc := range []struct {
		name      string
		openedAt  time.Time
		now       time.Time
		max       time.Duration
		on        v1alpha1.OnMaxOpen
		want      MaxOpen
		wantNoDdl bool
	}{
		{"no limit", t0, t0.Add(100 * hour), 0, v1alpha1.OnMaxOpenClose, MaxOpen{}, true},
		{"no record", time.Time{}, t0, hour, v1alpha1.OnMaxOpenClose, MaxOpen{}, true},
		{"within", t0, t0.Add(20 * time.Minute), hour, v1alpha1.OnMaxOpenClose, MaxOpen{Remaining: 40 * time.Minute, Deadline: t0.Add(hour)}, false},
		{"exactly at it", t0, t0.Add(hour), hour, v1alpha1.OnMaxOpenStay, MaxOpen{TooLong: true, Deadline: t0.Add(hour)}, false},
		{"past it, stay", t0, t0.Add(2 * hour), hour, v1alpha1.OnMaxOpenStay, MaxOpen{TooLong: true, Deadline: t0.Add(hour)}, false},
		{"past it, close", t0, t0.Add(2 * hour), hour, v1alpha1.OnMaxOpenClose, MaxOpen{TooLong: true, Close: true, Deadline: t0.Add(hour)}, false},
		{"opened in the future (skew)", t0.Add(hour), t0, hour, v1alpha1.OnMaxOpenClose, MaxOpen{Remaining: hour, Deadline: t0.Add(hour)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CheckMaxOpen(tc.openedAt, tc.now, tc.max, tc.on); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

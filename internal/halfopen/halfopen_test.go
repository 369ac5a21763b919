package halfopen

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

var (
	t0   = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	spec = *(*v1alpha1.HalfOpenSpec)(nil).Resolve() // the defaults: 30s, 30s, 2m, 10m, 6%
)

func open(trialAgo time.Duration, failed int32, next *time.Time) *v1alpha1.CircuitRecord {
	rec := &v1alpha1.CircuitRecord{Action: v1alpha1.OpenActionBypass, MatchCondition: "tripswitch.dev/circuit-open", FailedTrials: failed}
	if trialAgo >= 0 {
		rec.Trial = &v1alpha1.TrialRecord{StartedAt: metav1.NewTime(t0.Add(-trialAgo)), SamplePercent: "6.25%", SetFailurePolicy: "Ignore"}
	}
	if next != nil {
		rec.NextTrialAt = &metav1.Time{Time: *next}
	}
	return rec
}

// openedAgo is a circuit opened d before t0, no trial yet.
func openedAgo(d time.Duration) *v1alpha1.CircuitRecord {
	rec := open(-1, 0, nil)
	rec.OpenedAt = metav1.NewTime(t0.Add(-d))
	return rec
}

func TestJudge(t *testing.T) {
	later := t0.Add(time.Minute)
	earlier := t0.Add(-time.Second)
	for _, tc := range []struct {
		name string
		in   Input
		want Step
		next time.Time
		says string
	}{
		{"closed", Input{}, Wait, time.Time{}, "closed"},
		{"probes not healthy long enough", Input{Record: open(-1, 0, nil), HealthyFor: 10 * time.Second}, Wait, t0.Add(20 * time.Second), "after 30s of healthy probes"},
		{"probes failing", Input{Record: open(-1, 0, nil), ProbeFailed: true}, Wait, time.Time{}, "healthy probes"},
		{"healthy long enough", Input{Record: open(-1, 0, nil), HealthyFor: 30 * time.Second}, Start, time.Time{}, "lets 6.25%"},
		{"opened on the signal while the probes passed", Input{Record: openedAgo(5 * time.Second), HealthyFor: time.Hour}, Wait, t0.Add(25 * time.Second), "since the circuit opened (healthy for 5s)"},
		{"healthy since the open for after", Input{Record: openedAgo(30 * time.Second), HealthyFor: time.Hour}, Start, time.Time{}, "healthy for 30s since the circuit opened"},
		{"healthy for less than after since the open", Input{Record: openedAgo(time.Minute), HealthyFor: 20 * time.Second}, Wait, t0.Add(10 * time.Second), "(healthy for 20s)"},
		{"backoff not over", Input{Record: open(-1, 2, &later), HealthyFor: time.Hour}, Wait, later, "2 failed trial(s)"},
		{"backoff over", Input{Record: open(-1, 2, &earlier), HealthyFor: time.Hour}, Start, time.Time{}, ""},
		{"running", Input{Record: open(10*time.Second, 0, nil), Calls: Calls{Calls: 50}}, Run, t0.Add(20 * time.Second), "50 trial call(s)"},
		{"probe fails in the trial", Input{Record: open(10*time.Second, 0, nil), ProbeFailed: true}, Fail, t0.Add(30 * time.Second), "a probe failed"},
		{"calls fail in the trial", Input{Record: open(10*time.Second, 1, nil), Calls: Calls{Calls: 10, Failures: 6, Failing: true}}, Fail, t0.Add(time.Minute), "60%"},
		{"passed", Input{Record: open(30*time.Second, 0, nil), Calls: Calls{Calls: 10, Failures: 2}}, Pass, time.Time{}, "passed (10 trial call(s), 2 failed"},
		{"too few calls", Input{Record: open(40*time.Second, 0, nil), Calls: Calls{Calls: 9}}, Run, t0.Add(80 * time.Second), "waiting for 10"},
		{"too few calls by maxWait", Input{Record: open(2*time.Minute, 0, nil), Calls: Calls{Calls: 3}}, NoTraffic, time.Time{}, "only 3 trial call(s)"},
		{"blind signal by maxWait", Input{Record: open(2*time.Minute, 0, nil), Calls: Calls{Calls: 30, Unreadable: true, Message: "403"}}, NoTraffic, time.Time{}, "could not be read (403)"},
		{"blind signal never passes", Input{Record: open(time.Minute, 0, nil), Calls: Calls{Calls: 30, Unreadable: true, Message: "403"}}, Run, t0.Add(time.Minute), "cannot be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Now, in.Spec, in.MinimumCalls = t0, spec, 10
			v := Judge(in)
			if v.Step != tc.want || !v.Next.Equal(tc.next) || !strings.Contains(v.Message, tc.says) {
				t.Errorf("Judge = %+v, want step %s next %v saying %q", v, tc.want, tc.next, tc.says)
			}
		})
	}
}

func TestBackoffDoublesUpToTheCap(t *testing.T) {
	s := v1alpha1.ResolvedHalfOpen{After: 30 * time.Second, MaxBackoff: 10 * time.Minute}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	for n, w := range want {
		if got := Backoff(s, int32(n)); got != w {
			t.Errorf("Backoff after %d failures = %v, want %v", n, got, w)
		}
	}
	if got := Backoff(s, 1<<30); got != 10*time.Minute {
		t.Errorf("Backoff after very many failures = %v, want the cap", got)
	}
	if got := Backoff(v1alpha1.ResolvedHalfOpen{After: time.Hour, MaxBackoff: time.Minute}, 0); got != time.Minute {
		t.Errorf("Backoff with after over the cap = %v, want the cap", got)
	}
}

package demo

import (
	"strings"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// The delayed phase is judged by what the API server did: a create admitted
// after the last read that showed the circuit closed was admitted under the
// opened configuration; one admitted before it would be Fail letting a
// create through.
func TestDelayedCreatesAreJudgedByTheConfigurationTheAPIServerRead(t *testing.T) {
	base := func() Run {
		r := Run{Action: v1alpha1.OpenActionBypass, StillClosedAt: 10 * time.Second, Before: "{}", After: "{}", Webhook: map[Phase]string{
			PhaseHealthy: "failurePolicy=Fail", PhaseRecovered: "failurePolicy=Fail"}}
		for _, p := range []Phase{PhaseHealthy, PhaseOpen, PhaseRecovered} {
			r.Samples = append(r.Samples, Sample{Phase: p, Latency: time.Millisecond, Admitted: true})
		}
		r.Samples = append(r.Samples, Sample{Phase: PhaseDelayed, At: 5 * time.Second, Latency: time.Second})
		return r
	}
	r := base()
	r.Samples = append(r.Samples, Sample{Phase: PhaseDelayed, At: 9500 * time.Millisecond, Latency: time.Second, Admitted: true})
	if f := check(r); len(f) != 0 {
		t.Fatalf("a create admitted as the circuit opened was called a failure: %v", f)
	}
	r = base()
	r.Samples = append(r.Samples, Sample{Phase: PhaseDelayed, At: 8 * time.Second, Latency: time.Second, Admitted: true})
	if f := check(r); len(f) != 1 || !strings.Contains(f[0], "still read closed") {
		t.Fatalf("a create admitted while the configuration read closed: %v, want one failure", f)
	}
}

// Where the webhook mutates, the healthy and recovered creates must all have
// gone through it and the open ones none; a close must restore the
// configuration byte for byte.
func TestMutationsAndTheRestoredConfigurationAreChecked(t *testing.T) {
	base := func() Run {
		r := Run{Action: v1alpha1.OpenActionIgnore, Mutates: true, Before: `[{"a":"1"}]`, After: `[{"a":"1"}]`, Webhook: map[Phase]string{
			PhaseHealthy: "failurePolicy=Fail", PhaseRecovered: "failurePolicy=Fail"}}
		r.Samples = append(r.Samples,
			Sample{Phase: PhaseHealthy, Latency: time.Millisecond, Admitted: true, Mutated: true},
			Sample{Phase: PhaseDelayed, Latency: time.Second},
			Sample{Phase: PhaseOpen, Latency: time.Second, Admitted: true},
			Sample{Phase: PhaseRecovered, Latency: time.Millisecond, Admitted: true, Mutated: true})
		return r
	}
	if f := check(base()); len(f) != 0 {
		t.Fatalf("a run that behaved: %v", f)
	}
	r := base()
	r.Samples[3].Mutated = false
	if f := check(r); len(f) != 1 || !strings.Contains(f[0], "0 of 1 creates mutated") {
		t.Errorf("a recovered create the webhook did not mutate: %v, want one failure", f)
	}
	r = base()
	r.Samples[2].Mutated = true
	if f := check(r); len(f) != 1 || !strings.Contains(f[0], "1 creates mutated, want none") {
		t.Errorf("an open create the webhook mutated: %v, want one failure", f)
	}
	r = base()
	r.After = `[{"a":"2"}]`
	if f := check(r); len(f) != 1 || !strings.Contains(f[0], "not what it was before") {
		t.Errorf("a configuration not restored byte for byte: %v, want one failure", f)
	}
}

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
		r := Run{Action: v1alpha1.OpenActionBypass, StillClosedAt: 10 * time.Second, Webhook: map[Phase]string{
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

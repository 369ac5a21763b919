package probe_test

import (
	"testing"

	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// TestCompare: only a verdict reaching a threshold is a decision; what a
// status condition shows but no write acts on is a report; a count moving,
// or a verdict falling back to Pending, is nothing.
func TestCompare(t *testing.T) {
	obs := func(v probe.Verdict, st probe.Status, reason string) probe.Observation {
		return probe.Observation{Verdict: v, Last: probe.Result{Status: st, Reason: reason}}
	}
	healthy := obs(probe.VerdictHealthy, probe.Healthy, "ok")
	pendingDown := obs(probe.VerdictPending, probe.Unhealthy, "timeout")
	unhealthy := obs(probe.VerdictUnhealthy, probe.Unhealthy, "timeout")
	pendingUp := obs(probe.VerdictPending, probe.Healthy, "ok")
	unknown := obs(probe.VerdictPending, probe.Unknown, "no url")
	late := healthy
	late.Late = true
	partial := healthy
	partial.Last.Healthy, partial.Last.Total = 1, 2
	for _, c := range []struct {
		name       string
		prev, next probe.Observation
		want       probe.Change
	}{
		{"first probe, no verdict yet", probe.Observation{}, pendingUp, probe.Unchanged},
		{"first probe, of endpoints", probe.Observation{}, func() probe.Observation { o := pendingUp; o.Last.Healthy, o.Last.Total = 2, 2; return o }(), probe.Unchanged},
		{"first probe, unprobeable", probe.Observation{}, unknown, probe.ReportChange},
		{"first probe reaches a threshold of one", probe.Observation{}, healthy, probe.DecisionChange},
		{"healthy stays healthy", healthy, healthy, probe.Unchanged},
		{"one failure leaves the healthy verdict", healthy, pendingDown, probe.Unchanged},
		{"another failure below the threshold", pendingDown, pendingDown, probe.Unchanged},
		{"failures reach the threshold", pendingDown, unhealthy, probe.DecisionChange},
		{"unhealthy stays unhealthy", unhealthy, unhealthy, probe.Unchanged},
		{"one success leaves the unhealthy verdict", unhealthy, pendingUp, probe.Unchanged},
		{"successes reach the threshold", pendingUp, healthy, probe.DecisionChange},
		{"straight from healthy to unhealthy (threshold one)", healthy, unhealthy, probe.DecisionChange},
		{"becomes unprobeable", healthy, unknown, probe.ReportChange},
		{"unprobeable for the same reason", unknown, unknown, probe.Unchanged},
		{"unprobeable for another reason", unknown, obs(probe.VerdictPending, probe.Unknown, "no host"), probe.ReportChange},
		{"probeable again", unknown, pendingUp, probe.ReportChange},
		{"probes fall behind", healthy, late, probe.ReportChange},
		{"endpoint counts change", healthy, partial, probe.ReportChange},
	} {
		if got := probe.Compare(c.prev, c.next); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

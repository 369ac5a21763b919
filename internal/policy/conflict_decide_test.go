package policy

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

func TestDecideConflicted(t *testing.T) {
	cases := []struct {
		name       string
		in         Input
		wantWrite  Write
		wantReason string
	}{
		{"a conflicted breaker does not open in an outage",
			Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionIgnore, BreakerUID: uid, TargetFound: true, State: closedFail, Health: down, ConflictWinner: "orig"},
			WriteNone, ReasonConflicted},
		{"a conflicted breaker does not open in ForceOpen",
			Input{Mode: v1alpha1.ModeForceOpen, Action: v1alpha1.OpenActionIgnore, BreakerUID: uid, TargetFound: true, State: closedFail, Health: up, ConflictWinner: "orig"},
			WriteNone, ReasonConflicted},
		{"a conflicted breaker whose winner holds the record says Conflicted, not RecordOwnedByAnotherBreaker",
			Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionIgnore, BreakerUID: uid, TargetFound: true, State: othersRecord, Health: down, ConflictWinner: "orig"},
			WriteNone, ReasonConflicted},
		{"a conflicted breaker holding a circuit from before closes it on recovery",
			Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionIgnore, BreakerUID: uid, TargetFound: true, State: openIgnore, Health: up, ConflictWinner: "orig"},
			WriteClose, ReasonWebhookRecovered},
		{"a conflicted breaker holding a circuit from before keeps it while the webhook is down",
			Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionIgnore, BreakerUID: uid, TargetFound: true, State: openIgnore, Health: down, ConflictWinner: "orig"},
			WriteNone, ReasonConflicted},
		{"a conflicted breaker holding a circuit whose action changed closes it and never reopens",
			Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionBypass, BreakerUID: uid, TargetFound: true, State: openIgnore, Health: down, ConflictWinner: "orig"},
			WriteClose, ReasonOpenActionChanged},
		{"a conflicted breaker being deleted is released as any other",
			Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionIgnore, BreakerUID: uid, TargetFound: true, State: closedFail, Health: down, Deleting: true, ConflictWinner: "orig"},
			WriteNone, ReasonFinalizerReleased},
		{"a breaker without a conflict opens in an outage",
			Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionIgnore, BreakerUID: uid, TargetFound: true, State: closedFail, Health: down},
			WriteOpen, ReasonWebhookUnhealthy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.in)
			if d.Write != c.wantWrite || d.Reason != c.wantReason {
				t.Fatalf("Decide = %s/%s (%s), want %s/%s", d.Write, d.Reason, d.Message, c.wantWrite, c.wantReason)
			}
			if d.Reason == ReasonConflicted && !d.Blocked {
				t.Fatal("a conflicted decision must leave Ready False (Blocked)")
			}
		})
	}
}

// FuzzDecideConflicted: whatever else holds, a conflicted breaker never opens.
func FuzzDecideConflicted(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint8(0), int32(3), int32(0), false, false)
	f.Add(uint8(1), uint8(1), uint8(1), int32(0), int32(9), true, true)
	f.Fuzz(func(t *testing.T, mode, action, state uint8, failures, successes int32, disarmed, apiFailing bool) {
		modes := []v1alpha1.Mode{v1alpha1.ModeAuto, v1alpha1.ModeForceOpen, v1alpha1.ModeForceClosed, v1alpha1.ModeObserve}
		actions := []v1alpha1.OpenAction{v1alpha1.OpenActionIgnore, v1alpha1.OpenActionBypass}
		in := Input{
			Mode: modes[int(mode)%len(modes)], Action: actions[int(action)%len(actions)], BreakerUID: uid,
			State:    []circuit.State{closedFail, openIgnore, openBypass, adminIgnore, adminClosed, corrupt, othersRecord}[int(state)%7],
			Disarmed: disarmed, APIServerFailing: apiFailing, APIServerReason: "scripted", ConflictWinner: "orig",
			Health: Health{Verdict: verdictOf(failures, successes), Failures: failures, Successes: successes},
		}
		in.TargetFound = in.State.Index >= 0
		if d := Decide(in); d.Write == WriteOpen {
			t.Fatalf("a conflicted breaker opened: %+v", in)
		}
	})
}

func TestWinnerIsTheOldestThenTheFirstName(t *testing.T) {
	at := func(s int) metav1.Time { return metav1.NewTime(time.Date(2026, 12, 1, 0, 0, s, 0, time.UTC)) }
	wcb := func(name string, created int, deleting bool) v1alpha1.WebhookCircuitBreaker {
		b := v1alpha1.WebhookCircuitBreaker{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at(created)}}
		if deleting {
			b.DeletionTimestamp = new(at(59))
		}
		return b
	}
	cases := []struct {
		name   string
		b      v1alpha1.WebhookCircuitBreaker
		others []v1alpha1.WebhookCircuitBreaker
		want   string
	}{
		{"an older breaker wins over a newer one with an earlier name", wcb("a-copy", 2, false), []v1alpha1.WebhookCircuitBreaker{wcb("z-orig", 1, false)}, "z-orig"},
		{"the oldest owns it", wcb("z-orig", 1, false), []v1alpha1.WebhookCircuitBreaker{wcb("a-copy", 2, false)}, ""},
		{"at the same second the first name wins", wcb("b", 1, false), []v1alpha1.WebhookCircuitBreaker{wcb("a", 1, false)}, "a"},
		{"a winner being deleted hands over", wcb("copy", 2, false), []v1alpha1.WebhookCircuitBreaker{wcb("orig", 1, true)}, ""},
		{"the next oldest takes over, not the newest", wcb("third", 3, false), []v1alpha1.WebhookCircuitBreaker{wcb("orig", 1, true), wcb("second", 2, false)}, "second"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Winner(&c.b, c.others); got != c.want {
				t.Fatalf("Winner = %q, want %q", got, c.want)
			}
		})
	}
}

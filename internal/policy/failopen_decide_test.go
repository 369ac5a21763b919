package policy

import (
	"testing"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

func TestDecideAlreadyFailOpen(t *testing.T) {
	cases := []struct {
		name       string
		in         Input
		wantReason string
		wantRearm  bool
	}{
		{"an Ignore webhook with openAction Ignore is said at once, before any probe",
			Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionIgnore, TargetFound: true, State: adminIgnore, Health: pending}, ReasonAlreadyFailOpen, false},
		{"and while healthy",
			Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionIgnore, TargetFound: true, State: adminIgnore, Health: up}, ReasonAlreadyFailOpen, false},
		{"a disarmed breaker still re-arms on a healthy webhook",
			Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionIgnore, TargetFound: true, State: adminIgnore, Health: up, Disarmed: true}, ReasonAlreadyFailOpen, true},
		{"ForceOpen is told too",
			Input{Mode: v1alpha1.ModeForceOpen, Action: v1alpha1.OpenActionIgnore, TargetFound: true, State: adminIgnore, Health: up}, ReasonAlreadyFailOpen, false},
		{"an Ignore webhook with Bypass is armed: skipping the call still helps",
			Input{Mode: v1alpha1.ModeAuto, Action: v1alpha1.OpenActionBypass, TargetFound: true, State: adminIgnore, Health: up}, ReasonNoChange, false},
		{"ForceClosed keeps its own reason",
			Input{Mode: v1alpha1.ModeForceClosed, Action: v1alpha1.OpenActionIgnore, TargetFound: true, State: adminIgnore, Health: up}, ReasonForceClosed, false},
		{"Observe keeps its own reason",
			Input{Mode: v1alpha1.ModeObserve, Action: v1alpha1.OpenActionIgnore, TargetFound: true, State: adminIgnore, Health: up}, ReasonObserving, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.in)
			if d.Reason != c.wantReason || d.Write != WriteNone || d.Rearm != c.wantRearm {
				t.Fatalf("Decide = %s/%s rearm %v (%s), want none/%s rearm %v", d.Write, d.Reason, d.Rearm, d.Message, c.wantReason, c.wantRearm)
			}
			if d.Reason == ReasonAlreadyFailOpen && (!d.Refused || d.Blocked) {
				t.Fatal("AlreadyFailOpen is a refusal that leaves the breaker Ready")
			}
		})
	}
}

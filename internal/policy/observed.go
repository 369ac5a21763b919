package policy

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/apisignal"
	"github.com/tripswitch-dev/tripswitch/internal/budget"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/halfopen"
	"github.com/tripswitch-dev/tripswitch/internal/owners"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
	"github.com/tripswitch-dev/tripswitch/internal/webhookchain"
)

// RearmAnnotation on a breaker re-arms it when its value changes.
const RearmAnnotation = "tripswitch.dev/rearm"

// RearmRequested reports whether b's re-arm annotation has a value its
// status has not acted on yet.
func RearmRequested(b *v1alpha1.WebhookCircuitBreaker) bool {
	v := b.Annotations[RearmAnnotation]
	return v != "" && v != b.Status.ObservedRearm
}

// Observed is what one reconcile read: the target, the health the probe
// monitor and the API server signal gathered, and the breaker's peers.
type Observed struct {
	Config      *circuit.Configuration // nil when the configuration is missing
	NotApproved string                 // tripswitch may not read it: what to change
	State       circuit.State
	Health      probe.Observation
	Signal      *apisignal.Status // nil: the API server signal is off
	// Ambiguous, when set, says why the signal cannot be told apart from
	// another webhook's: it may not open the circuit on its own.
	Ambiguous string
	// Conflict, when set, is the older breaker that owns the same webhook.
	Conflict string
	// TrialCalls are the API server's calls in a running half-open trial.
	TrialCalls halfopen.Calls
	// Chain is the preflight of the webhooks that can match the same
	// requests; nil when the webhook was not found.
	Chain *webhookchain.Verdict
	// Closed is the circuit this process closed, until the status shows it
	// closed (the reconciler's memory).
	Closed *ClosedNote
}

// NewInput gathers what Decide needs from the breaker, its resolved spec
// and what was observed.
func NewInput(b *v1alpha1.WebhookCircuitBreaker, spec v1alpha1.ResolvedSpec, obs Observed) Input {
	verdict := obs.Health.Verdict
	if verdict == "" {
		verdict = probe.VerdictPending // no probe yet
	}
	in := Input{
		Mode:        spec.Mode,
		Action:      spec.Action,
		BreakerUID:  b.UID,
		Deleting:    !b.DeletionTimestamp.IsZero(),
		TargetFound: obs.Config != nil && obs.State.Index >= 0,
		State:       obs.State,
		Health: Health{
			Verdict:  verdict,
			Failures: obs.Health.ConsecutiveFailures, Successes: obs.Health.ConsecutiveSuccesses,
			LastReason: obs.Health.Last.Reason,
		},
		ProbeUnknown:     obs.Health.Last.Status == probe.Unknown,
		APIServerFailing: obs.Signal != nil && obs.Signal.Failing && obs.Ambiguous == "",
		ProbeReason:      obs.Health.Last.Reason,
		Disarmed:         b.Status.DisarmedReason != "" && !RearmRequested(b),
		NotApproved:      obs.NotApproved,
		EverRead:         b.Status.TargetUID != "",
		ConflictWinner:   obs.Conflict,
		Generation:       b.Generation,
		Window:           Window(b, obs.Config, obs.State),
	}
	if sig := obs.Signal; sig != nil && !sig.Unreadable && obs.Ambiguous == "" {
		in.SignalOn = true
		in.APIServerHealthy = sig.Healthy()
		in.APIServerFailedCalls = sig.Failures > 0
	}
	if in.APIServerFailing {
		in.APIServerReason = fmt.Sprintf("the API server's calls to the webhook failed at %.0f%% (%d of %d in the window)", obs.Signal.FailureRate, obs.Signal.Failures, obs.Signal.Calls)
	}
	if obs.Config == nil {
		return in
	}
	in.ConfigUID = obs.Config.Object.GetUID()
	in.Held = held(b, in.Window)
	in.Writers = owners.Writers(obs.Config.Object, b.Spec.Target.WebhookName)
	return in
}

// Window is the outage window b is in, as a decision on the configuration
// cfg (nil when missing), its webhook's state s, sees it: the status's,
// without an open counted but never applied (budget.Unsent); one its record
// on the configuration implies when the status has none (budget.Infer);
// none once the breaker is re-armed by annotation, which ends the window.
func Window(b *v1alpha1.WebhookCircuitBreaker, cfg *circuit.Configuration, s circuit.State) *v1alpha1.OutageWindow {
	w := b.Status.Outage
	if RearmRequested(b) {
		w = nil
	}
	if cfg == nil {
		return w
	}
	uid := cfg.Object.GetUID()
	ours := s.Record != nil && s.Record.BreakerUID == b.UID
	if w == nil && ours {
		return budget.Infer(s.Record, uid, b.Generation)
	}
	return budget.Unsent(w, uid, cfg.Object.GetResourceVersion(), ours)
}

// held is the open w holds as far as tripswitch wrote, with the record b's
// status mirrors of it (it says what a trial changed); nil when none.
func held(b *v1alpha1.WebhookCircuitBreaker, w *v1alpha1.OutageWindow) *circuit.Held {
	if w == nil || !w.Held {
		return nil
	}
	h := &circuit.Held{Action: w.Action, UID: w.ConfigurationUID}
	if w.OpenedAt != nil {
		h.OpenedAt = *w.OpenedAt
	}
	if r := b.Status.Record; r != nil && b.Status.TargetUID == w.ConfigurationUID && r.OpenedAt.Equal(&h.OpenedAt) {
		h.Record = r
	}
	return h
}

// Clocked sets what in knows from the clock: the half-open trial's verdict
// and spec.maxOpenDuration's judgement of this breaker's open circuit (on
// the record's openedAt, which survives failover).
func Clocked(in *Input, spec v1alpha1.ResolvedSpec, obs Observed, now time.Time) {
	in.Trial = TrialVerdict(spec, obs, now)
	if rec := in.State.Record; rec != nil && rec.BreakerUID == in.BreakerUID {
		in.MaxOpen = CheckMaxOpen(rec.OpenedAt.Time, now, spec.MaxOpen, spec.OnMaxOpen)
	}
}

// ClosedNote is a circuit this process closed whose breaker's status does
// not show it yet (a companion closed in another breaker's patch, or a
// status write deferred): the record's openedAt, the breaker's own reason,
// and when.
type ClosedNote struct {
	OpenedAt metav1.Time
	Reason   string
	At       metav1.Time
}

// Outcome is what one reconcile read, decided and wrote: everything the
// next status is derived from.
type Outcome struct {
	// Spec is the breaker's spec, resolved once for this reconcile.
	Spec     v1alpha1.ResolvedSpec
	Input    Input
	Decision Decision
	Observed Observed
	After    circuit.State // the circuit as the write left it
	WriteErr error
	Now      metav1.Time
	// ClosedBy, if set, is this breaker's circuit closed in another
	// breaker's patch, or by a write whose status was deferred.
	ClosedBy *ClosedNote
	// Floor is the fallback policy's sync (nil without one).
	Floor *FloorReport
}

package policy

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/halfopen"
	"github.com/tripswitch-dev/tripswitch/internal/owners"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// Write is the one write a decision may ask for.
type Write string

// Writes.
const (
	WriteNone  Write = ""
	WriteOpen  Write = "Open"
	WriteClose Write = "Close"
	WriteDrop  Write = "Drop"
	// WriteTrial starts a half-open trial; WriteEndTrial ends a failed one
	// (back to full Bypass).
	WriteTrial    Write = "Trial"
	WriteEndTrial Write = "EndTrial"
)

// Reasons used in decisions, events and conditions.
const (
	ReasonWebhookUnhealthy  = "WebhookUnhealthy"
	ReasonWebhookRecovered  = "WebhookRecovered"
	ReasonForceOpen         = "ForceOpen"
	ReasonForceClosed       = "ForceClosed"
	ReasonBreakerDeleted    = "BreakerDeleted"
	ReasonOpenActionChanged = "OpenActionChanged"
	ReasonExternalChange    = "ExternalChange"
	ReasonRecordRemoved     = "RecordRemovedExternally"
	// ReasonClosedExternally closes a window whose record was gone before
	// the controller looked again (a break-glass restore while it was away).
	ReasonClosedExternally   = "ClosedExternally"
	ReasonDisarmed           = "Disarmed"
	ReasonAlreadyFailOpen    = "AlreadyFailOpen"
	ReasonObserving          = "Observing"
	ReasonCorruptRecord      = "CorruptRecord"
	ReasonRecordOfOther      = "RecordOwnedByAnotherBreaker"
	ReasonTargetNotFound     = "TargetNotFound"
	ReasonTargetGone         = "TargetGone"
	ReasonNoChange           = "NoChange"
	ReasonAwaitingProbes     = "AwaitingProbes"
	ReasonStillOpen          = "StillOpen"
	ReasonCannotBypass       = "CannotBypass"
	ReasonFinalizerReleased  = "FinalizerReleased"
	ReasonWriteFailed        = "WriteFailed"
	ReasonRearmed            = "Rearmed"
	ReasonTargetRecreated    = "TargetRecreated"
	ReasonProbeUnsupported   = "ProbeUnsupported"
	ReasonProbeSupported     = "ProbeSupported"
	ReasonProbesLate         = "ProbesLate"
	ReasonProbesOnTime       = "ProbesOnTime"
	ReasonControllerStarved  = "ControllerStarved"
	ReasonControllerRuns     = "ControllerRuns"
	ReasonNotApproved        = "NotApproved"
	ReasonSignalReading      = "Reading"
	ReasonSignalUnreadable   = "Unreadable"
	ReasonSignalAmbiguous    = "Ambiguous"
	ReasonNoExternalChange   = "NoExternalChange"
	ReasonCircuitOpen        = "CircuitOpen"
	ReasonCircuitClosed      = "CircuitClosed"
	ReasonConfigurationFound = "Found"
	ReasonArmed              = "Armed"
	ReasonObserveReleases    = "ObserveReleases"
	ReasonAPIServerFailing   = "APIServerFailing"
)

// Health is the probe monitor's view of the webhook: its verdict (the
// counts against the breaker's thresholds, judged by the monitor) and the
// counts and last reason the messages quote.
type Health struct {
	Verdict             probe.Verdict
	Failures, Successes int32
	LastReason          string
}

// Phase is the circuit's state as the decision sees it. A new state (a
// half-open trial) is one more Phase and one more case where Decide
// switches on it.
type Phase string

// Phases.
const (
	PhaseClosed Phase = "Closed"
	PhaseOpen   Phase = "Open"
)

// Phase is the circuit's state on the configuration: Open while
// tripswitch's record is on the webhook.
func (in Input) Phase() Phase {
	if in.State.Record != nil {
		return PhaseOpen
	}
	return PhaseClosed
}

// Input is everything a decision depends on, gathered before deciding.
type Input struct {
	Mode       v1alpha1.Mode
	Action     v1alpha1.OpenAction
	BreakerUID types.UID
	Deleting   bool
	// TargetFound: the configuration exists and has the webhook.
	TargetFound bool
	// State is the circuit as the configuration records it.
	State circuit.State
	// Mirror is the record the breaker's status last mirrored, if it was for
	// this same configuration (same UID), or else the one this process
	// wrote last and its status does not show yet (Observed.Opened).
	Mirror *v1alpha1.CircuitRecord
	// ClosedMine: this process closed the circuit Mirror records.
	ClosedMine bool
	// KnewOpen: this process knew the circuit Mirror records open
	// first-hand: it wrote the record, or read it in the configuration. A
	// process that never did (it started after the record was gone) cannot
	// tell an owner's rewrite from its predecessor's close cut short by a
	// crash before the status write.
	KnewOpen bool
	// Writers are the configuration's other writers of the webhook, from
	// its managedFields, the latest first: an external change names them.
	Writers []owners.Writer
	Health  Health
	// ProbeUnknown: the last probe could not be made (ProbeReason says why),
	// so health is unknown in both directions.
	ProbeUnknown bool
	ProbeReason  string
	// APIServerFailing: the API server signal (spec.apiServerSignal) sees
	// the webhook failing; APIServerReason says how.
	APIServerFailing bool
	APIServerReason  string
	// Disarmed: a human overrode tripswitch during this outage.
	Disarmed bool
	// NotApproved, when set, says that tripswitch may not read the target
	// (RBAC does not approve the configuration) and what to change.
	NotApproved string
	// EverRead: tripswitch read this breaker's target at some point (the
	// status has its UID), so it may have written to it.
	EverRead bool
	// ConflictWinner, when set, is the older breaker that names the same
	// webhook and owns it: this one never opens the circuit (conflict.go).
	ConflictWinner string
	// Trial is the half-open trial's verdict (spec.halfOpen), nil when
	// closing needs no trial.
	Trial *halfopen.Verdict
	// MaxOpen is spec.maxOpenDuration's judgement of this breaker's open
	// circuit (Clocked sets it and Trial).
	MaxOpen MaxOpen
}

// Decision is what to do, and why. The status is computed from its fields,
// never from its reason strings.
type Decision struct {
	Write Write
	// Action is the open action an Open write applies: the spec's, defaulted.
	Action  v1alpha1.OpenAction
	Reason  string
	Message string
	// Blocked: the breaker could not open or close its webhook if it had to
	// (bad or foreign record, missing target, webhook that cannot be probed);
	// the status shows Ready=False with Reason and Message.
	Blocked bool
	// Refused: tripswitch chose not to write for a reason that leaves it
	// able to act (the webhook already fails open without it); the status
	// shows it as Ready's reason, and it is reported once when it starts.
	Refused bool
	// Disarm, when set, stops further opening until the webhook is healthy again
	// or an operator re-arms; it is the reason shown.
	Disarm string
	// Rearm clears a previous Disarm.
	Rearm bool
	// ExternalChange: someone else changed what tripswitch owned.
	ExternalChange bool
	// ReleaseFinalizer: the breaker may be deleted now.
	ReleaseFinalizer bool
	// Trial is the trial verdict this decision acts on, if any: its Next is
	// when an ended trial's successor may start, or when to look again.
	Trial *halfopen.Verdict
	// RecheckIn, when set, is when to look again at the latest: when the
	// open circuit reaches maxOpenDuration, or a refused open tries again.
	RecheckIn time.Duration
}

// Decide is the controller's whole policy: an ordered chain of checks over the
// observed state, with no I/O and no clock. The first check that applies wins.
func Decide(in Input) Decision {
	d := decide(in)
	if in.State.Record != nil && in.MaxOpen.Remaining > 0 && d.Write == WriteNone {
		d.RecheckIn = in.MaxOpen.Remaining
	}
	return d
}

func decide(in Input) Decision {
	for _, check := range []func(Input) (Decision, bool){
		checkApproved,
		checkConflict,
		checkRecordReadable,
		checkRecordOwner,
		checkTargetFound,
		checkExternalChange,
		checkRecordRemoved,
		checkChangeUndone,
		checkDeleting,
		checkObserve,
		checkActionChanged,
		checkAlreadyFailOpen,
	} {
		if d, ok := check(in); ok {
			return d
		}
	}
	switch in.Mode {
	case v1alpha1.ModeForceClosed:
		return decideForceClosed(in)
	case v1alpha1.ModeForceOpen:
		if in.State.InTrial() {
			// Fully open means no trial.
			return Decision{Write: WriteEndTrial, Reason: ReasonForceOpen, Message: "mode is ForceOpen: ending the trial, full Bypass"}
		}
		// A disarm holds here too: never fight a human. Re-arm with the
		// annotation.
		return decideOpen(in, ReasonForceOpen, "mode is ForceOpen")
	default:
		return decideAuto(in)
	}
}

// checkApproved: tripswitch may not read the target. It cannot act, and a
// breaker whose target it never read holds nothing, so it may be deleted.
func checkApproved(in Input) (Decision, bool) {
	switch {
	case in.NotApproved == "":
		return Decision{}, false
	case in.Deleting && !in.EverRead:
		return Decision{Reason: ReasonNotApproved, ReleaseFinalizer: true,
			Message: "tripswitch was never allowed to read the target, so it changed nothing on it; the breaker is released"}, true
	case in.Deleting:
		return Decision{Reason: ReasonNotApproved, Blocked: true, Message: in.NotApproved +
			". tripswitch read this configuration before and may still hold a change on it, so the breaker waits: approve the configuration again " +
			"and tripswitch restores the webhook and releases it, or restore it yourself with `tripswitch restore` and then remove the finalizer " +
			"(kubectl patch wcb NAME --type=merge -p '{\"metadata\":{\"finalizers\":null}}')"}, true
	}
	return Decision{Reason: ReasonNotApproved, Blocked: true, Message: in.NotApproved}, true
}

func checkRecordReadable(in Input) (Decision, bool) {
	if in.State.RecordErr == nil {
		return Decision{}, false
	}
	d := Decision{Reason: ReasonCorruptRecord, Blocked: true, Message: in.State.RecordErr.Error() + "; tripswitch will not guess a restore from it: fix or remove the annotation"}
	d.ReleaseFinalizer = in.Deleting
	return d, true
}

func checkRecordOwner(in Input) (Decision, bool) {
	rec := in.State.Record
	if rec == nil || rec.BreakerUID == in.BreakerUID {
		return Decision{}, false
	}
	return Decision{
		Reason:           ReasonRecordOfOther,
		Blocked:          true,
		Message:          fmt.Sprintf("the webhook's circuit record belongs to breaker %q (uid %s); two breakers target the same webhook", rec.Breaker, rec.BreakerUID),
		ReleaseFinalizer: in.Deleting,
	}, true
}

func checkTargetFound(in Input) (Decision, bool) {
	if in.TargetFound {
		return Decision{}, false
	}
	if in.Deleting {
		return Decision{Reason: ReasonTargetGone, Message: "target is gone; nothing to restore", ReleaseFinalizer: true}, true
	}
	return Decision{Reason: ReasonTargetNotFound, Blocked: true, Message: "target webhook configuration or webhook not found; nothing is written"}, true
}

// checkExternalChange: tripswitch's record is there but its change is not.
// Someone else edited the value; tripswitch lets go and does not fight them.
func checkExternalChange(in Input) (Decision, bool) {
	if in.State.Record == nil || in.State.Intact() {
		return Decision{}, false
	}
	undone := undoneBy(in, in.State.Record, true)
	d := Decision{
		Reason:         ReasonExternalChange,
		Message:        undone + "; dropping the record and leaving their value",
		ExternalChange: true,
	}
	if in.Mode == v1alpha1.ModeObserve {
		d.Message = undone + "; mode is Observe, so the record is left in place"
		return d, true
	}
	d.Write = WriteDrop
	// In ForceOpen health never re-arms, so a healthy webhook is no reason to
	// reopen over the operator's change either.
	if in.Health.Verdict != probe.VerdictHealthy || in.Mode == v1alpha1.ModeForceOpen {
		d.Disarm = "someone changed the webhook while its circuit was open: " + undone
	}
	return d, true
}

// checkRecordRemoved: the status says tripswitch opened this configuration, the
// record annotation is gone, yet the webhook still fails open that way.
// Someone removed the record; tripswitch no longer owns the value.
func checkRecordRemoved(in Input) (Decision, bool) {
	if in.State.Record != nil || in.Mirror == nil || !in.State.FailsOpenWithoutRecord(in.Mirror.Action) {
		return Decision{}, false
	}
	d := Decision{
		Reason:         ReasonRecordRemoved,
		Message:        "the circuit record was removed from the webhook configuration while open; tripswitch no longer owns the change and will not restore it",
		ExternalChange: true,
	}
	if in.Health.Verdict != probe.VerdictHealthy {
		d.Disarm = "the circuit record was removed by someone else"
	}
	d.ReleaseFinalizer = in.Deleting
	return d, true
}

// checkChangeUndone: tripswitch opened the circuit (its status mirrors the
// record, or this process wrote it a moment ago) and did not close it, yet
// the record and the change are both gone: the configuration was written
// over whole (Kyverno writes its configurations back from a template).
// That is an external change like any other. Opening again would be
// undone again, a write per rewrite for the whole outage: tripswitch lets
// go and does not open again until the webhook is healthy. Only a process
// that knew the circuit open judges so: one that starts to find it gone
// may be looking at its predecessor's close, cut short by a crash before
// the status said so; it lets the window end, and a rewrite of its own
// open is judged when it comes (one more write per outage at most).
func checkChangeUndone(in Input) (Decision, bool) {
	m := in.Mirror
	if in.State.Record != nil || m == nil || in.ClosedMine || !in.KnewOpen || in.State.FailsOpenWithoutRecord(m.Action) {
		return Decision{}, false
	}
	undone := undoneBy(in, m, false)
	d := Decision{Reason: ReasonExternalChange, ExternalChange: true, ReleaseFinalizer: in.Deleting,
		Message: undone + "; tripswitch leaves their value and does not open again for this outage"}
	if in.Health.Verdict != probe.VerdictHealthy || in.Mode == v1alpha1.ModeForceOpen {
		d.Disarm = "the configuration was written over while its circuit was open: " + undone
	}
	return d, true
}

// undoneBy says who undid rec's change and what is gone; kept: the record
// annotation is still there.
func undoneBy(in Input, rec *v1alpha1.CircuitRecord, kept bool) string {
	return fmt.Sprintf("%s undid tripswitch's %s: %s", writerOf(in, rec), rec.Action, owners.Undone(rec, in.State.Webhook, kept))
}

// writerOf names the writer that undid rec's change (owners.Blame).
func writerOf(in Input, rec *v1alpha1.CircuitRecord) string {
	fp := in.State.Webhook.FailurePolicy
	policy := rec.SetFailurePolicy != "" && (fp == nil || string(*fp) != rec.SetFailurePolicy)
	return owners.Blame(in.Writers, rec.OpenedAt.Time, policy)
}

func checkDeleting(in Input) (Decision, bool) {
	if !in.Deleting {
		return Decision{}, false
	}
	if in.State.Record != nil {
		return Decision{Write: WriteClose, Reason: ReasonBreakerDeleted, Message: "breaker is being deleted; restoring the original policy"}, true
	}
	return Decision{Reason: ReasonFinalizerReleased, Message: "breaker is being deleted and nothing is open", ReleaseFinalizer: true}, true
}

// checkObserve: Observe probes and reports and holds nothing. A circuit
// tripswitch holds when the mode becomes Observe (say, after ForceOpen) is
// closed, so that no mode leaves a webhook failing open with nobody to close it.
func checkObserve(in Input) (Decision, bool) {
	if in.Mode != v1alpha1.ModeObserve {
		return Decision{}, false
	}
	if in.State.Record != nil {
		return Decision{Write: WriteClose, Reason: ReasonObserveReleases, Message: "mode is Observe: tripswitch holds no circuit, restoring the original policy"}, true
	}
	return Decision{Reason: ReasonObserving, Message: fmt.Sprintf("mode is Observe: health is %s, nothing is written", in.Health.Verdict)}, true
}

// checkActionChanged closes a circuit opened with another action; the next
// decision opens it again with the new one if it should still be open.
func checkActionChanged(in Input) (Decision, bool) {
	rec := in.State.Record
	if rec == nil || rec.Action == in.Action || in.Mode == v1alpha1.ModeForceClosed {
		return Decision{}, false
	}
	return Decision{Write: WriteClose, Reason: ReasonOpenActionChanged, Message: fmt.Sprintf("openAction changed from %s to %s; closing before reopening", rec.Action, in.Action)}, true
}

func decideForceClosed(in Input) Decision {
	d := Decision{Reason: ReasonForceClosed, Message: "mode is ForceClosed"}
	if in.State.Record != nil {
		d.Write = WriteClose
		d.Message = "mode is ForceClosed; restoring the original policy"
	}
	switch in.Health.Verdict {
	case probe.VerdictUnhealthy:
		d.Disarm = "mode was ForceClosed during an outage"
	case probe.VerdictHealthy:
		d.Rearm = in.Disarmed
	}
	return d
}

func decideAuto(in Input) Decision {
	if d, ok := decideMaxOpen(in); ok && in.Health.Verdict != probe.VerdictHealthy {
		return d
	}
	if in.ProbeUnknown {
		d := Decision{Reason: ReasonProbeUnsupported, Blocked: true, Message: "the webhook cannot be probed, so tripswitch can neither open nor close its circuit: " + in.ProbeReason}
		if in.State.Record != nil {
			d.Message = "the circuit is open and stays open until the webhook can be probed again: " + in.ProbeReason
		}
		return d
	}
	if d, ok := decideTrial(in); ok {
		return d
	}
	verdict := in.Health.Verdict
	switch {
	case verdict == probe.VerdictUnhealthy:
		return decideOpen(in, ReasonWebhookUnhealthy, fmt.Sprintf("%d consecutive failed probes (last: %s)", in.Health.Failures, in.Health.LastReason))
	case in.APIServerFailing:
		// Either signal opens; closing waits for this one to clear too.
		if in.State.Record != nil && verdict == probe.VerdictHealthy {
			return Decision{Reason: ReasonStillOpen, Message: "probes are healthy, but " + in.APIServerReason + "; closing when it clears"}
		}
		return decideOpen(in, ReasonAPIServerFailing, in.APIServerReason)
	case verdict == probe.VerdictHealthy:
		d := Decision{Reason: ReasonNoChange, Message: "webhook is healthy", Rearm: in.Disarmed}
		if in.State.Record != nil {
			d.Write, d.Reason = WriteClose, ReasonWebhookRecovered
			d.Message = fmt.Sprintf("%d consecutive healthy probes; restoring the original policy", in.Health.Successes)
		}
		return d
	}
	switch in.Phase() {
	case PhaseOpen:
		return Decision{Reason: ReasonStillOpen, Message: "circuit is open; waiting for enough healthy probes"}
	default:
		return Decision{Reason: ReasonAwaitingProbes, Message: "not enough consecutive probes to decide"}
	}
}

// decideOpen opens unless already open, disarmed, or failing open without tripswitch.
func decideOpen(in Input, reason, why string) Decision {
	switch {
	case in.State.Record != nil:
		return Decision{Reason: ReasonStillOpen, Message: "circuit is open: " + why}
	case in.Disarmed:
		return Decision{Reason: ReasonDisarmed, Message: "not opening: an operator overrode tripswitch during this outage; re-arm with the tripswitch.dev/rearm annotation or wait for the webhook to recover"}
	case in.State.FailsOpenWithoutRecord(in.Action):
		return Decision{Reason: ReasonAlreadyFailOpen, Refused: true, Message: fmt.Sprintf("webhook already fails open (%s) without tripswitch; leaving it alone", in.Action)}
	}
	return Decision{Write: WriteOpen, Action: in.Action, Reason: reason, Message: why}
}

// decideTrial: an open circuit that closes through a half-open trial
// starts, ends or passes the trial as its verdict says, and closes on
// nothing else.
func decideTrial(in Input) (Decision, bool) {
	v := in.Trial
	if v == nil || in.State.Record == nil {
		return Decision{}, false
	}
	d := Decision{Reason: v.Reason, Message: v.Message, Trial: v}
	switch v.Step {
	case halfopen.Start:
		d.Write = WriteTrial
	case halfopen.Fail:
		d.Write = WriteEndTrial
	case halfopen.Pass, halfopen.NoTraffic:
		d.Write = WriteClose
	}
	return d, true
}

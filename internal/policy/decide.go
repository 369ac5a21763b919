package policy

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/budget"
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
	// ReasonWriteBudgetExhausted: a write the outage window does not allow
	// (package budget) was refused, and the breaker disarmed.
	ReasonWriteBudgetExhausted = "WriteBudgetExhausted"
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
	// ConfigUID is the configuration's UID ("" when it is missing).
	ConfigUID types.UID
	// Generation is the breaker's spec generation: the write budget counts
	// per generation.
	Generation int64
	// Window is the outage window the breaker is in (its status's, or one
	// inferred from its record on the configuration), nil between outages.
	Window *v1alpha1.OutageWindow
	// Held is the open tripswitch holds as far as it wrote (the window's),
	// nil when none: an open that left the configuration without
	// tripswitch closing it was undone (circuit.Undone).
	Held *circuit.Held
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
	// SignalOn: the API server signal is on and can be trusted for this
	// breaker (readable, not shared with another webhook of the name).
	// APIServerHealthy: it confirms the webhook healthy: the API server's
	// calls in its window reached the minimum, under the threshold.
	SignalOn, APIServerHealthy bool
	// APIServerFailedCalls: the signal's window holds failed calls, too
	// few to judge or not: healthy probes do not end an outage then.
	APIServerFailedCalls bool
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
	// Rearm clears a previous Disarm: the evidence that began the outage
	// says the webhook is healthy again (Input.Recovered).
	Rearm bool
	// EndsOutage: the write is a close on the outage's end (the evidence
	// that began it says the webhook is healthy, or a trial passed), so
	// the window ends with it: counted before the patch is sent, a
	// process that dies between the two still leaves the window ended,
	// and the next outage is a new one.
	EndsOutage bool
	// Exhausted: the write this decision would have made is past the
	// outage window's budget (package budget); Disarm says so.
	Exhausted bool
	// Evidence is what an Open write opens on, and so what must say the
	// webhook is healthy again to end its outage window.
	Evidence v1alpha1.OutageEvidence
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
	// A disarm holds for the outage: until the evidence that began it says
	// the webhook is healthy again, decided here for every path.
	d.Rearm = in.Disarmed && d.Disarm == "" && in.Recovered()
	passed := d.Trial != nil && d.Trial.Step == halfopen.Pass
	d.EndsOutage = d.Write == WriteClose && d.Disarm == "" && (in.Recovered() || passed)
	return d
}

// Recovered reports whether the evidence that began the breaker's outage
// window (Probes when there is none) says the webhook is healthy again: for
// a window the API server signal began, or in which the API server's calls
// were seen failing (the signal, a failed trial), the API server's own
// calls passing (enough of them, under the threshold), since probes may
// have passed all along; for any other, healthy probes with the signal, if
// on, not failing and, while its window holds failed calls (too few to
// judge, say), confirming the calls pass.
// A recovery is confirmed, never assumed: too few calls to judge, or an
// unreadable signal, confirm nothing. In ForceOpen health says nothing: the
// operator holds the circuit open, and a disarm there holds until they
// re-arm or change the mode.
func (in Input) Recovered() bool {
	if in.Mode == v1alpha1.ModeForceOpen {
		return false
	}
	probes := in.Health.Verdict == probe.VerdictHealthy && !in.APIServerFailing && (!in.SignalOn || !in.APIServerFailedCalls || in.APIServerHealthy)
	if w := in.Window; w != nil && (w.Evidence == v1alpha1.EvidenceAPIServer || w.CallsFailed) && in.SignalOn {
		return in.Health.Verdict != probe.VerdictUnhealthy && in.APIServerHealthy
	}
	return probes
}

func decide(in Input) Decision {
	for _, check := range []func(Input) (Decision, bool){
		checkApproved,
		checkConflict,
		checkRecordReadable,
		checkRecordOwner,
		checkTargetFound,
		checkUndone,
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
		return decideOpen(in, ReasonForceOpen, "mode is ForceOpen", v1alpha1.EvidenceOperator)
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

// checkUndone: someone undid tripswitch's open, whatever the shape
// (circuit.Undone, the one rule): the value changed under the record, the
// record removed and the change left, both written over, or the
// configuration deleted and created again. tripswitch never fights them: it
// drops its record if that is still there (and nothing else of what they
// wrote), leaves their value, names the writer, and does not open again for
// this outage (a disarm, unless the evidence that began the outage already
// says the webhook is healthy again; in ForceOpen, always).
func checkUndone(in Input) (Decision, bool) {
	u, ok := circuit.Undone(in.Held, in.ConfigUID, in.State)
	if !ok {
		return Decision{}, false
	}
	who := owners.Blame(in.Writers, u.Record.OpenedAt.Time, u.Fields.Has(circuit.FieldFailurePolicy))
	undone := fmt.Sprintf("%s undid tripswitch's %s: %s", who, u.Record.Action, u.Gone)
	d := Decision{Reason: ReasonExternalChange, ExternalChange: true}
	if !in.Recovered() {
		d.Disarm = undoneDisarm[u.Shape] + ": " + undone
	}
	switch {
	case u.RecordKept && in.Mode == v1alpha1.ModeObserve:
		d.Message = undone + "; mode is Observe, so the record is left in place"
	case u.RecordKept:
		d.Write = WriteDrop
		d.Message = undone + "; dropping the record and leaving their value"
	case u.Shape == circuit.ShapeRecordRemoved:
		d.Reason = ReasonRecordRemoved
		d.Message = undone + "; tripswitch no longer owns the change and will not restore it"
	default:
		d.Message = undone + "; tripswitch leaves their value and does not open again for this outage"
	}
	d.ReleaseFinalizer = in.Deleting && !u.RecordKept
	return d, true
}

// undoneDisarm begins a disarm's reason, by how the open was undone.
var undoneDisarm = map[circuit.Shape]string{
	circuit.ShapeValueChanged:  "someone changed the webhook while its circuit was open",
	circuit.ShapeRecordRemoved: "the circuit record was removed by someone else",
	circuit.ShapeWrittenOver:   "the configuration was written over while its circuit was open",
	circuit.ShapeRecreated:     "the configuration was deleted and created again while its circuit was open",
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
	if in.Health.Verdict == probe.VerdictUnhealthy || in.APIServerFailing {
		d.Disarm = "mode was ForceClosed during an outage"
		d.Evidence = evidence(in)
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
		return decideOpen(in, ReasonWebhookUnhealthy, fmt.Sprintf("%d consecutive failed probes (last: %s)", in.Health.Failures, in.Health.LastReason), v1alpha1.EvidenceProbes)
	case in.APIServerFailing:
		// Either signal opens; closing waits for this one to clear too.
		if in.State.Record != nil && verdict == probe.VerdictHealthy {
			return Decision{Reason: ReasonStillOpen, Message: "probes are healthy, but " + in.APIServerReason + "; closing when it clears"}
		}
		return decideOpen(in, ReasonAPIServerFailing, in.APIServerReason, v1alpha1.EvidenceAPIServer)
	case verdict == probe.VerdictHealthy:
		if in.State.Record == nil {
			return Decision{Reason: ReasonNoChange, Message: "webhook is healthy"}
		}
		if !in.Recovered() && circuit.Calls(in.State.Record) {
			// Opened on the API server's calls, which still reach the
			// webhook: the probes passed all along, so only those calls
			// passing again close it. (With Bypass no call reaches it: a
			// trial confirms, or, where none can run, the probes close it
			// and the outage ends once calls pass again.)
			return Decision{Reason: ReasonStillOpen, Message: "probes are healthy, but the circuit opened on the API server's own calls to the webhook failing; " +
				"closing once enough of them pass again"}
		}
		return Decision{Write: WriteClose, Reason: ReasonWebhookRecovered,
			Message: fmt.Sprintf("%d consecutive healthy probes; restoring the original policy", in.Health.Successes)}
	}
	switch in.Phase() {
	case PhaseOpen:
		return Decision{Reason: ReasonStillOpen, Message: "circuit is open; waiting for enough healthy probes"}
	default:
		return Decision{Reason: ReasonAwaitingProbes, Message: "not enough consecutive probes to decide"}
	}
}

// decideOpen opens on ev unless already open, disarmed, failing open
// without tripswitch, or past the outage window's write budget.
func decideOpen(in Input, reason, why string, ev v1alpha1.OutageEvidence) Decision {
	switch {
	case in.State.Record != nil:
		return Decision{Reason: ReasonStillOpen, Message: "circuit is open: " + why}
	case in.Disarmed:
		return Decision{Reason: ReasonDisarmed, Message: "not opening: an operator overrode tripswitch during this outage; re-arm with the tripswitch.dev/rearm annotation or wait for the webhook to recover"}
	case in.State.FailsOpenWithoutRecord(in.Action):
		return Decision{Reason: ReasonAlreadyFailOpen, Refused: true, Message: fmt.Sprintf("webhook already fails open (%s) without tripswitch; leaving it alone", in.Action)}
	}
	if err := budget.Allow(in.Window, in.Generation, budget.Open); err != nil {
		why := "not opening: " + err.Error() + writersSay(in.Writers)
		return Decision{Reason: ReasonWriteBudgetExhausted, Exhausted: true, Disarm: why, Message: why, Evidence: ev}
	}
	return Decision{Write: WriteOpen, Action: in.Action, Reason: reason, Message: why, Evidence: ev}
}

// Refused is d, refused by the write path because the outage window's
// budget does not allow its write (err wraps budget.ErrExhausted): no
// write, and a disarm that says why and names the configuration's latest
// writers.
func Refused(d Decision, err error, writers []owners.Writer) Decision {
	why := fmt.Sprintf("not writing (%s): %v%s", d.Write, err, writersSay(writers))
	return Decision{Reason: ReasonWriteBudgetExhausted, Exhausted: true, Disarm: why, Message: why, Evidence: d.Evidence}
}

// writersSay names the configuration's latest writers other than
// tripswitch, from its managedFields, for a refused write's message.
func writersSay(ws []owners.Writer) string {
	var names []string
	for _, w := range ws[:min(2, len(ws))] {
		names = append(names, w.Name())
	}
	if len(names) == 0 {
		return ""
	}
	return "; the configuration's last writers: " + strings.Join(names, ", ")
}

// evidence is what the webhook is failing on now, for a window a disarm
// begins.
func evidence(in Input) v1alpha1.OutageEvidence {
	if in.Health.Verdict != probe.VerdictUnhealthy && in.APIServerFailing {
		return v1alpha1.EvidenceAPIServer
	}
	return v1alpha1.EvidenceProbes
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

package v1alpha1

// The condition types of a breaker's status. Ready and CircuitOpen are
// written by more than the controller: the break-glass restore (tripswitch
// restore) sets them too when it closes a circuit without the controller.
const (
	// ConditionReady is True when tripswitch could open and close the
	// breaker's webhook if it had to.
	ConditionReady = "Ready"
	// ConditionCircuitOpen is True while tripswitch holds a change on the
	// webhook.
	ConditionCircuitOpen = "CircuitOpen"
	// ConditionTargetFound is True while the target configuration exists
	// and holds the webhook.
	ConditionTargetFound = "TargetFound"
	// ConditionExternalChange is True when someone else changed what
	// tripswitch held on the webhook during an open circuit.
	ConditionExternalChange = "ExternalChange"
	// ConditionProbeUnsupported is True while the webhook cannot be probed
	// (a bad or unsupported configuration): the circuit can then neither
	// open nor close.
	ConditionProbeUnsupported = "ProbeUnsupported"
	// ConditionProbesLate is True while probes cannot keep their interval:
	// the controller has more breakers than its CPU can probe on time.
	ConditionProbesLate = "ProbesLate"
	// ConditionControllerStarved is True while the controller discards probe
	// timeouts because it could not run for a large part of them; False
	// once it has not for a while, absent if it never did.
	ConditionControllerStarved = "ControllerStarved"
	// ConditionAPIServerSignal is True while the API server signal reads the
	// API server's metrics, False when it cannot (the signal is degraded:
	// only the probes can open the circuit); absent without the signal.
	ConditionAPIServerSignal = "APIServerSignal"
)

// ReasonBreakGlassRestore closes a window, and is the reason of
// CircuitOpen=False and Ready=Unknown, when a break-glass restore closed the
// circuit without the controller. The controller's next look replaces the
// conditions with its own.
const ReasonBreakGlassRestore = "BreakGlassRestore"

// Condition types and reasons of fallback floors, cluster limits and the
// preflight (issue 34).
const (
	// ConditionOpenRefused is True while the breaker would open but may not;
	// its reason says why (ReasonClusterLimit).
	ConditionOpenRefused = "OpenRefused"
	// ReasonClusterLimit: --max-open-circuits circuits are already open,
	// counted from the records on the webhook configurations.
	ReasonClusterLimit = "ClusterLimit"
	// ConditionOpenTooLong is True once the circuit has been open for
	// spec.maxOpenDuration.
	ConditionOpenTooLong = "OpenTooLong"
	// ReasonMaxOpenDuration is OpenTooLong's reason.
	ReasonMaxOpenDuration = "MaxOpenDuration"
	// ReasonMaxOpenClosed closes a window that spec.onMaxOpen: Close ended.
	ReasonMaxOpenClosed = "MaxOpenDurationClosed"
	// ConditionPreflight says whether the webhooks that match the same
	// requests as the target can, with every circuit closed, take longer
	// than the API server's request deadline. It never makes Ready False.
	ConditionPreflight = "Preflight"
	// ReasonWithinDeadline: the summed timeouts fit the deadline (True).
	ReasonWithinDeadline = "WithinDeadline"
	// ReasonChainExceedsDeadline: they do not (False).
	ReasonChainExceedsDeadline = "ChainExceedsDeadline"
	// ConditionFloorArmed is True while the fallback policy applies.
	ConditionFloorArmed = "FloorArmed"
)

// The Owned condition (issue 46): whether another controller writes the
// target webhook, and whether the breaker's open survives it. Its reasons
// are internal/owners' (OwnerUndoesOpen, OwnerMayUndoOpen, OwnerKeepsOpen
// when True; CABundleOnly, NoOtherController when False). It never makes
// Ready False: the breaker can still write, and its write is still undone.
const ConditionOwned = "Owned"

package v1alpha1

// Condition types that more than the controller writes: the break-glass
// restore (tripswitch restore) sets them too when it closes a circuit
// without the controller.
const (
	// ConditionReady is True when tripswitch could open and close the
	// breaker's webhook if it had to.
	ConditionReady = "Ready"
	// ConditionCircuitOpen is True while tripswitch holds a change on the
	// webhook.
	ConditionCircuitOpen = "CircuitOpen"
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

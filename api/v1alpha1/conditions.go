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

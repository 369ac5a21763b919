package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TargetKind is the kind of webhook configuration a breaker targets.
// +kubebuilder:validation:Enum=MutatingWebhookConfiguration;ValidatingWebhookConfiguration
type TargetKind string

// Target kinds.
const (
	MutatingWebhookConfiguration   TargetKind = "MutatingWebhookConfiguration"
	ValidatingWebhookConfiguration TargetKind = "ValidatingWebhookConfiguration"
)

// OpenAction is what tripswitch does to a webhook when its circuit opens.
// +kubebuilder:validation:Enum=Ignore;Bypass
type OpenAction string

const (
	// OpenActionIgnore sets failurePolicy to Ignore. Requests are admitted, but
	// each still waits up to timeoutSeconds for the failing webhook.
	OpenActionIgnore OpenAction = "Ignore"
	// OpenActionBypass adds the matchCondition tripswitch.dev/circuit-open with
	// expression "false", so the API server skips the webhook entirely and
	// admission latency returns to the no-webhook baseline.
	OpenActionBypass OpenAction = "Bypass"
)

// Mode says how much tripswitch may do on its own.
// +kubebuilder:validation:Enum=Auto;ForceOpen;ForceClosed;Observe
type Mode string

const (
	// ModeAuto opens the circuit after failureThreshold failed probes and
	// closes it after successThreshold healthy ones.
	ModeAuto Mode = "Auto"
	// ModeForceOpen opens the circuit regardless of health.
	ModeForceOpen Mode = "ForceOpen"
	// ModeForceClosed keeps (or puts) the webhook at its original policy.
	ModeForceClosed Mode = "ForceClosed"
	// ModeObserve probes and reports but never writes to the webhook.
	ModeObserve Mode = "Observe"
)

// ProbeKind is how the webhook's health is checked.
// +kubebuilder:validation:Enum=HTTPGet;AdmissionReview
type ProbeKind string

const (
	// ProbeHTTPGet sends GET to healthPath and expects a 2xx.
	ProbeHTTPGet ProbeKind = "HTTPGet"
	// ProbeAdmissionReview POSTs a synthetic AdmissionReview to the webhook's
	// own path, exercising admission itself rather than a health endpoint.
	ProbeAdmissionReview ProbeKind = "AdmissionReview"
)

// Target names one webhook inside one webhook configuration.
type Target struct {
	// Kind is MutatingWebhookConfiguration or ValidatingWebhookConfiguration.
	// +required
	Kind TargetKind `json:"kind"`
	// ConfigurationName is the webhook configuration's metadata.name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ConfigurationName string `json:"configurationName"`
	// WebhookName is the name of the webhook entry in the configuration.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	WebhookName string `json:"webhookName"`
}

// ProbeSpec sets how often and how strictly the webhook is probed. The
// defaults: every 1s, 250ms deadline, open after 3 failures, close after 5
// successes.
// +kubebuilder:validation:XValidation:rule="!has(self.interval) || !has(self.timeout) || !self.interval.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || !self.timeout.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self.interval) < duration('100ms') || duration(self.timeout) < duration('10ms') || duration(self.timeout) <= duration(self.interval)",messageExpression="'probe.timeout (' + self.timeout + ') must not exceed probe.interval (' + self.interval + '); the timeout defaults to 250ms, so an interval under 250ms needs a timeout of its own, for example timeout: ' + self.interval"
type ProbeSpec struct {
	// Interval between probes, a duration from 100ms to 1h. Default 1s.
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="probe.interval must be a duration such as 500ms, 2s or 1m"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('100ms') && duration(self) <= duration('1h'))",message="probe.interval must be between 100ms and 1h"
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Timeout of one probe, a duration from 10ms to 30s and at most the
	// interval. A slower answer counts as a failure. Default 250ms.
	// +optional
	// +kubebuilder:default="250ms"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="probe.timeout must be a duration such as 250ms or 2s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('10ms') && duration(self) <= duration('30s'))",message="probe.timeout must be between 10ms and 30s"
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// FailureThreshold is how many consecutive failed probes open the circuit. Default 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
	// SuccessThreshold is how many consecutive healthy probes close it. Default 5.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SuccessThreshold int32 `json:"successThreshold,omitempty"`
	// Kind is HTTPGet (a health endpoint) or AdmissionReview (a synthetic
	// review to the webhook's own path). Default HTTPGet.
	// +optional
	// +kubebuilder:default=HTTPGet
	Kind ProbeKind `json:"kind,omitempty"`
	// HealthPath is the path HTTPGet probes. Default /healthz.
	// +optional
	// +kubebuilder:default="/healthz"
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:validation:MaxLength=1024
	HealthPath string `json:"healthPath,omitempty"`
	// Endpoints, for a service webhook, probes every ready endpoint of the
	// Service (from its EndpointSlices) instead of the Service name, and
	// reports how many are healthy, so a partial outage is visible. The
	// circuit still follows the Service as a whole: the probe is Unhealthy
	// only when no endpoint is healthy.
	// +optional
	Endpoints bool `json:"endpoints,omitempty"`
}

// WebhookCircuitBreakerSpec is an operator's approval to fail one webhook open.
// +kubebuilder:validation:XValidation:rule="self.target.kind != 'MutatingWebhookConfiguration' || (has(self.allowAdmissionWithoutMutation) && self.allowAdmissionWithoutMutation)",message="allowAdmissionWithoutMutation must be true for a MutatingWebhookConfiguration target: it records that an operator approved admitting objects without this webhook's mutation during an outage"
// +kubebuilder:validation:XValidation:rule="self.target.kind != 'ValidatingWebhookConfiguration' || (has(self.allowAdmissionWithoutValidation) && self.allowAdmissionWithoutValidation)",message="allowAdmissionWithoutValidation must be true for a ValidatingWebhookConfiguration target: it records that an operator approved admitting objects without this webhook's validation during an outage"
// +kubebuilder:validation:XValidation:rule="!has(self.halfOpen) || (has(self.apiServerSignal) && has(self.apiServerSignal.enabled) && self.apiServerSignal.enabled && has(self.openAction) && self.openAction == 'Bypass')",message="halfOpen needs openAction Bypass and apiServerSignal.enabled: the trial sends a sample of real requests to the webhook (Bypass skips them all otherwise) and is judged on the API server's counts of those calls (with Ignore the API server calls the webhook anyway, so the signal already judges real calls)"
// +kubebuilder:validation:XValidation:rule="!has(self.onMaxOpen) || self.onMaxOpen != 'Close' || has(self.maxOpenDuration)",message="onMaxOpen: Close needs maxOpenDuration: it says after how long the circuit fails closed again"
type WebhookCircuitBreakerSpec struct {
	// Target is the one webhook this breaker may change. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="target is immutable: delete this breaker and create a new one"
	Target Target `json:"target"`
	// AllowAdmissionWithoutMutation must be true for a mutating target.
	// +optional
	AllowAdmissionWithoutMutation bool `json:"allowAdmissionWithoutMutation,omitempty"`
	// AllowAdmissionWithoutValidation must be true for a validating target.
	// +optional
	AllowAdmissionWithoutValidation bool `json:"allowAdmissionWithoutValidation,omitempty"`
	// OpenAction is what opening the circuit does. Ignore sets the webhook's
	// failurePolicy to Ignore: requests are admitted, but each still waits up
	// to the webhook's timeoutSeconds for it. Bypass adds a matchCondition
	// (tripswitch.dev/circuit-open, expression "false") so that the API
	// server skips the webhook: requests are admitted as fast as without it.
	// Default Ignore.
	// +optional
	// +kubebuilder:default=Ignore
	OpenAction OpenAction `json:"openAction,omitempty"`
	// Mode is how much tripswitch does on its own. Auto opens after
	// probe.failureThreshold failed probes and closes after
	// probe.successThreshold healthy ones. ForceOpen opens now, whatever the
	// health. ForceClosed restores the original policy and keeps it. Observe
	// probes and reports, never opens, and closes a circuit it held. Default
	// Auto.
	// +optional
	// +kubebuilder:default=Auto
	Mode Mode `json:"mode,omitempty"`
	// Probe configures health checking.
	// +optional
	// +kubebuilder:default={}
	Probe ProbeSpec `json:"probe,omitempty"`
	// Audit, when enabled, re-reviews what was admitted while the circuit was
	// open: after each window closes, tripswitch lists the objects the
	// webhook's rules cover that were created or updated in the window and
	// sends each to the recovered webhook as a dry-run AdmissionReview. It
	// needs read access to those resources (the chart's audit values).
	// +optional
	Audit *AuditSpec `json:"audit,omitempty"`
	// APIServerSignal, when enabled, is a second signal next to the probes:
	// the API server's own counts of its calls to this webhook (from its
	// /metrics: calls, and calls that failed under failurePolicy Fail or
	// Ignore), as a failure rate over a sliding window. The circuit opens
	// when either signal trips, and closes only on healthy probes while the
	// API server no longer sees failures. With Bypass the API server stops
	// calling the webhook, so recovery is judged by a trial of real calls
	// (spec.halfOpen). Needs get on the non-resource URL /metrics (the
	// chart's apiServerSignal values).
	// +optional
	APIServerSignal *APIServerSignalSpec `json:"apiServerSignal,omitempty"`
	// HalfOpen configures the trial that ends an open circuit with Bypass
	// and the API server signal: once the probes have been healthy for
	// halfOpen.after, a sample of real requests reaches the webhook again,
	// under failurePolicy Ignore (a trial call that fails still admits), and
	// the circuit closes only when the API server's calls in the trial pass.
	// A failing trial goes back to full Bypass and waits again, longer each
	// time. With openAction Bypass and apiServerSignal enabled the trial is
	// on with its defaults; without the signal, Bypass closes on the probes
	// alone. See docs/half-open.md.
	// +optional
	HalfOpen *HalfOpenSpec `json:"halfOpen,omitempty"`
	// WhileOpen is what stands in for the webhook while its circuit is open.
	// +optional
	WhileOpen *WhileOpenSpec `json:"whileOpen,omitempty"`
	// MaxOpenDuration is how long the circuit may stay open before the
	// breaker raises OpenTooLong, a duration from 1m to 720h. Unset: no limit.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m') && duration(self) <= duration('720h')",message="maxOpenDuration must be a duration from 1m to 720h, such as 30m or 4h"
	MaxOpenDuration *metav1.Duration `json:"maxOpenDuration,omitempty"`
	// OnMaxOpen is what happens after maxOpenDuration: Stay keeps the
	// circuit open (OpenTooLong is raised either way); Close fails closed
	// again, restoring the webhook's original policy. Default Stay.
	// +optional
	// +kubebuilder:default=Stay
	OnMaxOpen OnMaxOpen `json:"onMaxOpen,omitempty"`
}

// HalfOpenSpec configures the trial of real admission calls before a
// Bypass circuit closes.
type HalfOpenSpec struct {
	// After is how long the probes must have been healthy, without a failure,
	// since the circuit opened before a trial starts (so the first trial
	// waits at least this long after the open); it is also the wait after
	// the first failed trial,
	// doubled after each further one up to maxBackoff. From 1s to 1h.
	// Default 30s.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="halfOpen.after must be a duration from 1s to 1h"
	After *metav1.Duration `json:"after,omitempty"`
	// Window is how long a trial runs before it is judged: at its end the
	// trial passes if the API server's calls to the webhook during the trial
	// reach apiServerSignal.minimumCalls with a failure rate under
	// apiServerSignal.failureRateThreshold. It fails as soon as the calls
	// reach the threshold, or a probe fails. From 10s to 10m. Default 30s.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('10s') && duration(self) <= duration('10m')",message="halfOpen.window must be a duration from 10s to 10m"
	Window *metav1.Duration `json:"window,omitempty"`
	// SamplePercent is the share of requests the trial lets reach the
	// webhook, from 1 to 100, applied in steps of 1/256 (rounded up: the
	// default 6 is 16/256, 6.25%). The sample is chosen on a random
	// identifier of the request's object; requests without one (a CREATE a
	// mutating webhook sees before the object has a uid, of an object with
	// no owner) stay bypassed. Default 6.
	// +optional
	// +kubebuilder:default=6
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SamplePercent int32 `json:"samplePercent,omitempty"`
	// MaxWait bounds a trial that sees too few calls to judge (no traffic):
	// after it the circuit closes on the healthy probes alone, and the status
	// says so. At least halfOpen.window, at most 1h. Default 2m.
	// +optional
	// +kubebuilder:default="2m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('10s') && duration(self) <= duration('1h')",message="halfOpen.maxWait must be a duration from 10s to 1h"
	MaxWait *metav1.Duration `json:"maxWait,omitempty"`
	// MaxBackoff caps the wait between failed trials. From 1s to 24h.
	// Default 10m.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="halfOpen.maxBackoff must be a duration from 1s to 24h"
	MaxBackoff *metav1.Duration `json:"maxBackoff,omitempty"`
}

// APIServerSignalSpec configures the API server signal.
type APIServerSignalSpec struct {
	// Enabled turns the signal on.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// Window is the sliding window, from 10s to 10m. Default 30s.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('10s') && duration(self) <= duration('10m')",message="apiServerSignal.window must be a duration from 10s to 10m"
	Window *metav1.Duration `json:"window,omitempty"`
	// MinimumCalls is how many calls the window needs before a rate counts.
	// Default 10.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MinimumCalls int32 `json:"minimumCalls,omitempty"`
	// FailureRateThreshold is the percentage of failed calls that trips the
	// signal. Default 50.
	// +optional
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FailureRateThreshold int32 `json:"failureRateThreshold,omitempty"`
}

// APIServerSignalStatus is the API server signal as of the last reconcile.
type APIServerSignalStatus struct {
	// Failing: the window holds at least minimumCalls and the failure rate
	// reached the threshold.
	Failing bool `json:"failing"`
	// FailureRatePercent is the rate, rounded down, or -1 below minimumCalls.
	FailureRatePercent int32 `json:"failureRatePercent"`
	// Calls and Failures are the API server's calls to the webhook in the window.
	// +optional
	Calls int64 `json:"calls,omitempty"`
	// +optional
	Failures int64 `json:"failures,omitempty"`
	// Message says why there is no signal, when there is none.
	// +optional
	Message string `json:"message,omitempty"`
	// ObservedAt is when these numbers were read from the API server. A
	// change of Failing is shown at once; numbers alone are refreshed at
	// most every 30s, since each refresh is a status write.
	// +optional
	ObservedAt *metav1.Time `json:"observedAt,omitempty"`
}

// TrialStatus is the half-open trial as of the last status write.
type TrialStatus struct {
	// Phase is Waiting (the circuit is open with full Bypass; the next
	// trial starts when the probes have been healthy long enough and not
	// before nextTrialAt) or Running.
	Phase string `json:"phase"`
	// SamplePercent is the share of requests a trial lets through.
	// +optional
	SamplePercent string `json:"samplePercent,omitempty"`
	// StartedAt is when the running trial began.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// Calls and Failures are the API server's calls to the webhook in the
	// running trial, as the signal last read them.
	// +optional
	Calls int64 `json:"calls,omitempty"`
	// +optional
	Failures int64 `json:"failures,omitempty"`
	// FailedTrials counts the trials of this open window that failed.
	// +optional
	FailedTrials int32 `json:"failedTrials,omitempty"`
	// NextTrialAt is the earliest start of the next trial.
	// +optional
	NextTrialAt *metav1.Time `json:"nextTrialAt,omitempty"`
	// Message says what the trial waits for, or how it ended.
	// +optional
	Message string `json:"message,omitempty"`
}

// AuditSpec configures the audit of open windows.
type AuditSpec struct {
	// Enabled turns the audit on.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// MaxObjects caps how many objects one audit examines; reaching it is
	// reported. Default 1000.
	// +optional
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	MaxObjects int32 `json:"maxObjects,omitempty"`
	// QPS is the most API requests per second an audit makes. Default 5.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	QPS int32 `json:"qps,omitempty"`
	// Remediate is what the controller does itself after each audit:
	// None (default) leaves repair to `tripswitch remediate`; Reapply
	// re-applies the recovered webhook's patch to each object it would
	// mutate; ReapplyAndRoll also evicts the controller-owned Pods it would
	// mutate, honouring PodDisruptionBudgets, so their owners recreate them
	// through the webhook. Both need the opt-in remediation RBAC
	// (docs/rbac.md). Objects a validating webhook objects to are never
	// touched automatically.
	// +optional
	// +kubebuilder:default=None
	Remediate RemediateMode `json:"remediate,omitempty"`
}

// RemediateMode is what the controller repairs after an audit.
// +kubebuilder:validation:Enum=None;Reapply;ReapplyAndRoll
type RemediateMode string

// Remediation modes.
const (
	RemediateNone           RemediateMode = "None"
	RemediateReapply        RemediateMode = "Reapply"
	RemediateReapplyAndRoll RemediateMode = "ReapplyAndRoll"
)

// RemediationResult counts what a remediation of one window did.
type RemediationResult struct {
	// By is who remediated: "controller" (spec.audit.remediate) or
	// "tripswitch remediate" (an operator).
	By string `json:"by"`
	// CompletedAt is when the remediation ended.
	CompletedAt metav1.Time `json:"completedAt"`
	// Remediated: objects the webhook's patch was re-applied to.
	// +optional
	Remediated int32 `json:"remediated,omitempty"`
	// Rolled: Pods evicted so that their owners recreate them.
	// +optional
	Rolled int32 `json:"rolled,omitempty"`
	// Labelled: objects a validating webhook objects to, labelled
	// tripswitch.dev/admitted-without.
	// +optional
	Labelled int32 `json:"labelled,omitempty"`
	// Marked: objects the recovered webhook denies any update of, so neither
	// a label nor a re-applied patch could be written to them; each has a
	// Warning event AdmittedWithout, and markedObjects lists the first.
	// +optional
	Marked int32 `json:"marked,omitempty"`
	// MarkedObjects are the first marked objects, "Kind namespace/name";
	// the events and `tripswitch remediate -o json` have every one.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	MarkedObjects []string `json:"markedObjects,omitempty"`
	// Current: objects with nothing left to do: repaired in this window
	// already (annotation tripswitch.dev/remediated), a patch that changes
	// nothing, already labelled, or clean when looked at again.
	// +optional
	Current int32 `json:"current,omitempty"`
	// Refused: objects tripswitch would not act on (not re-reviewed, a bare
	// Pod, an owner it does not roll, a disruption budget that never allowed
	// the eviction).
	// +optional
	Refused int32 `json:"refused,omitempty"`
	// Failed: objects the API server would not change (its reason is in the
	// events and the report).
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// Message says why a remediation stopped early, if it did.
	// +optional
	Message string `json:"message,omitempty"`
}

// AuditResult is the outcome of the audit of one open window.
type AuditResult struct {
	// Result is Completed or Failed (the audit could not be done; Message says why).
	Result string `json:"result"`
	// CompletedAt is when the audit ended.
	CompletedAt metav1.Time `json:"completedAt"`
	// Found is how many objects the webhook matches that were created or
	// updated in the window.
	// +optional
	Found int32 `json:"found,omitempty"`
	// Objected: a validating webhook denies them now.
	// +optional
	Objected int32 `json:"objected,omitempty"`
	// WouldMutate: a mutating webhook would change them now.
	// +optional
	WouldMutate int32 `json:"wouldMutate,omitempty"`
	// NoObjection: the webhook allows them unchanged.
	// +optional
	NoObjection int32 `json:"noObjection,omitempty"`
	// NotChecked: the re-review failed; they are not known to be clean.
	// +optional
	NotChecked int32 `json:"notChecked,omitempty"`
	// NotReviewed: the webhook has side effects and was not asked.
	// +optional
	NotReviewed int32 `json:"notReviewed,omitempty"`
	// Truncated: maxObjects was reached.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
	// Requests is how many API requests the audit made.
	// +optional
	Requests int64 `json:"requests,omitempty"`
	// Objects are the first objects that need attention (objected, would
	// mutate, not checked): "Verdict Kind namespace/name". `tripswitch audit`
	// prints them all.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Objects []string `json:"objects,omitempty"`
	// Message says what limited the audit, or why it failed.
	// +optional
	Message string `json:"message,omitempty"`
	// Remediation is the latest remediation of the window, if any.
	// +optional
	Remediation *RemediationResult `json:"remediation,omitempty"`
}

// CircuitState is the circuit's state as an operator needs it at a glance.
// +kubebuilder:validation:Enum=Closed;Open;Disarmed;Unknown
type CircuitState string

// Circuit states.
const (
	// StateClosed: the webhook has its original policy and tripswitch will
	// open the circuit if the webhook fails.
	StateClosed CircuitState = "Closed"
	// StateOpen: tripswitch holds the webhook open (Ignore or Bypass).
	StateOpen CircuitState = "Open"
	// StateDisarmed: closed, and tripswitch will not open it for this outage
	// (an operator overrode it); see status.disarmedReason.
	StateDisarmed CircuitState = "Disarmed"
	// StateUnknown: tripswitch cannot tell or cannot act: the target is
	// missing, its record is unreadable or another breaker's, or the webhook
	// cannot be probed. Ready is False with the reason.
	StateUnknown CircuitState = "Unknown"
)

// CircuitRecord is the recovery record tripswitch keeps on the webhook
// configuration itself, as a JSON annotation, while a circuit is open. It says
// exactly what tripswitch changed, so closing restores that and nothing else.
type CircuitRecord struct {
	// Webhook is the webhook entry's name.
	Webhook string `json:"webhook"`
	// Breaker is the owning WebhookCircuitBreaker's name.
	Breaker string `json:"breaker"`
	// BreakerUID is the owning breaker's UID.
	BreakerUID types.UID `json:"breakerUID"`
	// Action is what tripswitch did.
	Action OpenAction `json:"action"`
	// OriginalFailurePolicy is the failurePolicy before opening; nil if unset.
	// +optional
	OriginalFailurePolicy *string `json:"originalFailurePolicy,omitempty"`
	// SetFailurePolicy is the failurePolicy tripswitch set (Ignore action).
	// +optional
	SetFailurePolicy string `json:"setFailurePolicy,omitempty"`
	// MatchCondition is the name of the matchCondition tripswitch added (Bypass action).
	// +optional
	MatchCondition string `json:"matchCondition,omitempty"`
	// MatchConditionsWereUnset is true when the webhook had no matchConditions
	// before tripswitch added its own, so closing removes the list entirely.
	// +optional
	MatchConditionsWereUnset bool `json:"matchConditionsWereUnset,omitempty"`
	// OpenedAt is when the circuit opened.
	OpenedAt metav1.Time `json:"openedAt"`
	// Reason is why it opened.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Trial, while set, says the circuit is half-open (Bypass action): the
	// matchCondition lets a sample of requests through and the webhook's
	// failurePolicy is Ignore for the trial.
	// +optional
	Trial *TrialRecord `json:"trial,omitempty"`
	// FailedTrials counts the trials of this open window that failed.
	// +optional
	FailedTrials int32 `json:"failedTrials,omitempty"`
	// NextTrialAt is the earliest time the next trial may start, after a
	// failed one.
	// +optional
	NextTrialAt *metav1.Time `json:"nextTrialAt,omitempty"`
}

// TrialRecord is what tripswitch changed for a trial, on top of the open
// circuit's change.
type TrialRecord struct {
	// StartedAt is when the trial began.
	StartedAt metav1.Time `json:"startedAt"`
	// Expression is the sample matchCondition's expression tripswitch set
	// in place of "false".
	Expression string `json:"expression"`
	// SamplePercent is the share of requests the expression samples, as
	// applied (a multiple of 1/256, in percent).
	SamplePercent string `json:"samplePercent"`
	// SetFailurePolicy is the failurePolicy tripswitch set for the trial
	// (Ignore); closing or ending the trial restores the record's
	// originalFailurePolicy.
	SetFailurePolicy string `json:"setFailurePolicy"`
}

// OpenWindow is one period during which the circuit was open.
type OpenWindow struct {
	// OpenedAt is when the circuit opened.
	OpenedAt metav1.Time `json:"openedAt"`
	// ClosedAt is when it closed; unset while still open.
	// +optional
	ClosedAt *metav1.Time `json:"closedAt,omitempty"`
	// Action is the open action that was applied.
	Action OpenAction `json:"action"`
	// Reason is why it opened.
	// +optional
	Reason string `json:"reason,omitempty"`
	// CloseReason is why it closed.
	// +optional
	CloseReason string `json:"closeReason,omitempty"`
	// Audit is the re-review of what was admitted in this window
	// (spec.audit).
	// +optional
	Audit *AuditResult `json:"audit,omitempty"`
}

// ProbeStatus is the prober's view of the webhook as of the last status
// write: the status is written when a probe changes something a reader
// acts on (a verdict reached, the webhook becoming unprobeable, the
// endpoint counts, lateness), not on every probe; the counts and last
// result between verdicts are written with the next change (or, on their
// own, at most every 10 minutes). Counts saturate at their thresholds so
// that a steady state does not rewrite the status.
type ProbeStatus struct {
	// ConsecutiveFailures counts failed probes in a row, up to failureThreshold:
	// it stops there (the decision is made) and stays at the threshold for the
	// rest of an outage.
	// +optional
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
	// ConsecutiveSuccesses counts healthy probes in a row, up to
	// successThreshold, where it stops in the same way.
	// +optional
	ConsecutiveSuccesses int32 `json:"consecutiveSuccesses,omitempty"`
	// LastResult is Healthy, Unhealthy or Unknown.
	// +optional
	LastResult string `json:"lastResult,omitempty"`
	// LastReason explains LastResult.
	// +optional
	LastReason string `json:"lastReason,omitempty"`
	// HealthyEndpoints is how many ready endpoints answered the last probe
	// (probe.endpoints only).
	// +optional
	HealthyEndpoints *int32 `json:"healthyEndpoints,omitempty"`
	// Endpoints is how many ready endpoints the Service had at the last
	// probe (probe.endpoints only).
	// +optional
	Endpoints *int32 `json:"endpoints,omitempty"`
}

// WebhookCircuitBreakerStatus mirrors what tripswitch observed and did. The
// webhook configuration's annotation, not this status, is the source of truth
// for an open circuit.
type WebhookCircuitBreakerStatus struct {
	// ObservedGeneration is the spec generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// State is Closed, Open, Disarmed or Unknown.
	// +optional
	State CircuitState `json:"state,omitempty"`
	// Target is configurationName/webhookName, for display.
	// +optional
	Target string `json:"target,omitempty"`
	// LastTransitionTime is when State last changed.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	// Conditions: Ready, CircuitOpen, TargetFound, ExternalChange, ProbeUnsupported,
	// ProbesLate (probes cannot keep their interval), APIServerSignal, Owned
	// (another controller writes the webhook, and whether the open survives it).
	// While a trial runs (spec.halfOpen), CircuitOpen's reason is
	// TrialRunning.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Record mirrors the recovery record on the webhook configuration.
	// +optional
	Record *CircuitRecord `json:"record,omitempty"`
	// TargetUID is the UID of the webhook configuration last seen, to detect
	// that it was deleted and recreated.
	// +optional
	TargetUID types.UID `json:"targetUID,omitempty"`
	// DisarmedReason, when set, stops tripswitch from opening the circuit: an
	// operator changed the webhook while it was open, or forced it closed during
	// an outage. It clears once the webhook is seen healthy again, or when the
	// breaker's tripswitch.dev/rearm annotation gets a new value.
	// +optional
	DisarmedReason string `json:"disarmedReason,omitempty"`
	// ObservedRearm is the last tripswitch.dev/rearm annotation value acted on.
	// +optional
	ObservedRearm string `json:"observedRearm,omitempty"`
	// Probe is the prober's recent view.
	// +optional
	Probe ProbeStatus `json:"probe,omitempty"`
	// APIServer is the API server signal (spec.apiServerSignal), next to the
	// probes' view in probe. Which signal opened a circuit is in the
	// CircuitOpen condition's message and the window's reason ("3
	// consecutive failed probes ..." or "the API server's calls to the
	// webhook failed at ..."), and in the CircuitOpened event, whose message
	// begins with WebhookUnhealthy or APIServerFailing.
	// +optional
	APIServer *APIServerSignalStatus `json:"apiServer,omitempty"`
	// Trial is the half-open trial (spec.halfOpen): the one running, or
	// when the next may start; unset while the circuit is closed.
	// +optional
	Trial *TrialStatus `json:"trial,omitempty"`
	// History lists the most recent open windows, newest last.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	History []OpenWindow `json:"history,omitempty"`
	// Floor is the fallback policy (spec.whileOpen.fallbackPolicy), as its
	// record on the policy says.
	// +optional
	Floor *FloorStatus `json:"floor,omitempty"`
	// Outage is the outage window the breaker is in, with its write
	// budget; unset between outages.
	// +optional
	Outage *OutageWindow `json:"outage,omitempty"`
}

// OutageEvidence is what began an outage window, and so what must say the
// webhook is healthy again to end it.
// +kubebuilder:validation:Enum=Probes;APIServer;Operator
type OutageEvidence string

// Kinds of evidence.
const (
	// EvidenceProbes: the probes failed; healthy probes end the window.
	EvidenceProbes OutageEvidence = "Probes"
	// EvidenceAPIServer: the API server's own calls failed (the API
	// server signal); only its calls passing again end the window, not
	// probes that may have passed all along.
	EvidenceAPIServer OutageEvidence = "APIServer"
	// EvidenceOperator: mode ForceOpen, or ForceClosed during an outage;
	// healthy probes in another mode end the window.
	EvidenceOperator OutageEvidence = "Operator"
)

// OutageWindow is one outage as tripswitch acts in it: it begins with
// tripswitch's open (or a disarm) and ends only when the evidence that
// began it says the webhook is healthy again, or with the
// tripswitch.dev/rearm annotation. Every write tripswitch makes to the
// configuration in the window is counted here before it is sent, so a
// restart or a new leader keeps the count: the window allows one open, one
// write to close it or drop its record, and two for each half-open trial
// (start and end). A write past that is refused and the breaker disarms
// (WriteBudgetExhausted).
type OutageWindow struct {
	// StartedAt is when the window began.
	StartedAt metav1.Time `json:"startedAt"`
	// Evidence is what began the window.
	Evidence OutageEvidence `json:"evidence"`
	// ConfigurationUID is the UID of the configuration the window's open
	// was written to: one created anew since, while the webhook still
	// fails, undid that open.
	// +optional
	ConfigurationUID types.UID `json:"configurationUID,omitempty"`
	// Action is the open action of the window's open, if one was made.
	// +optional
	Action OpenAction `json:"action,omitempty"`
	// OpenedAt is when the window's open was made (its record's openedAt).
	// +optional
	OpenedAt *metav1.Time `json:"openedAt,omitempty"`
	// Held: tripswitch's open of this window is on the configuration, as
	// far as tripswitch wrote: set by the open, cleared by the close or the
	// drop of its record, or when someone undid it.
	// +optional
	Held bool `json:"held,omitempty"`
	// Generation is the breaker's spec generation the counts below are
	// for: an operator's edit of the spec is a new instruction, and its
	// writes are counted afresh.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// Opens counts the opens in the window (at most one).
	// +optional
	Opens int32 `json:"opens,omitempty"`
	// Trials counts the half-open trials started in the window.
	// +optional
	Trials int32 `json:"trials,omitempty"`
	// Writes counts every write to the configuration in the window.
	// +optional
	Writes int32 `json:"writes,omitempty"`
	// BasedOn is the configuration's resourceVersion the last write
	// counted was decided on: an open counted while the configuration is
	// still at that version, without its record, was never applied (a
	// crash, or an error that said nothing, between the count and the
	// write), and is not counted.
	// +optional
	BasedOn string `json:"basedOn,omitempty"`
	// Budget is how many writes the window allows: 2, and 2 more for each
	// trial started.
	// +optional
	Budget int32 `json:"budget,omitempty"`
	// Exhausted: a write past the budget was refused, and the breaker is
	// disarmed for the rest of the window (Ready reason
	// WriteBudgetExhausted).
	// +optional
	Exhausted bool `json:"exhausted,omitempty"`
	// CallsFailed: the API server's own calls to the webhook were seen
	// failing in the window (the API server signal, or a half-open trial
	// that failed). Healthy probes alone do not end such a window: the
	// API server's calls passing do, or a trial that passes.
	// +optional
	CallsFailed bool `json:"callsFailed,omitempty"`
}

// WebhookCircuitBreaker fails one approved admission webhook open during a
// sustained outage and restores it when the webhook recovers.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wcb
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.status.target`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.openAction`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Since",type=date,JSONPath=`.status.lastTransitionTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WebhookCircuitBreaker struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the operator's approval and settings.
	Spec WebhookCircuitBreakerSpec `json:"spec"`
	// Status is what tripswitch observed and did.
	// +optional
	Status WebhookCircuitBreakerStatus `json:"status,omitempty"`
}

// WebhookCircuitBreakerList is a list of WebhookCircuitBreakers.
//
// +kubebuilder:object:root=true
type WebhookCircuitBreakerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the breakers.
	Items []WebhookCircuitBreaker `json:"items"`
}

package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The spec's defaults. The API server applies them through the CRD's
// +kubebuilder:default markers, which must say the same (a test compares
// the generated CRD with these); Resolve applies them to a breaker stored
// before a default existed, or created where the CRD's defaulting did not
// run. Nothing else in tripswitch spells a default of the spec.
const (
	DefaultProbeInterval         = time.Second
	DefaultProbeTimeout          = 250 * time.Millisecond
	DefaultProbeFailureThreshold = 3
	DefaultProbeSuccessThreshold = 5
	DefaultProbeKind             = ProbeHTTPGet
	DefaultProbeHealthPath       = "/healthz"
	DefaultOpenAction            = OpenActionIgnore
	DefaultMode                  = ModeAuto
	DefaultSignalWindow          = 30 * time.Second
	DefaultSignalMinimumCalls    = 10
	DefaultSignalFailureRate     = 50
	DefaultHalfOpenAfter         = 30 * time.Second
	DefaultHalfOpenWindow        = 30 * time.Second
	DefaultHalfOpenSamplePercent = 6
	DefaultHalfOpenMaxWait       = 2 * time.Minute
	DefaultHalfOpenMaxBackoff    = 10 * time.Minute
	DefaultAuditMaxObjects       = 1000
	DefaultAuditQPS              = 5
	DefaultAuditRemediate        = RemediateNone
	DefaultOnMaxOpen             = OnMaxOpenStay
)

// ResolvedSpec is a breaker's spec with every default applied, resolved
// once per reconcile (or audit, or check) and handed to what needs it
// (policy.Outcome.Spec).
// +kubebuilder:object:generate=false
type ResolvedSpec struct {
	Mode   Mode
	Action OpenAction
	Probe  ResolvedProbe
	// Signal is nil when the API server signal is off.
	Signal *ResolvedSignal
	// Audit is nil when the audit is off.
	Audit *ResolvedAudit
	// HalfOpen is nil when closing needs no trial: any action but Bypass,
	// or Bypass without the API server signal.
	HalfOpen *ResolvedHalfOpen
	// Fallback is nil when there is no fallback policy.
	Fallback *FallbackPolicy
	// MaxOpen is 0 when the circuit may stay open without limit.
	MaxOpen   time.Duration
	OnMaxOpen OnMaxOpen
}

// ResolvedHalfOpen is spec.halfOpen with its defaults.
// +kubebuilder:object:generate=false
type ResolvedHalfOpen struct {
	After, Window, MaxWait, MaxBackoff time.Duration
	SamplePercent                      int32
}

// ResolvedProbe is spec.probe with its defaults.
// +kubebuilder:object:generate=false
type ResolvedProbe struct {
	Interval, Timeout                  time.Duration
	FailureThreshold, SuccessThreshold int32
	Kind                               ProbeKind
	HealthPath                         string
	Endpoints                          bool
}

// ResolvedSignal is spec.apiServerSignal with its defaults.
// +kubebuilder:object:generate=false
type ResolvedSignal struct {
	Window               time.Duration
	MinimumCalls         int32
	FailureRateThreshold int32
}

// ResolvedAudit is spec.audit with its defaults.
// +kubebuilder:object:generate=false
type ResolvedAudit struct {
	MaxObjects, QPS int32
	Remediate       RemediateMode
}

// Resolve returns the spec with every default applied.
func (s *WebhookCircuitBreakerSpec) Resolve() ResolvedSpec {
	r := ResolvedSpec{Mode: s.Mode, Action: s.OpenAction, Probe: s.Probe.Resolve(), OnMaxOpen: s.OnMaxOpen}
	if r.OnMaxOpen == "" {
		r.OnMaxOpen = DefaultOnMaxOpen
	}
	if s.MaxOpenDuration != nil && s.MaxOpenDuration.Duration > 0 {
		r.MaxOpen = s.MaxOpenDuration.Duration
	}
	if w := s.WhileOpen; w != nil && w.FallbackPolicy != nil {
		fp := *w.FallbackPolicy
		r.Fallback = &fp
	}
	if r.Mode == "" {
		r.Mode = DefaultMode
	}
	if r.Action == "" {
		r.Action = DefaultOpenAction
	}
	if sig := s.APIServerSignal; sig != nil && sig.Enabled {
		r.Signal = &ResolvedSignal{Window: DefaultSignalWindow, MinimumCalls: DefaultSignalMinimumCalls, FailureRateThreshold: DefaultSignalFailureRate}
		if sig.Window != nil && sig.Window.Duration > 0 {
			r.Signal.Window = sig.Window.Duration
		}
		if sig.MinimumCalls > 0 {
			r.Signal.MinimumCalls = sig.MinimumCalls
		}
		if sig.FailureRateThreshold > 0 {
			r.Signal.FailureRateThreshold = sig.FailureRateThreshold
		}
	}
	if r.Action == OpenActionBypass && r.Signal != nil {
		r.HalfOpen = s.HalfOpen.Resolve()
	}
	if a := s.Audit; a != nil && a.Enabled {
		r.Audit = &ResolvedAudit{MaxObjects: DefaultAuditMaxObjects, QPS: DefaultAuditQPS, Remediate: DefaultAuditRemediate}
		if a.MaxObjects > 0 {
			r.Audit.MaxObjects = a.MaxObjects
		}
		if a.QPS > 0 {
			r.Audit.QPS = a.QPS
		}
		if a.Remediate != "" {
			r.Audit.Remediate = a.Remediate
		}
	}
	return r
}

// Resolve returns the probe spec with every default applied.
func (p ProbeSpec) Resolve() ResolvedProbe {
	r := ResolvedProbe{DefaultProbeInterval, DefaultProbeTimeout, DefaultProbeFailureThreshold, DefaultProbeSuccessThreshold,
		DefaultProbeKind, DefaultProbeHealthPath, p.Endpoints}
	if p.Interval != nil && p.Interval.Duration > 0 {
		r.Interval = p.Interval.Duration
	}
	if p.Timeout != nil && p.Timeout.Duration > 0 {
		r.Timeout = p.Timeout.Duration
	}
	if p.FailureThreshold > 0 {
		r.FailureThreshold = p.FailureThreshold
	}
	if p.SuccessThreshold > 0 {
		r.SuccessThreshold = p.SuccessThreshold
	}
	if p.Kind != "" {
		r.Kind = p.Kind
	}
	if p.HealthPath != "" {
		r.HealthPath = p.HealthPath
	}
	return r
}

// Resolve returns the half-open spec with every default applied; h may be
// nil (every default). A maxWait shorter than the window is the window.
func (h *HalfOpenSpec) Resolve() *ResolvedHalfOpen {
	r := &ResolvedHalfOpen{After: DefaultHalfOpenAfter, Window: DefaultHalfOpenWindow, MaxWait: DefaultHalfOpenMaxWait,
		MaxBackoff: DefaultHalfOpenMaxBackoff, SamplePercent: DefaultHalfOpenSamplePercent}
	if h == nil {
		return r
	}
	for _, f := range []struct {
		from *metav1.Duration
		to   *time.Duration
	}{{h.After, &r.After}, {h.Window, &r.Window}, {h.MaxWait, &r.MaxWait}, {h.MaxBackoff, &r.MaxBackoff}} {
		if f.from != nil && f.from.Duration > 0 {
			*f.to = f.from.Duration
		}
	}
	if h.SamplePercent > 0 {
		r.SamplePercent = min(h.SamplePercent, MaxHalfOpenSamplePercent)
	}
	r.MaxWait = max(r.MaxWait, r.Window)
	return r
}

// Package probe checks the health of an admission webhook. Its central rule:
// a webhook tripswitch cannot probe is Unknown, never Unhealthy, because "cannot
// probe" is not "down" and must never open a circuit.
package probe

import (
	"context"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Status is the outcome of one probe.
type Status string

// Probe outcomes.
const (
	// Healthy: the webhook answered as a healthy webhook does.
	Healthy Status = "Healthy"
	// Unhealthy: the webhook was reached, or should have been, and failed.
	Unhealthy Status = "Unhealthy"
	// Unknown: the probe could not be made (bad or unsupported configuration).
	Unknown Status = "Unknown"
	// Discarded: the probe says nothing about the webhook, in either
	// direction: it never reached it (Discard says why), or it timed out
	// while the controller itself could not run. It changes no count.
	Discarded Status = "Discarded"
)

// Discard is why a probe was Discarded.
type Discard string

// Why probes are discarded.
const (
	// DiscardStarved: the probe timed out while the controller could not
	// run for a large part of it (paused, CPU-throttled, starved of CPU):
	// the controller, not the webhook, was slow.
	DiscardStarved Discard = "Starved"
	// DiscardBlocked: every connection to the destination is held by an
	// earlier probe's unanswered request, which has been counted already.
	DiscardBlocked Discard = "Blocked"
	// DiscardPaced: the probe waited for the controller's own limit on
	// connections opened at once (a start or failover opens them all).
	DiscardPaced Discard = "Paced"
)

// Result is one probe's outcome.
type Result struct {
	Status Status
	// Reason is a short, precise explanation ("timeout after 250ms", "HTTP 503").
	Reason string
	// Latency is how long the probe took.
	Latency time.Duration
	// Healthy and Total count endpoints in endpoint mode (Target.EndpointMode).
	Healthy, Total int
	// Lag is how much later than its interval after the previous one this
	// probe started (set by the Monitor): a machine too busy for its
	// breakers starts every probe late.
	Lag time.Duration
	// TimedOut: the probe ran out of time (Status Unhealthy) and its prober
	// could not confirm that the webhook caused it (see HTTPProber.Pauses):
	// evidence only if the controller could run meanwhile (Monitor.Stalls).
	TimedOut bool
	// Overrun is how late after its deadline the probe's own goroutine ran.
	Overrun time.Duration
	// Discard says why a Discarded probe was.
	Discard Discard
}

// Target is everything a probe needs to reach one webhook.
type Target struct {
	// ClientConfig is the webhook's, as the API server would use it.
	ClientConfig admissionregistrationv1.WebhookClientConfig
	// Kind is HTTPGet or AdmissionReview.
	Kind v1alpha1.ProbeKind
	// HealthPath is the HTTPGet path.
	HealthPath string
	// Timeout bounds one probe.
	Timeout time.Duration
	// ReviewVersions are the webhook's admissionReviewVersions.
	ReviewVersions []string
	// Key names who probes: the monitor's probe group (the breakers that
	// share this probe). Groups probing one destination each count a
	// request that never answered once (see HTTPProber).
	Key string
	// EndpointMode probes each of Endpoints (ready "ip:port" addresses of the
	// Service, resolved by the caller) instead of the Service name, with the
	// same URL and TLS server name. EndpointsErr, when set, says why the
	// endpoints could not be resolved.
	EndpointMode bool
	Endpoints    []string
	EndpointsErr string
}

// Prober probes a target once. Implementations must honour ctx and Timeout.
type Prober interface {
	Probe(ctx context.Context, t Target) Result
}

// ProberFunc adapts a function to Prober.
type ProberFunc func(ctx context.Context, t Target) Result

// Probe calls f.
func (f ProberFunc) Probe(ctx context.Context, t Target) Result { return f(ctx, t) }

package admission

import (
	"context"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// Poster posts an AdmissionReview body to a webhook the way the API server
// calls it, and returns the answer's status code and body; ctx bounds the
// call. *probe.HTTPProber implements it, on the connections its probes
// keep.
type Poster interface {
	Post(ctx context.Context, cc admissionregistrationv1.WebhookClientConfig, body []byte) (int, []byte, error)
}

// Send sends a review body to the webhook through p, bounded by timeout as
// the webhook's timeoutSeconds bounds the API server's call (0: by ctx
// alone), and returns the answer's status code and body.
func Send(ctx context.Context, p Poster, cc admissionregistrationv1.WebhookClientConfig, body []byte, timeout time.Duration) (int, []byte, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return p.Post(ctx, cc, body)
}

package probe

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Send posts an AdmissionReview body to the webhook's own path, the way the
// API server calls it (same destination, TLS trust and server name as
// Probe), and returns the answer's status code and body. timeout bounds the
// call, as the webhook's timeoutSeconds bounds the API server's.
func (p *HTTPProber) Send(ctx context.Context, cc admissionregistrationv1.WebhookClientConfig, body []byte, timeout time.Duration) (int, []byte, error) {
	ep, err := p.resolve(Target{ClientConfig: cc, Kind: v1alpha1.ProbeAdmissionReview})
	if err != nil {
		return 0, nil, err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("build review request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	// Within the destination's slots, as a probe: a destination holds at
	// most that many connections, whoever sends on them.
	d := p.destination(ep)
	select {
	case d.slot <- struct{}{}:
	case <-ctx.Done():
		return 0, nil, fmt.Errorf("wait for a connection to the webhook: %w", context.Cause(ctx))
	}
	defer func() { <-d.slot }()
	a, err := p.exchange(ctx, d, req, body, &inflight{})
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return 0, nil, err
	}
	return a.code, a.body, nil
}

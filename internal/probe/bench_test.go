package probe_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

// BenchmarkHTTPGetProbe is the cost of one steady probe of a healthy webhook
// (client side, with the server in the same process): what a controller
// with N breakers pays N times per interval.
func BenchmarkHTTPGetProbe(b *testing.B) {
	t := &testing.T{}
	s := serve(t, healthz(0, http.StatusOK), "127.0.0.1")
	target := urlTarget(s, "/mutate")
	p := &probe.HTTPProber{}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		if r := p.Probe(pctx, target); r.Status != probe.Healthy {
			b.Fatalf("probe: %+v", r)
		}
		cancel()
	}
}

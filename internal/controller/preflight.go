package controller

import (
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/webhookchain"
)

// preflight judges the chain of webhooks that can match the same requests
// as the breaker's: its own configuration as read and every configuration
// the target watches hold, which are the approved ones breakers target (the
// controller may read no other; `tripswitch check`, with an operator's
// credentials, judges them all).
func (r *Reconciler) preflight(breaker string, cfg *circuit.Configuration, target circuit.Webhook) webhookchain.Verdict {
	deadline := r.RequestDeadline
	if deadline <= 0 {
		deadline = webhookchain.DefaultRequestDeadline
	}
	return r.chains.Judge(r.Targets, r.Clock.Now(), breaker, cfg, target, deadline)
}

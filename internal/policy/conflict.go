package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// ReasonConflicted is Ready's reason on a breaker that names the same
// webhook as an older breaker, which owns it.
const ReasonConflicted = "Conflicted"

// Winner is the breaker, of b and the others naming the same webhook, that
// owns it, if that is not b: the oldest by creationTimestamp, then by name,
// among those not being deleted. Empty when b owns it (b itself counts even
// while being deleted: its deletion restores what it holds).
func Winner(b *v1alpha1.WebhookCircuitBreaker, others []v1alpha1.WebhookCircuitBreaker) string {
	cands := []*v1alpha1.WebhookCircuitBreaker{b}
	for i := range others {
		if o := &others[i]; o.Name != b.Name && o.DeletionTimestamp.IsZero() {
			cands = append(cands, o)
		}
	}
	w := slices.MinFunc(cands, func(x, y *v1alpha1.WebhookCircuitBreaker) int {
		if c := x.CreationTimestamp.Compare(y.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(x.Name, y.Name)
	})
	if w.Name == b.Name {
		return ""
	}
	return w.Name
}

// checkConflict: an older breaker names the same webhook and owns it. This
// one never opens the circuit. If it holds one from before the conflict (it
// tripped first, before tripswitch told conflicts apart), it may still close
// it, or let it go, as it would alone.
func checkConflict(in Input) (Decision, bool) {
	if in.ConflictWinner == "" || in.Deleting {
		return Decision{}, false
	}
	d := Decision{Reason: ReasonConflicted, Blocked: true, Message: fmt.Sprintf(
		"breaker %s names the same webhook and is older, so it owns it: this breaker never opens the circuit while %s exists. "+
			"Delete one of the two (this breaker takes over when %s is deleted)", in.ConflictWinner, in.ConflictWinner, in.ConflictWinner)}
	if rec := in.State.Record; rec == nil || rec.BreakerUID != in.BreakerUID || in.State.RecordErr != nil {
		return d, true
	}
	alone := in
	alone.ConflictWinner = ""
	own := Decide(alone)
	if own.Write == WriteOpen {
		return d, true
	}
	if own.Write != WriteNone || own.ExternalChange || own.Disarm != "" {
		return own, true
	}
	d.Message += "; it still holds the circuit it opened before and closes it when the webhook recovers"
	return d, true
}

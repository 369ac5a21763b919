// Package clusterlimit is --max-open-circuits: how many circuits may be open
// at once in the cluster.
//
// The limit is judged on the recovery records on the webhook configurations
// (the truth), never on a controller's memory, so a new leader after a
// failover reaches the same decision. Breakers that want to open are
// ordered by when each reached its threshold, then by name, then by UID: the
// first to fail is the first to open, and a tie is broken the same way
// every time (Decide, pure).
//
// In the controller, Gate serializes every decision to open across the
// process's reconciles (two opens write to different configurations, so no
// resourceVersion can catch two reconciles taking the last place) and
// judges each on the records of every target configuration, read fresh
// under its lock. (How long one circuit may stay open, spec.maxOpenDuration,
// is policy.CheckMaxOpen.)
package clusterlimit

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/policy"
)

// Recheck is how soon a refused breaker looks again, so opening resumes
// soon after a circuit closes.
const Recheck = 2 * time.Second

// Gate is the process-wide limit; nil or Max 0 is no limit.
type Gate struct {
	// Max is --max-open-circuits.
	Max int
	// Reader reads breakers and configurations uncached.
	Reader client.Reader
	mu     sync.Mutex
}

func noop() {}

// On reports whether a limit applies. A circuit opened under it opens in
// its own breaker's patch only: a companion opening in the same patch would
// not be judged.
func (g *Gate) On() bool { return g != nil && g.Max > 0 }

// Judge lets d through unless it opens a circuit the limit refuses: then it
// is a refusal (reason ClusterLimit) that looks again in Recheck. An open
// allowed holds the gate until the caller's unlock, after its write.
func (g *Gate) Judge(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, d policy.Decision, now time.Time) (policy.Decision, func()) {
	if !g.On() || d.Write != policy.WriteOpen {
		return d, noop
	}
	g.mu.Lock()
	allowed, msg, err := g.admit(ctx, b, now)
	if err == nil && allowed {
		return d, g.mu.Unlock
	}
	g.mu.Unlock()
	if err != nil {
		msg = "cannot tell how many circuits are open, so this one does not open (--max-open-circuits): " + err.Error()
	}
	return policy.Decision{Reason: v1alpha1.ReasonClusterLimit, Refused: true, Message: msg, RecheckIn: Recheck}, noop
}

// admit reads every breaker and its configuration's records and decides b's
// open among the breakers waiting for one.
func (g *Gate) admit(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, now time.Time) (bool, string, error) {
	var list v1alpha1.WebhookCircuitBreakerList
	if err := g.Reader.List(ctx, &list); err != nil {
		return false, "", fmt.Errorf("list breakers: %w", err)
	}
	var cfgs []*circuit.Configuration
	seen := map[string]bool{}
	want := []Candidate{candidate(b, now)}
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID != b.UID && meta.IsStatusConditionTrue(o.Status.Conditions, v1alpha1.ConditionOpenRefused) {
			want = append(want, candidate(o, now))
		}
		t := o.Spec.Target
		if seen[t.ConfigurationKey()] {
			continue
		}
		seen[t.ConfigurationKey()] = true
		obj, err := circuit.NewObject(t.Kind)
		if err != nil {
			return false, "", err
		}
		if err := g.Reader.Get(ctx, types.NamespacedName{Name: t.ConfigurationName}, obj); apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			continue // nothing of tripswitch's there, or nothing it could have written
		} else if err != nil {
			return false, "", fmt.Errorf("read %s %s: %w", t.Kind, t.ConfigurationName, err)
		}
		cfg, err := circuit.View(obj)
		if err != nil {
			return false, "", err
		}
		cfgs = append(cfgs, cfg)
	}
	open, _ := Records(cfgs) // an unreadable record counts as open
	allowed, _, msg := Decide(g.Max, open, want).Position(b.UID)
	return allowed, msg, nil
}

// candidate is b waiting to open since its OpenRefused condition turned
// True (in its status, so it survives failover), or since now.
func candidate(b *v1alpha1.WebhookCircuitBreaker, now time.Time) Candidate {
	at := metav1.NewTime(now.Truncate(time.Second))
	if c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionOpenRefused); c != nil && c.Status == metav1.ConditionTrue {
		at = c.LastTransitionTime
	}
	return Candidate{Breaker: b.Name, UID: b.UID, ThresholdAt: at.Time}
}

package webhookchain

import (
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// fakeSource is one watched configuration and its generation.
type fakeSource struct {
	gen uint64
	cfg *admissionregistrationv1.MutatingWebhookConfiguration
}

func (f *fakeSource) Generation() uint64          { return f.gen }
func (f *fakeSource) Each(fn func(client.Object)) { fn(f.cfg) }

// TestWatchedJudgesAgainOnlyWhatChanged: a breaker's verdict is kept while
// the watched webhooks change only in policy (an open); a timeout change is
// judged again once Refresh has passed since the last gathering, not
// before; without watches nothing is kept.
func TestWatchedJudgesAgainOnlyWhatChanged(t *testing.T) {
	peer := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "peer"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "slow.example.com", TimeoutSeconds: ptr.To(int32(30)),
			Rules: []admissionregistrationv1.RuleWithOperations{rule(create, core, []string{"pods"}, nil)}}}}
	ownObj := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "own"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "target.example.com", TimeoutSeconds: ptr.To(int32(10)),
			Rules: []admissionregistrationv1.RuleWithOperations{rule(create, core, []string{"pods"}, nil)}}}}
	own, err := circuit.View(ownObj)
	if err != nil {
		t.Fatal(err)
	}
	target := own.Webhooks[0]
	src := &fakeSource{gen: 1, cfg: peer}
	var w Watched
	now := time.Unix(0, 0)
	judge := func() time.Duration { return w.Judge(src, now, "b", own, target, 0).Worst }
	if got := judge(); got != 40*time.Second {
		t.Fatalf("worst %v, want 40s", got)
	}
	// An open: the policy changes, the chain does not.
	src.gen++
	peer.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	now = now.Add(Refresh)
	id := w.id
	if got := judge(); got != 40*time.Second || w.id != id {
		t.Fatalf("after an open: worst %v, gathering %d (was %d)", got, w.id, id)
	}
	// A timeout: not gathered again within Refresh, then judged again.
	src.gen++
	peer.Webhooks[0].TimeoutSeconds = ptr.To(int32(55))
	now = now.Add(Refresh / 2)
	if got := judge(); got != 40*time.Second {
		t.Fatalf("within Refresh: worst %v, want the last gathering's 40s", got)
	}
	now = now.Add(Refresh)
	if got := judge(); got != 65*time.Second {
		t.Fatalf("after Refresh: worst %v, want 65s", got)
	}
	w.Forget("b")
	if _, ok := w.verdicts["b"]; ok {
		t.Fatal("Forget kept the verdict")
	}
	// No watches: only the breaker's own configuration, nothing kept.
	src.gen = 0
	if got := judge(); got != 10*time.Second || len(w.verdicts) != 0 {
		t.Fatalf("without watches: worst %v, %d kept", got, len(w.verdicts))
	}
}

package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// testServiceProbing: with probe.endpoints, the breaker probes each ready
// endpoint of the webhook's Service, as the endpoint controller publishes
// them. Killing one replica's Pod leaves the other answering: the circuit
// stays closed while the ReplicaSet replaces it. Hanging both opens it.
func testServiceProbing(t *testing.T) {
	installTripswitch(t, nil)
	hook := deployWebhook(t, "probe-webhook", "hook")
	hook.configuration(t, probeHook, "configmaps", "tripswitch.test/probe")
	b := breaker(t, probeHook, v1alpha1.OpenActionBypass, v1alpha1.ProbeSpec{Endpoints: true})
	eventually(t, time.Minute, "the breaker closed, probing both endpoints", func(ctx context.Context) (bool, error) {
		got, err := state(ctx, b.Name)
		if err != nil {
			return false, err
		}
		s := got.Status.Probe
		return got.Status.State == v1alpha1.StateClosed && ptr.Deref(s.Endpoints, 0) == 2 && ptr.Deref(s.HealthyEndpoints, 0) == 2,
			fmt.Errorf("state %q, %d of %d endpoints healthy", got.Status.State, ptr.Deref(s.HealthyEndpoints, 0), ptr.Deref(s.Endpoints, 0))
	})

	pods, err := hook.pods(t.Context())
	if err != nil || len(pods) != 2 {
		t.Fatalf("webhook Pods: %d (%v)", len(pods), err)
	}
	victim := pods[0].Name
	if err := env.cs.CoreV1().Pods(hook.ns).Delete(t.Context(), victim, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s; watching the circuit while the ReplicaSet replaces it", victim)
	// Three failed probes of the whole Service would open it in about 3 s:
	// watch for several times that, through the replacement.
	sawOne := false
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		got, err := state(t.Context(), b.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.State != v1alpha1.StateClosed {
			t.Fatalf("one replica of two killed: the circuit is %s, want Closed (last probe: %s)", got.Status.State, got.Status.Probe.LastReason)
		}
		if ptr.Deref(got.Status.Probe.Endpoints, 0) == 1 {
			sawOne = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	hook.waitReady(t, 2)
	t.Logf("circuit stayed Closed; the breaker saw the Service with one endpoint: %v", sawOne)

	hung := time.Now()
	hook.setDelay(t, time.Hour)
	t.Logf("both replicas hung: circuit opened after %v", waitState(t, b.Name, v1alpha1.StateOpen, time.Minute).Sub(hung).Round(10*time.Millisecond))
	hook.setDelay(t, 0)
	waitState(t, b.Name, v1alpha1.StateClosed, time.Minute)
}

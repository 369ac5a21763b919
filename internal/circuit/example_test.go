package circuit_test

import (
	"encoding/json"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// Opening with Bypass is one JSON Patch: pin the resourceVersion that was
// read, check the webhook is still at its index, add the always-false
// matchCondition, and write the recovery record in the same request.
func ExampleOpenPatch() {
	obj := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "slow-mutator", ResourceVersion: "4711"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "other.example.com", FailurePolicy: ptr.To(admissionregistrationv1.Fail)},
			{Name: "slow.example.com", FailurePolicy: ptr.To(admissionregistrationv1.Fail)},
		},
	}
	cfg, err := circuit.View(obj)
	if err != nil {
		panic(err)
	}
	patch, rec, err := circuit.OpenPatch(cfg, "slow.example.com", v1alpha1.CircuitRecord{
		Breaker: "slow-mutator", BreakerUID: "0b5e...", Action: v1alpha1.OpenActionBypass,
		OpenedAt: metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)),
	})
	if err != nil {
		panic(err)
	}
	var ops []map[string]any
	_ = json.Unmarshal(patch, &ops)
	for _, op := range ops[:4] {
		fmt.Println(op["op"], op["path"])
	}
	fmt.Println("record:", rec.Action, "original failurePolicy", *rec.OriginalFailurePolicy, "matchConditions were unset:", rec.MatchConditionsWereUnset)
	// Output:
	// replace /metadata/resourceVersion
	// test /webhooks/1/name
	// add /webhooks/1/matchConditions
	// add /metadata/annotations
	// record: Bypass original failurePolicy Fail matchConditions were unset: true
}

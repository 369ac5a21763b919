package owners_test

import (
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/owners"
)

// A configuration that an operator server-side-applies, failurePolicy
// included: its applies leave Bypass alone, and with force (which
// managedFields do not show) undo openAction Ignore.
func ExampleJudge() {
	created := metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{
		Name: "platform-webhooks", CreationTimestamp: created,
		ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager: "platform-operator", Operation: metav1.ManagedFieldsOperationApply, Time: &created, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:webhooks":{"k:{\"name\":\"inject.example.com\"}":{".":{},"f:name":{},"f:failurePolicy":{},"f:rules":{}}}}`),
		}},
	}}
	for _, action := range []v1alpha1.OpenAction{v1alpha1.OpenActionIgnore, v1alpha1.OpenActionBypass} {
		v := owners.Judge(cfg, "inject.example.com", action, false, nil)
		fmt.Println(action, v.Owned, v.Reason)
	}
	// Output:
	// Ignore true OwnerMayUndoOpen
	// Bypass true OwnerKeepsOpen
}

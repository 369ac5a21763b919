package remediate

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Result is the report's counts for the window's audit status.
func (rep *Report) Result(by string, at metav1.Time) *v1alpha1.RemediationResult {
	res := &v1alpha1.RemediationResult{
		By: by, CompletedAt: at,
		Remediated: int32(rep.Counts[Remediated]), Rolled: int32(rep.Counts[Rolled]), Labelled: int32(rep.Counts[Labelled]),
		Marked: int32(rep.Counts[Marked]), Current: int32(rep.Counts[Current]),
		Refused: int32(rep.Counts[Refused]), Failed: int32(rep.Counts[Failed]), Message: rep.Stopped,
	}
	for _, it := range rep.Items {
		if it.Outcome == Marked && len(res.MarkedObjects) < maxMarkedObjects {
			res.MarkedObjects = append(res.MarkedObjects, it.Kind+" "+it.Object())
		}
	}
	return res
}

// maxMarkedObjects is the status's markedObjects limit (its CRD's maxItems).
const maxMarkedObjects = 10

// Object is the item's "namespace/name", or its name when cluster-scoped.
func (it *Item) Object() string {
	if it.Namespace == "" {
		return it.Name
	}
	return it.Namespace + "/" + it.Name
}

// RecordStatus writes a remediation's result into the window of breaker
// name that opened at openedAt, in its audit; a window without one gets
// auditResult as its audit. A breaker deleted, or a window gone from the
// history, is not an error: there is nothing left to record it in.
func RecordStatus(ctx context.Context, c client.Client, name string, openedAt metav1.Time, auditResult *v1alpha1.AuditResult, res *v1alpha1.RemediationResult) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var b v1alpha1.WebhookCircuitBreaker
		if err := c.Get(ctx, types.NamespacedName{Name: name}, &b); err != nil {
			return err
		}
		for i := range b.Status.History {
			w := &b.Status.History[i]
			if !w.OpenedAt.Equal(&openedAt) {
				continue
			}
			if w.Audit == nil {
				if auditResult == nil {
					return nil
				}
				w.Audit = auditResult.DeepCopy()
			}
			w.Audit.Remediation = res
			return c.Status().Update(ctx, &b)
		}
		return nil
	})
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("record the remediation in breaker %s's status: %w (needs get on webhookcircuitbreakers and update on webhookcircuitbreakers/status)", name, err)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("record the remediation in breaker %s's status: %w", name, err)
	}
	return nil
}

// summarize records the run's event on the breaker (not for a dry run).
func (r *Remediator) summarize(rep *Report) {
	if rep.DryRun || r.Recorder == nil || r.Breaker == nil {
		return
	}
	c := rep.Counts
	kind, reason := "Normal", "Remediated"
	if c[Failed]+c[Refused]+c[Marked] > 0 || rep.Stopped != "" {
		kind, reason = "Warning", "RemediationIncomplete"
	}
	note := fmt.Sprintf("after the window %s to %s: %d patched, %d rolled, %d labelled, %d marked (the webhook denies their update), %d listed, %d current, %d refused, %d failed",
		rep.Window.From.UTC().Format("2006-01-02T15:04:05Z"), rep.Window.To.UTC().Format("2006-01-02T15:04:05Z"),
		c[Remediated], c[Rolled], c[Labelled], c[Marked], c[Listed], c[Current], c[Refused], c[Failed])
	if rep.Stopped != "" {
		note += "; " + rep.Stopped
	}
	if len(note) > maxNote {
		note = note[:maxNote-3] + "..."
	}
	r.Recorder.Eventf(r.Breaker, nil, kind, reason, "Remediate", "%s", note)
}

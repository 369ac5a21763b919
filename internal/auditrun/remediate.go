package auditrun

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/remediate"
)

// RemediatedBy is status.history[].audit.remediation.by for the runner's own
// remediations.
const RemediatedBy = "controller"

// automaticEvictionTimeout bounds how long an automatic roll waits for one
// Pod's disruption budget; a Pod it gives up on is Refused, for
// `tripswitch remediate` to finish.
const automaticEvictionTimeout = 2 * time.Minute

// remediate repairs what the audit found, when the breaker's
// spec.audit.remediate asks for it: Reapply re-applies patches,
// ReapplyAndRoll also evicts controller-owned Pods. Objections are never
// acted on automatically. Its requests are held to spec.audit.qps, one
// remediation at a time (the runner's), one eviction at a time. A failure
// to remediate is recorded, not returned; only a status write error is.
func (a *Runner) remediate(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, spec *v1alpha1.ResolvedAudit, w v1alpha1.OpenWindow, done *audited) error {
	if done == nil || spec == nil || spec.Remediate == v1alpha1.RemediateNone || spec.Remediate == "" || done.report.Counts[audit.WouldMutate] == 0 {
		return nil
	}
	at := func() metav1.Time { return metav1.NewTime(a.Clock.Now().Truncate(time.Second)) }
	r, err := a.remediator(b, spec, done)
	var res *v1alpha1.RemediationResult
	if err == nil {
		var rep *remediate.Report
		rep, err = r.Run(ctx, done.report)
		if rep != nil {
			res = rep.Result(RemediatedBy, at())
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "remediation", "breaker", b.Name)
		if res == nil {
			res = &v1alpha1.RemediationResult{By: RemediatedBy, CompletedAt: at()}
		}
		res.Message = err.Error()
	}
	return remediate.RecordStatus(ctx, a.Client, b.Name, w.OpenedAt, nil, res)
}

func (a *Runner) remediator(b *v1alpha1.WebhookCircuitBreaker, spec *v1alpha1.ResolvedAudit, done *audited) (*remediate.Remediator, error) {
	cfg := rest.CopyConfig(a.Config)
	cfg.QPS, cfg.Burst = float32(spec.QPS), int(spec.QPS)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("remediation client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("remediation client: %w", err)
	}
	opts := a.Remediation
	if opts.EvictionTimeout <= 0 {
		// The runner audits one breaker at a time: a budget that allows
		// nothing must not hold up every other breaker's audit for long.
		opts.EvictionTimeout = automaticEvictionTimeout
	}
	opts.Apply, opts.Roll, opts.Label = true, spec.Remediate == v1alpha1.RemediateReapplyAndRoll, false
	r := &remediate.Remediator{Dynamic: dyn, Kube: kube, Auditor: done.auditor, Webhook: done.webhook, Breaker: b.DeepCopy(),
		FieldManager: "tripswitch", Options: opts, Now: a.Clock.Now, Check: a.stillThere(b)}
	if a.Recorder != nil {
		r.Recorder = a.Recorder
	}
	return r, nil
}

// stillThere stops a remediation once its breaker is deleted, recreated,
// or no longer asks for it.
func (a *Runner) stillThere(b *v1alpha1.WebhookCircuitBreaker) func(context.Context) error {
	return func(ctx context.Context) error {
		var now v1alpha1.WebhookCircuitBreaker
		err := a.Reader.Get(ctx, client.ObjectKeyFromObject(b), &now)
		switch {
		case apierrors.IsNotFound(err), err == nil && now.UID != b.UID:
			return fmt.Errorf("breaker %s was deleted", b.Name)
		case err != nil:
			return fmt.Errorf("breaker %s: %w", b.Name, err)
		case now.DeletionTimestamp != nil:
			return fmt.Errorf("breaker %s is being deleted", b.Name)
		}
		if r := now.Spec.Resolve().Audit; r == nil || r.Remediate == v1alpha1.RemediateNone {
			return fmt.Errorf("breaker %s no longer asks for remediation", b.Name)
		}
		return nil
	}
}

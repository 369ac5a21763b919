// Package auditrun runs the audits of breakers' closed windows: after a
// circuit closes, it finds what was admitted without the webhook
// (internal/audit), records the result in the breaker's status history and
// says so in an event; for a breaker with spec.audit.remediate it then
// repairs what it found (internal/remediate). It runs on the leader, one audit at a time, and
// reports each audit's counts through a callback.
package auditrun

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/remediate"
)

// Audit event reasons and the results in status.history[].audit.
const (
	ReasonAuditObjections = "AuditObjections"
	ReasonAuditClean      = "AuditClean"
	ReasonAuditFailed     = "AuditFailed"

	AuditCompleted = "Completed"
	AuditFailed    = "Failed"
)

// maxAuditRefs bounds status.history[].audit.objects (the CRD enforces it).
const maxAuditRefs = 10

// Runner audits the open windows of breakers with spec.audit enabled,
// one audit at a time, after each window closes. It runs on the leader.
type Runner struct {
	// Client writes the result into the breaker's status.
	Client client.Client
	// Reader reads breakers and webhook configurations uncached.
	Reader client.Reader
	// Config is the identity audits list with; each audit limits a copy of
	// it to the breaker's spec.audit.qps.
	Config *rest.Config
	// Reviewer sends the re-reviews.
	Reviewer audit.Reviewer
	// Requester is the user the re-reviews name: the one the controller
	// runs as.
	Requester string
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Done, if set, is told each completed audit's counts by verdict.
	Done func(breaker string, counts map[audit.Verdict]int)
	// Remediation holds the pacing of automatic remediations (evictions at
	// once, backoff, timeout); zero values are remediate's defaults. What
	// they may do comes from each breaker's spec.audit.remediate.
	Remediation remediate.Options

	once    sync.Once
	queue   chan string
	pending sync.Map // breaker name -> struct{}
}

func (a *Runner) init() {
	a.once.Do(func() { a.queue = make(chan string, 1024) })
}

// Request asks for the breaker's pending audits; it never blocks, and a
// breaker already waiting is not queued twice.
func (a *Runner) Request(breaker string) {
	a.init()
	if _, loaded := a.pending.LoadOrStore(breaker, struct{}{}); loaded {
		return
	}
	select {
	case a.queue <- breaker:
	default:
		a.pending.Delete(breaker) // full: the next reconcile asks again
	}
}

// NeedLeaderElection: only the leader audits.
func (a *Runner) NeedLeaderElection() bool { return true }

// Start audits requested breakers until ctx ends.
func (a *Runner) Start(ctx context.Context) error {
	a.init()
	for {
		select {
		case <-ctx.Done():
			return nil
		case name := <-a.queue:
			a.pending.Delete(name)
			if err := a.AuditPending(ctx, name); err != nil && ctx.Err() == nil {
				log.FromContext(ctx).Error(err, "audit", "breaker", name)
			}
		}
	}
}

// Due reports whether b has a closed window without an audit; spec is its
// resolved spec.audit (nil: the audit is off).
func Due(b *v1alpha1.WebhookCircuitBreaker, spec *v1alpha1.ResolvedAudit) bool {
	if spec == nil {
		return false
	}
	return b.Status.Unaudited() != nil
}

// AuditPending audits every closed window of the breaker that has no audit
// yet, oldest first, and records each result in its status.
func (a *Runner) AuditPending(ctx context.Context, name string) error {
	for {
		var b v1alpha1.WebhookCircuitBreaker
		if err := a.Reader.Get(ctx, types.NamespacedName{Name: name}, &b); err != nil {
			return client.IgnoreNotFound(err)
		}
		spec := b.Spec.Resolve().Audit
		if !Due(&b, spec) {
			return nil
		}
		w := *b.Status.Unaudited()
		result, report := a.run(ctx, &b, spec, w)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := a.record(ctx, name, w.OpenedAt, result); err != nil {
			return err
		}
		a.report(&b, w, result, report)
		if err := a.remediate(ctx, &b, spec, w, report); err != nil {
			return err
		}
	}
}

// run performs one audit; a failure is a result, not an error.
func (a *Runner) run(ctx context.Context, b *v1alpha1.WebhookCircuitBreaker, spec *v1alpha1.ResolvedAudit, w v1alpha1.OpenWindow) (*v1alpha1.AuditResult, *audited) {
	now := func() metav1.Time { return metav1.NewTime(a.Clock.Now().Truncate(time.Second)) }
	failed := func(format string, args ...any) (*v1alpha1.AuditResult, *audited) {
		return &v1alpha1.AuditResult{Result: AuditFailed, CompletedAt: now(), Message: "audit not possible: " + fmt.Sprintf(format, args...)}, nil
	}
	wh, err := circuit.Read(ctx, a.Reader, b.Spec.Target)
	if err != nil {
		return failed("%v", err)
	}
	auditor, err := audit.NewAuditor(a.Config, float32(spec.QPS), int(spec.QPS), a.Reviewer)
	if err != nil {
		return failed("%v", err)
	}
	auditor.MaxObjects = int(spec.MaxObjects)
	auditor.User = a.Requester
	to := w.OpenedAt.Time
	if w.ClosedAt != nil {
		to = w.ClosedAt.Time
	}
	report, err := auditor.Audit(ctx, wh, audit.Window{From: w.OpenedAt.Time, To: to})
	if err != nil {
		return failed("%v", err)
	}
	return ResultOf(report, auditor.Requests(), now()), &audited{report: report, auditor: auditor, webhook: wh}
}

// audited is a completed audit and what made it, for its remediation.
type audited struct {
	report  *audit.Report
	auditor *audit.Auditor
	webhook circuit.Webhook
}

// ResultOf summarises a report for the status.
func ResultOf(r *audit.Report, requests int64, at metav1.Time) *v1alpha1.AuditResult {
	res := &v1alpha1.AuditResult{
		Result: AuditCompleted, CompletedAt: at, Found: int32(r.Found), Truncated: r.Truncated, Requests: requests,
		Objected: int32(r.Counts[audit.Objected]), WouldMutate: int32(r.Counts[audit.WouldMutate]),
		NoObjection: int32(r.Counts[audit.NoObjection]), NotChecked: int32(r.Counts[audit.NotChecked]),
		NotReviewed: int32(r.Counts[audit.NotReviewed]), Message: strings.Join(r.Notes, "; "),
	}
	for _, f := range r.Findings {
		if f.Verdict == audit.NoObjection || len(res.Objects) == maxAuditRefs {
			continue
		}
		ref := f.Name
		if f.Namespace != "" {
			ref = f.Namespace + "/" + f.Name
		}
		res.Objects = append(res.Objects, fmt.Sprintf("%s %s %s", f.Verdict, f.Kind, ref))
	}
	return res
}

// record writes the result into the window that opened at openedAt. A
// breaker deleted meanwhile is the routine end of an audit, not an error.
func (a *Runner) record(ctx context.Context, name string, openedAt metav1.Time, result *v1alpha1.AuditResult) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var b v1alpha1.WebhookCircuitBreaker
		if err := a.Reader.Get(ctx, types.NamespacedName{Name: name}, &b); err != nil {
			return err
		}
		w := b.Status.Window(openedAt)
		if w == nil {
			return nil // the window left the history meanwhile
		}
		w.Audit = result
		return a.Client.Status().Update(ctx, &b)
	})
	return client.IgnoreNotFound(err)
}

func (a *Runner) report(b *v1alpha1.WebhookCircuitBreaker, w v1alpha1.OpenWindow, res *v1alpha1.AuditResult, done *audited) {
	if done != nil && a.Done != nil {
		a.Done(b.Name, done.report.Counts)
	}
	if a.Recorder == nil {
		return
	}
	span := fmt.Sprintf("%s to %s", w.OpenedAt.UTC().Format(time.RFC3339), w.ClosedAt.UTC().Format(time.RFC3339))
	switch {
	case res.Result == AuditFailed:
		a.Recorder.Eventf(b, nil, "Warning", ReasonAuditFailed, "Audit", "the objects admitted while the circuit was open (%s) could not be audited: %s", span, res.Message)
	case res.Objected+res.WouldMutate+res.NotChecked > 0:
		a.Recorder.Eventf(b, nil, "Warning", ReasonAuditObjections, "Audit",
			"%d objects were admitted without the webhook (%s): %d it objects to now, %d it would mutate, %d not checked; `tripswitch audit %s` lists them, `tripswitch remediate %s` repairs them",
			res.Found, span, res.Objected, res.WouldMutate, res.NotChecked, b.Name, b.Name)
	default:
		a.Recorder.Eventf(b, nil, "Normal", ReasonAuditClean, "Audit", "%d objects were admitted without the webhook (%s); it objects to none of them now (%d not reviewed)", res.Found, span, res.NotReviewed)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/auditrun"
	"github.com/tripswitch-dev/tripswitch/internal/remediate"
)

const remediateUsage = `Usage: tripswitch remediate BREAKER [--window N] [--apply] [--label] [-o table|json] [--kubeconfig PATH] [--job [--job-image REF] [--job-namespace NS]]

Repairs what a closed open window admitted without the webhook, from a fresh
audit of it (see tripswitch audit). A dry run unless --apply: every change is
still sent to the API server with dryRun=All, so the table shows what the API
server would accept. With --apply:
  WouldMutate, not a Pod: the webhook's patch is re-applied, conditional on the
    resourceVersion that was reviewed (an object changed since is re-reviewed,
    never overwritten);
  WouldMutate, a Pod of a ReplicaSet, StatefulSet, DaemonSet or Job: evicted
    through the Eviction API (PodDisruptionBudgets hold; a 429 waits), at most
    --max-evictions at a time and one per owner, so its owner recreates it
    through the webhook; a bare Pod is reported, never deleted;
  Objected: listed with the webhook's reason; --label labels it
    tripswitch.dev/admitted-without=<webhook>. Nothing is deleted;
  NotChecked, NotReviewed: reported, never acted on.
An object is repaired once per window: the patch also writes the annotation
tripswitch.dev/remediated, and a later run leaves an object that carries it
Current, even when the webhook would change it again (a webhook that is not
idempotent). A patch that changes nothing is no repair. When the webhook
denies the update itself (it reviews UPDATE too, as policy engines do), no
label and no patch can be written: the object is Marked instead, with an
AdmittedWithout event on it, in the window's audit record and in -o json.
Every change is dry-run before the first real one; the first authorization
error stops the run. Exit status 1 when it stopped or a change failed; a
refusal (a bare Pod, a budget that never allowed the eviction) or a mark is
reported, not an error. Events go on each object and the breaker, the counts
into the window's audit status. Needs what tripswitch audit needs, and patch
on the resources, create on pods/eviction, create on events.events.k8s.io,
update on webhookcircuitbreakers/status. --job prints the same run as a Job
whose ServiceAccount's ClusterRole allows exactly that, for the cluster,
where a Service-backed webhook resolves.
`

func runRemediate(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tripswitch remediate", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { fmt.Fprint(out, remediateUsage); fs.PrintDefaults() }
	kubeconfig := kubeconfigFlag(fs)
	output := fs.String("o", "table", "output format: table or json")
	window := fs.Int("window", 1, "which open window: 1 is the most recent, 2 the one before, ...")
	qps, maxObjects := auditBudgetFlags(fs)
	apply := fs.Bool("apply", false, "make the changes (default: a dry run)")
	roll := fs.Bool("roll", true, "evict controller-owned Pods the webhook would mutate")
	label := fs.Bool("label", false, "label objects a validating webhook objects to "+remediate.LabelKey+"=<webhook>")
	maxEvictions := fs.Int("max-evictions", 1, "Pods evicted at once (never two of one owner)")
	evictionTimeout := fs.Duration("eviction-timeout", 10*time.Minute, "how long one Pod's eviction waits for its disruption budget")
	job := remediateJobFlags(fs)
	name, err := parseNamed(fs, args, "remediate")
	if err != nil {
		return err
	}
	if err := checkAuditFlags(*output, *window, *qps, *maxObjects); err != nil {
		return err
	}
	if *maxEvictions < 1 || *evictionTimeout <= 0 {
		return fmt.Errorf("--max-evictions %d must be at least 1 and --eviction-timeout %v positive", *maxEvictions, *evictionTimeout)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if *job.print {
		return printRemediationJob(ctx, out, fs, *kubeconfig, name, *window, *qps, job, *apply, *roll, *label)
	}
	s, err := openWindow(ctx, *kubeconfig, name, *window, *qps, false)
	if err != nil {
		return err
	}
	if s.window.ClosedAt == nil {
		return fmt.Errorf("breaker %s: window %d is still open (since %s): remediate once the webhook has recovered and the circuit closed",
			name, *window, s.window.OpenedAt.UTC().Format(time.RFC3339))
	}
	s.auditor.MaxObjects = *maxObjects
	ar, err := s.audit(ctx)
	if err != nil {
		return err
	}
	r, events, err := newRemediator(s, *qps)
	if err != nil {
		return err
	}
	r.Options = remediate.Options{Apply: *apply, Roll: *roll, Label: *label, MaxEvictions: *maxEvictions, EvictionTimeout: *evictionTimeout}
	rep, runErr := r.Run(ctx, ar)
	if runErr != nil && !remediate.IsStop(runErr) {
		return fmt.Errorf("remediate breaker %s: %w", name, runErr)
	}
	var notes []string
	if *apply {
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		err := remediate.RecordStatus(ctx, s.client, name, s.window.OpenedAt, auditrun.ResultOf(ar, s.auditor.Requests(), now), rep.Result("tripswitch remediate", now))
		if err != nil {
			notes = append(notes, err.Error())
		}
		if err := events.Err(); err != nil {
			notes = append(notes, fmt.Sprintf("not every event could be written: %v", err))
		}
	}
	if err := printRemediation(out, *output, rep, ar.Notes, notes); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	if len(notes) > 0 {
		return errors.New(notes[0])
	}
	if n := rep.Counts[remediate.Failed]; n > 0 {
		return fmt.Errorf("breaker %s: the API server refused %d changes (their reasons are above)", name, n)
	}
	return nil
}

// newRemediator makes a remediator for the window with clients limited to
// qps, whose changes stop once the breaker is gone.
func newRemediator(s *windowAudit, qps float64) (*remediate.Remediator, *remediate.EventWriter, error) {
	cfg := rest.CopyConfig(s.cfg)
	cfg.QPS, cfg.Burst = float32(qps), max(int(qps), 1)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("remediation client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("remediation client: %w", err)
	}
	scheme, err := newScheme()
	if err != nil {
		return nil, nil, err
	}
	host, _ := os.Hostname()
	events := &remediate.EventWriter{Client: kube, Scheme: scheme, Controller: "tripswitch.dev/remediate", Instance: "tripswitch-remediate-" + host}
	b := s.breaker.DeepCopy()
	r := &remediate.Remediator{
		Dynamic: dyn, Kube: kube, Auditor: s.auditor, Webhook: s.webhook, Breaker: b, Recorder: events,
		Check: breakerStillThere(s.client, b),
	}
	return r, events, nil
}

// breakerStillThere is a check that the breaker was not deleted (or
// recreated) since the run began.
func breakerStillThere(c client.Client, b *v1alpha1.WebhookCircuitBreaker) func(context.Context) error {
	return func(ctx context.Context) error {
		var now v1alpha1.WebhookCircuitBreaker
		err := c.Get(ctx, client.ObjectKey{Name: b.Name}, &now)
		switch {
		case apierrors.IsNotFound(err), err == nil && now.UID != b.UID:
			return fmt.Errorf("breaker %s was deleted during the remediation", b.Name)
		case err == nil && now.DeletionTimestamp != nil:
			return fmt.Errorf("breaker %s is being deleted", b.Name)
		case err != nil:
			return fmt.Errorf("breaker %s: %w", b.Name, err)
		}
		return nil
	}
}

func printRemediation(out io.Writer, format string, rep *remediate.Report, auditNotes, notes []string) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	mode := "Applied"
	if rep.DryRun {
		mode = "Dry run (nothing changed; --apply to act)"
	}
	fmt.Fprintf(out, "%s: webhook %s, window %s to %s: %d objects to consider.\n", mode, rep.Webhook,
		rep.Window.From.UTC().Format(time.RFC3339), rep.Window.To.UTC().Format(time.RFC3339), len(rep.Items))
	for _, o := range []remediate.Outcome{remediate.WouldRemediate, remediate.WouldRoll, remediate.WouldLabel, remediate.WouldMark, remediate.Remediated, remediate.Rolled,
		remediate.Labelled, remediate.Marked, remediate.Listed, remediate.Current, remediate.Refused, remediate.Failed, remediate.NotDone} {
		if n := rep.Counts[o]; n > 0 {
			fmt.Fprintf(out, "  %s: %d\n", o, n)
		}
	}
	for _, n := range append(append(auditNotes, remediationNotes(rep)...), notes...) {
		fmt.Fprintf(out, "Note: %s\n", n)
	}
	if rep.Stopped != "" {
		fmt.Fprintf(out, "Stopped: %s\n", rep.Stopped)
	}
	if len(rep.Items) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTCOME\tACTION\tKIND\tOBJECT\tDETAIL")
	for _, it := range rep.Items {
		obj := it.Object()
		detail := it.Message
		switch {
		case it.Action == remediate.Roll && detail == "":
			detail = "owner " + it.Owner
		case it.Action == remediate.Reapply && detail == "":
			// The webhook's patch; the precondition and the repair's record
			// are in -o json's patch.
			patch, rv := it.Review()
			detail = "at resourceVersion " + rv + ": patch " + patch
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", it.Outcome, it.Action, it.Kind, obj, detail)
	}
	return tw.Flush()
}

// remediationNotes explain the outcomes that are no failure but need the
// operator: objects repaired already, objects marked.
func remediationNotes(rep *remediate.Report) []string {
	var repaired, marked int
	for _, it := range rep.Items {
		switch {
		case it.Repaired != nil:
			repaired++
		case it.Outcome == remediate.Marked || it.Outcome == remediate.WouldMark:
			marked++
		}
	}
	var notes []string
	if repaired > 0 {
		notes = append(notes, fmt.Sprintf("%d objects were repaired in this window already (annotation %s) and are not repaired again, though the webhook would still change them: it is not idempotent, or they changed since their repair",
			repaired, remediate.RepairedKey))
	}
	if marked > 0 {
		how := "--apply marks each"
		if !rep.DryRun {
			how = "Each is marked"
		}
		notes = append(notes, fmt.Sprintf("%d objects cannot be changed by tripswitch: the webhook reviews their updates too and denies them, so neither the label nor a re-applied patch can be written. %s where the webhook cannot block it: a Warning event AdmittedWithout on the object (kubectl get events -A --field-selector reason=AdmittedWithout), the window's audit record (status.history[].audit.remediation.markedObjects) and -o json. Fix, recreate or delete them yourself",
			marked, how))
	}
	return notes
}

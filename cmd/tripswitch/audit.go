package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/audit"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

const auditUsage = `Usage: tripswitch audit BREAKER [--window N] [-o table|json] [--kubeconfig PATH]

Lists every object the breaker's webhook would have reviewed that was created
or updated while its circuit was open (window N of status.history, 1 being the
most recent), and asks the recovered webhook about each with a dry-run
AdmissionReview: Objected (a validating webhook denies it now: fix or delete
it), WouldMutate (a mutating webhook would change it: re-apply it or roll the
workload), NoObjection, NotChecked (the re-review failed), NotReviewed (the
webhook has side effects). Read-only; needs get on the breaker and the webhook
configuration and list on the resources the webhook's rules cover. The
re-review calls the webhook from where this command runs: a service webhook is
reached at <service>.<namespace>.svc, so run it in the cluster or use
--no-review.
`

func runAudit(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tripswitch audit", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { fmt.Fprint(out, auditUsage); fs.PrintDefaults() }
	kubeconfig := kubeconfigFlag(fs)
	output := fs.String("o", "table", "output format: table or json")
	window := fs.Int("window", 1, "which open window: 1 is the most recent, 2 the one before, ...")
	qps, maxObjects := auditBudgetFlags(fs)
	noReview := fs.Bool("no-review", false, "list the objects without re-reviewing them")
	name, err := parseNamed(fs, args, "audit")
	if err != nil {
		return err
	}
	if err := checkAuditFlags(*output, *window, *qps, *maxObjects); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	s, err := openWindow(ctx, *kubeconfig, name, *window, *qps, *noReview)
	if err != nil {
		return err
	}
	s.auditor.MaxObjects = *maxObjects
	report, err := s.audit(ctx)
	if err != nil {
		return err
	}
	if *output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	return printAudit(out, report, s.window.ClosedAt == nil, s.auditor.Requests())
}

// parseNamed parses a command's flags around its one breaker name.
func parseNamed(fs *flag.FlagSet, args []string, cmd string) (string, error) {
	var name string
	rest := args
	for len(rest) > 0 {
		if err := fs.Parse(rest); err != nil {
			return "", err
		}
		if fs.NArg() == 0 {
			break
		}
		if name != "" {
			return "", fmt.Errorf("%s takes one breaker, got %q and %q", cmd, name, fs.Arg(0))
		}
		name, rest = fs.Arg(0), fs.Args()[1:]
	}
	if name == "" {
		fs.Usage()
		return "", fmt.Errorf("%s needs a breaker name", cmd)
	}
	return name, nil
}

// cliAuditMaxObjects is --max-objects' default: ten times spec.audit's
// (v1alpha1.DefaultAuditMaxObjects), since an operator who runs the audit
// after an outage wants the whole window, where the controller's
// unattended audit of every closed window keeps to the spec's bound.
const cliAuditMaxObjects = 10 * v1alpha1.DefaultAuditMaxObjects

// auditBudgetFlags defines the audit's budget on fs, for audit and
// remediate alike: --qps (spec.audit.qps's default) and --max-objects.
func auditBudgetFlags(fs *flag.FlagSet) (qps *float64, maxObjects *int) {
	qps = fs.Float64("qps", v1alpha1.DefaultAuditQPS, "most API requests per second (the default is spec.audit.qps's)")
	maxObjects = fs.Int("max-objects", cliAuditMaxObjects, fmt.Sprintf("stop after this many matching objects (ten times spec.audit.maxObjects' default of %d: "+
		"run by hand, this lists a whole window; the controller's own audits keep to the spec's bound)", v1alpha1.DefaultAuditMaxObjects))
	return qps, maxObjects
}

func checkAuditFlags(output string, window int, qps float64, maxObjects int) error {
	switch {
	case output != "table" && output != "json":
		return fmt.Errorf("-o %q: want table or json", output)
	case window < 1:
		return fmt.Errorf("--window %d: windows are numbered from 1 (the most recent)", window)
	case qps <= 0:
		return fmt.Errorf("--qps %v must be positive", qps)
	case maxObjects < 1:
		return fmt.Errorf("--max-objects %d must be at least 1", maxObjects)
	}
	return nil
}

// windowAudit is one open window of one breaker, ready to audit.
type windowAudit struct {
	cfg       *rest.Config
	client    client.Client
	breaker   v1alpha1.WebhookCircuitBreaker
	window    v1alpha1.OpenWindow
	webhook   circuit.Webhook
	requester string
	auditor   *audit.Auditor
}

// openWindow reads the breaker, its window number n (1 the most recent)
// and its webhook, and makes an auditor limited to qps.
func openWindow(ctx context.Context, kc kubeconfig, name string, n int, qps float64, noReview bool) (*windowAudit, error) {
	cfg, err := kc.restConfig()
	if err != nil {
		return nil, err
	}
	c, err := kc.client()
	if err != nil {
		return nil, err
	}
	s := &windowAudit{cfg: cfg, client: c}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &s.breaker); err != nil {
		return nil, fmt.Errorf("breaker %s: %w", name, err)
	}
	h := s.breaker.Status.History
	if len(h) < n {
		return nil, fmt.Errorf("breaker %s has %d open windows in its history; --window %d is not one of them", name, len(h), n)
	}
	s.window = h[len(h)-n]
	if s.webhook, err = circuit.Read(ctx, c, s.breaker.Spec.Target); err != nil {
		return nil, err
	}
	// The re-reviews name the operator running the command.
	if s.requester, err = username(ctx, cfg); err != nil {
		return nil, err
	}
	var reviewer audit.Reviewer
	if !noReview {
		reviewer = &probe.HTTPProber{Requester: s.requester}
	}
	if s.auditor, err = audit.NewAuditor(cfg, float32(qps), max(int(qps), 1), reviewer); err != nil {
		return nil, err
	}
	s.auditor.User = s.requester
	return s, nil
}

// audit audits the window (up to now if it is still open).
func (s *windowAudit) audit(ctx context.Context) (*audit.Report, error) {
	to := time.Now()
	if s.window.ClosedAt != nil {
		to = s.window.ClosedAt.Time
	}
	report, err := s.auditor.Audit(ctx, s.webhook, audit.Window{From: s.window.OpenedAt.Time, To: to})
	if err != nil {
		return nil, fmt.Errorf("audit of breaker %s: %w", s.breaker.Name, err)
	}
	return report, nil
}

func printAudit(out io.Writer, r *audit.Report, stillOpen bool, requests int64) error {
	open := ""
	if stillOpen {
		open = " (still open)"
	}
	fmt.Fprintf(out, "Webhook %s, window %s to %s%s: %d objects admitted without it (of %d listed in %s, %d API requests).\n",
		r.Webhook, r.Window.From.UTC().Format(time.RFC3339), r.Window.To.UTC().Format(time.RFC3339), open, r.Found, r.Scanned, strings.Join(r.Resources, ", "), requests)
	for _, v := range []audit.Verdict{audit.Objected, audit.WouldMutate, audit.NotChecked, audit.NotReviewed, audit.NoObjection} {
		if n := r.Counts[v]; n > 0 {
			fmt.Fprintf(out, "  %s: %d\n", v, n)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(out, "Note: %s\n", n)
	}
	if len(r.Findings) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERDICT\tOPERATION\tKIND\tOBJECT\tAT\tDETAIL")
	for _, f := range r.Findings {
		obj := f.Name
		if f.Namespace != "" {
			obj = f.Namespace + "/" + f.Name
		}
		detail := f.Message
		if f.Patch != "" {
			detail = "patch " + f.Patch
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Verdict, f.Operation, f.Kind, obj, f.At.UTC().Format(time.RFC3339), detail)
	}
	return tw.Flush()
}

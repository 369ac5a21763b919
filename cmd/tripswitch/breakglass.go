package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/breakglass"
	"github.com/tripswitch-dev/tripswitch/internal/circuit"
)

// The break-glass commands work without the controller, with the
// operator's own credentials: they read the records on the webhook
// configurations and restore with the controller's one-patch protocol.

const statusUsage = `Usage: tripswitch status [--kubeconfig PATH] [-o table|json]

Lists every circuit tripswitch holds open in the cluster, read from the record
annotations on the webhook configurations: configuration, webhook, action,
since when, the breaker, whether that breaker still exists, and any reason a
restore would be refused. Needs list on webhook configurations.
`

const restoreUsage = `Usage: tripswitch restore [--kubeconfig PATH] [--kind Mutating|Validating] CONFIGURATION/WEBHOOK...
       tripswitch restore [--kubeconfig PATH] --all

Restores a webhook's original policy from its record and removes the record, in
one patch conditional on what was read, as the controller would. Refuses when
the record is unreadable or someone changed what tripswitch set. Use it when
the controller opened a circuit and is not there to close it.
`

func runStatus(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tripswitch status", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { fmt.Fprint(out, statusUsage); fs.PrintDefaults() }
	kubeconfig := kubeconfigFlag(fs)
	output := fs.String("o", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("-o %s: must be table or json", *output)
	}
	c, err := kubeconfig.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	circuits, err := breakglass.List(ctx, c)
	if err != nil {
		return err
	}
	return printCircuits(out, *output, circuits, time.Now())
}

func printCircuits(out io.Writer, format string, circuits []breakglass.Circuit, now time.Time) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if circuits == nil {
			circuits = []breakglass.Circuit{}
		}
		return enc.Encode(circuits)
	}
	if len(circuits) == 0 {
		_, err := fmt.Fprintln(out, "No open circuits.")
		return err
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tCONFIGURATION/WEBHOOK\tACTION\tOPEN FOR\tBREAKER\tBREAKER EXISTS\tRESTORE")
	for _, c := range circuits {
		open, restore, exists := "-", "ok", "no"
		if !c.Since.IsZero() {
			open = now.Sub(c.Since).Round(time.Second).String()
		}
		if c.Problem != "" {
			restore = "refused: " + c.Problem
		}
		if c.BreakerExists {
			exists = "yes"
		}
		action := string(c.Action)
		if c.Trial != "" {
			action += fmt.Sprintf(" (trial: %s for %s)", c.Trial, now.Sub(c.TrialSince).Round(time.Second))
		}
		if c.Floor != "" {
			action += " (fallback " + c.Floor + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", strings.TrimSuffix(string(c.Kind), "WebhookConfiguration"), c.Ref(), action, open, c.Breaker, exists, restore)
	}
	return w.Flush()
}

func runRestore(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tripswitch restore", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { fmt.Fprint(out, restoreUsage); fs.PrintDefaults() }
	kubeconfig := kubeconfigFlag(fs)
	all := fs.Bool("all", false, "restore every open circuit tripswitch may restore")
	kindFlag := fs.String("kind", "", "Mutating or Validating, when both kinds have a configuration of that name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var kind v1alpha1.TargetKind
	if *kindFlag != "" {
		var err error
		if kind, err = circuit.KindOf(*kindFlag); err != nil {
			return fmt.Errorf("--kind: %w", err)
		}
	}
	if *all == (fs.NArg() > 0) {
		return errors.New("name circuits as CONFIGURATION/WEBHOOK, or pass --all (not both)")
	}
	c, err := kubeconfig.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	type job struct {
		kind            v1alpha1.TargetKind
		config, webhook string
	}
	var jobs []job
	if *all {
		circuits, err := breakglass.List(ctx, c)
		if err != nil {
			return err
		}
		for _, ci := range circuits {
			jobs = append(jobs, job{ci.Kind, ci.Configuration, ci.Webhook})
		}
		if len(jobs) == 0 {
			fmt.Fprintln(out, "No open circuits.")
		}
	}
	for _, a := range fs.Args() {
		config, webhook, ok := strings.Cut(a, "/")
		if !ok || config == "" || webhook == "" {
			return fmt.Errorf("%q: want CONFIGURATION/WEBHOOK", a)
		}
		jobs = append(jobs, job{kind, config, webhook})
	}
	failed := 0
	for _, j := range jobs {
		err := breakglass.Restore(ctx, c, j.kind, j.config, j.webhook)
		if errors.Is(err, breakglass.ErrNotRecorded) {
			fmt.Fprintln(out, err)
			continue
		}
		if err != nil {
			failed++
			fmt.Fprintln(out, "not restored:", err)
			continue
		}
		fmt.Fprintf(out, "restored %s/%s\n", j.config, j.webhook)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d circuits not restored", failed, len(jobs))
	}
	return nil
}

const standdownUsage = `Usage: tripswitch standdown [--kubeconfig PATH] --namespace NS [--deployment NAME] [--lease NAME] [--timeout D] [--force] [--by WHO]

Run before uninstalling (the Helm chart runs it as a pre-delete hook): scales
the controller's Deployment to 0, waits until no replica holds the leader
Lease, restores every breaker's circuit from its record, removes every
breaker's finalizer and then deletes the Lease, so deleting the controller,
its RBAC and the breakers together leaves no webhook failed open and nothing
stuck. Fails, naming the breaker, when a circuit cannot be restored; the
Lease then stays.

Without --deployment it stops the one Deployment in the namespace labelled
app.kubernetes.io/name=tripswitch,app.kubernetes.io/component=controller (a
Helm release names it RELEASE-tripswitch). When there is no such Deployment
it changes nothing and fails: a wrong --namespace would otherwise release the
breakers of a controller that runs elsewhere. --force goes on without one,
for when the controller is already gone; nothing overrides a leader that
still renews the Lease.
`

func runStanddown(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tripswitch standdown", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { fmt.Fprint(out, standdownUsage); fs.PrintDefaults() }
	kubeconfig := kubeconfigFlag(fs)
	namespace := fs.String("namespace", "", "the controller's namespace (required)")
	deployment := fs.String("deployment", "", "the controller's Deployment; default: the one labelled as tripswitch's controller in --namespace")
	lease := fs.String("lease", "tripswitch.dev", "the controller's leader-election Lease")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the leader to let go of the Lease")
	force := fs.Bool("force", false, "restore and release the breakers even when no controller Deployment is found (it is already gone)")
	by := fs.String("by", "tripswitch standdown", "who runs the stand-down, named in each restored breaker's status (the chart's pre-delete hook passes \"helm uninstall\")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *namespace == "" {
		return errors.New("--namespace is required: the namespace the controller runs in")
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout %v must be positive", *timeout)
	}
	c, err := kubeconfig.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout+5*time.Minute)
	defer cancel()
	return breakglass.StandDown{Client: c, Namespace: *namespace, Deployment: *deployment, Lease: *lease, Timeout: *timeout, Force: *force, By: *by, Log: out}.Run(ctx)
}

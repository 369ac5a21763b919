package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/tripswitch-dev/tripswitch/internal/check"
	"github.com/tripswitch-dev/tripswitch/internal/probe"
)

const checkUsage = `Usage: tripswitch check [--kubeconfig PATH] [--namespace NS] [--service-account SA] [--probe] [-o table|json] [BREAKER...]

Checks every WebhookCircuitBreaker (or those named) for what would keep it
from working: the target configuration and webhook exist; RBAC approves the
configuration for the controller's ServiceAccount; no other breaker names the
same webhook; the webhook does not already fail open the way the breaker would
open it; no other controller that writes the configuration undoes the open
(from managedFields and owner references: Kyverno, istiod, server-side
appliers; with the owner's own fail-open setting); the controller can probe it
(its last probe, from the breaker's status; with --probe, also one probe from
here); the permissions the spec's options need (apiServerSignal, audit,
probe.endpoints). Exits 1 when it finds a problem. Needs list on breakers and webhook configurations and create on
subjectaccessreviews.
`

// errProblems is returned when the check found problems.
var errProblems = errors.New("problems found")

func runCheck(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tripswitch check", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { fmt.Fprint(out, checkUsage); fs.PrintDefaults() }
	kubeconfig := kubeconfigFlag(fs)
	output := fs.String("o", "table", "output format: table or json")
	namespace := fs.String("namespace", "tripswitch-system", "namespace of the controller's ServiceAccount")
	sa := fs.String("service-account", "tripswitch", "name of the controller's ServiceAccount, whose permissions are checked")
	probeHere := fs.Bool("probe", false, "also probe each webhook once from this machine (its network is not necessarily the controller's)")
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := check.Options{Client: c, Namespace: *namespace, ServiceAccount: *sa, Breakers: fs.Args()}
	if *probeHere {
		cfg, err := kubeconfig.restConfig()
		if err != nil {
			return err
		}
		// Review probes name the requester; here that is the operator.
		user, err := username(ctx, cfg)
		if err != nil {
			return fmt.Errorf("--probe: learn who you are, which admission review probes name: %w", err)
		}
		opts.Prober = &probe.HTTPProber{Requester: user}
	}
	rep, err := check.Run(ctx, opts)
	if err != nil {
		return err
	}
	if err := printCheck(out, *output, rep); err != nil {
		return err
	}
	if rep.Problems > 0 {
		return fmt.Errorf("%d %w in %d breakers", rep.Problems, errProblems, len(rep.Breakers))
	}
	return nil
}

func printCheck(out io.Writer, format string, rep check.Report) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if len(rep.Breakers) == 0 {
		_, err := fmt.Fprintln(out, "No WebhookCircuitBreakers.")
		return err
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "BREAKER\tCHECK\tRESULT\tMESSAGE")
	for _, b := range rep.Breakers {
		for _, f := range b.Findings {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", b.Name, f.Check, f.Result, f.Message)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "\n%d breakers checked as %s: %d problems, %d warnings\n", len(rep.Breakers), rep.Controller, rep.Problems, rep.Warnings)
	return err
}

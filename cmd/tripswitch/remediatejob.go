package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/tripswitch-dev/tripswitch/internal/remediate"
)

// jobFlags are remediate's --job flags: print the run as a Job instead of
// running it here.
type jobFlags struct {
	print     *bool
	image     *string
	namespace *string
}

func remediateJobFlags(fs *flag.FlagSet) jobFlags {
	image := "ghcr.io/tripswitch-dev/tripswitch"
	if version != "" {
		image += ":" + version
	}
	return jobFlags{
		print:     fs.Bool("job", false, "print this run as a Job, with a ServiceAccount and a ClusterRole that allow exactly what it does, for kubectl apply -f - (a Service-backed webhook resolves only in the cluster); run nothing"),
		image:     fs.String("job-image", image, "with --job: the controller's image, which holds this command"),
		namespace: fs.String("job-namespace", "tripswitch-system", "with --job: the namespace of the Job and its ServiceAccount"),
	}
}

// printRemediationJob reads the breaker, its webhook and what the webhook's
// rules cover, and prints the Job that runs this command with the flags
// given, but --job's own and --kubeconfig.
func printRemediationJob(ctx context.Context, out io.Writer, fs *flag.FlagSet, kc kubeconfig, name string, window int, qps float64, jf jobFlags, apply, roll, label bool) error {
	s, err := openWindow(ctx, kc, name, window, qps, true)
	if err != nil {
		return err
	}
	resources, notes, err := s.auditor.Resources(s.webhook.Rules)
	if err != nil {
		return fmt.Errorf("breaker %s: %w", name, err)
	}
	var args []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "kubeconfig" && !strings.HasPrefix(f.Name, "job") {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	sel := s.webhook.NamespaceSelector
	j := remediate.Job{
		Breaker: name, Target: s.breaker.Spec.Target, Resources: resources,
		NamespaceSelector: sel != nil && len(sel.MatchLabels)+len(sel.MatchExpressions) > 0,
		Apply:             apply, Roll: roll, Label: label, Args: args, Image: *jf.image, Namespace: *jf.namespace,
	}
	manifest, err := j.Manifest()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "# tripswitch remediate %s %s, as a Job in %s (kubectl apply -f -; its log: kubectl -n %s logs job/%s).\n",
		name, strings.Join(args, " "), *jf.namespace, *jf.namespace, j.Name())
	for _, n := range notes {
		fmt.Fprintf(out, "# Note: %s\n", n)
	}
	_, err = out.Write(manifest)
	return err
}

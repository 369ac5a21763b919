package demo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Report writes the results table, over several creates
// per phase, and the circuit's timings.
func Report(w io.Writer, runs []Run) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "condition\tpolicy or action\tresult\tp50\tmax\t")
	for _, r := range runs {
		for _, p := range []Phase{PhaseHealthy, PhaseDelayed, PhaseOpen, PhaseRecovered} {
			lat, admitted := r.Latencies(p)
			if len(lat) == 0 {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", p, policyIn(r, p), result(admitted, len(lat)), ms(r.Median(p)), ms(lat[len(lat)-1]))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "action\tfault → open\trejected before open\tadmitted as it opened\trecovery → closed\topen p50 ÷ healthy p50\t")
	for _, r := range runs {
		lat, admitted := r.Latencies(PhaseDelayed)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%.1f×\t\n", r.Name(), ms(r.OpenedAt-r.FaultAt), len(lat)-admitted, admitted, ms(r.ClosedAt-r.RecoveredAt),
			float64(r.Median(PhaseOpen))/float64(max(r.Median(PhaseHealthy), time.Microsecond)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "run\tprobes unhealthy\tAPI server signal failing\tcircuit open\topened by\t")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", r.Name(), after(r.ProbesAt, r.FaultAt), after(r.SignalAt, r.FaultAt), ms(r.OpenedAt-r.FaultAt), openedBy(r.OpenedBy))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "(times after the fault, first seen while it lasted; -: never. The API server signal is on in the last run only, where four clients create at once.")
	fmt.Fprintln(w, "\"admitted as it opened\": delayed-phase creates still in flight when the circuit opened, which the API server admitted under the opened configuration)")
	fmt.Fprintln(w)
	for _, r := range runs {
		fmt.Fprintf(w, "%s: webhook as read back: healthy {%s}, open {%s}, restored {%s}\n", r.Name(), r.Webhook[PhaseHealthy], r.Webhook[PhaseOpen], r.Webhook[PhaseRecovered])
	}
	return nil
}

// after is t since the fault, or "-" when it never happened.
func after(t, fault time.Duration) string {
	if t == 0 {
		return "-"
	}
	return ms(t - fault)
}

// openedBy names the signal from the open record's reason.
func openedBy(reason string) string {
	switch {
	case strings.Contains(reason, "consecutive failed probes"):
		return "probes"
	case strings.Contains(reason, "API server"):
		return "API server signal"
	case reason == "":
		return "-"
	}
	return reason
}

func policyIn(r Run, p Phase) string {
	policy := "Fail"
	switch {
	case p == PhaseOpen && r.Action == v1alpha1.OpenActionBypass:
		policy = "Fail + Bypass"
	case p == PhaseOpen:
		policy = "Ignore"
	}
	if r.Signal {
		policy += " (API server signal on)"
	}
	return policy
}

func result(admitted, n int) string {
	switch admitted {
	case n:
		return fmt.Sprintf("%d/%d created", admitted, n)
	case 0:
		return fmt.Sprintf("%d/%d rejected", n, n)
	}
	return fmt.Sprintf("%d/%d created", admitted, n)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

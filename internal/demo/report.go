package demo

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Report writes the results table, like seed 000's but over several creates
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", p, policyIn(r.Action, p), result(admitted, len(lat)), ms(r.Median(p)), ms(lat[len(lat)-1]))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "action\tfault → open\trejected before open\trecovery → closed\topen p50 ÷ healthy p50\t")
	for _, r := range runs {
		_, admitted := r.Latencies(PhaseDelayed)
		lat, _ := r.Latencies(PhaseDelayed)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.1f×\t\n", r.Action, ms(r.OpenedAt-r.FaultAt), len(lat)-admitted, ms(r.ClosedAt-r.RecoveredAt),
			float64(r.Median(PhaseOpen))/float64(max(r.Median(PhaseHealthy), time.Microsecond)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, r := range runs {
		fmt.Fprintf(w, "%s: webhook as read back: healthy {%s}, open {%s}, restored {%s}\n", r.Action, r.Webhook[PhaseHealthy], r.Webhook[PhaseOpen], r.Webhook[PhaseRecovered])
	}
	return nil
}

func policyIn(action v1alpha1.OpenAction, p Phase) string {
	if p != PhaseOpen {
		return "Fail"
	}
	if action == v1alpha1.OpenActionBypass {
		return "Fail + Bypass"
	}
	return "Ignore"
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

package demo

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// Report writes the results as Markdown tables (they paste into an issue or
// docs/demo.md as they are): each phase's creates, the circuit's timings, and
// which signal saw the fault first; then the webhook as read back.
func Report(w io.Writer, runs []Run) error {
	phases := table{header: []string{"condition", "policy or action", "result", "p50", "max"}, right: []bool{false, false, false, true, true}}
	for _, r := range runs {
		for _, p := range []Phase{PhaseHealthy, PhaseDelayed, PhaseOpen, PhaseRecovered} {
			lat, admitted := r.Latencies(p)
			if len(lat) == 0 {
				continue
			}
			res := result(admitted, len(lat))
			if r.Mutates && admitted > 0 {
				res += fmt.Sprintf(", %d mutated", r.MutatedIn(p))
			}
			phases.add(string(p), policyIn(r, p), res, ms(r.Median(p)), ms(lat[len(lat)-1]))
		}
	}
	timings := table{header: []string{"action", "fault → open", "rejected before open", "admitted as it opened", "recovery → closed", "open p50 vs healthy p50"},
		right: []bool{false, true, true, true, true, false}}
	for _, r := range runs {
		lat, admitted := r.Latencies(PhaseDelayed)
		timings.add(r.Name(), ms(r.OpenedAt-r.FaultAt), fmt.Sprint(len(lat)-admitted), fmt.Sprint(admitted), ms(r.ClosedAt-r.RecoveredAt), versusHealthy(r))
	}
	signals := table{header: []string{"run", "probes unhealthy", "API server signal failing", "circuit open", "opened by"}, right: []bool{false, true, true, true, false}}
	for _, r := range runs {
		signals.add(r.Name(), after(r.ProbesAt, r.FaultAt), after(r.SignalAt, r.FaultAt), ms(r.OpenedAt-r.FaultAt), openedBy(r.OpenedBy))
	}
	for _, t := range []table{phases, timings, signals} {
		if err := t.write(w); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "Times are after the fault, first seen while it lasted; -: never. The API server signal is on in the last run only, where four clients create at once.")
	fmt.Fprintln(w, "\"Admitted as it opened\": delayed-phase creates still in flight when the circuit opened, which the API server admitted under the opened configuration.")
	fmt.Fprintln(w, "\"≈ healthy\": the open phase's p50 is no more than the healthy phase's spread (at least 2 ms) above its p50, so no ratio is meaningful.")
	fmt.Fprintln(w)
	for _, r := range runs {
		fmt.Fprintf(w, "%s: webhook as read back: healthy {%s}, open {%s}, restored {%s}\n", r.Name(), r.Webhook[PhaseHealthy], r.Webhook[PhaseOpen], r.Webhook[PhaseRecovered])
	}
	return nil
}

// versusHealthy compares the open phase's p50 with the healthy phase's: a
// ratio only when the open phase is slower by more than the healthy
// creates' own spread (at least 2 ms). Below that (Bypass: no webhook call
// at all, so often a little faster than healthy) a ratio such as 0.4× is
// the machine's noise, not the circuit's effect.
func versusHealthy(r Run) string {
	healthy, _ := r.Latencies(PhaseHealthy)
	open, _ := r.Latencies(PhaseOpen)
	if len(healthy) == 0 || len(open) == 0 {
		return "-"
	}
	h, o := r.Median(PhaseHealthy), r.Median(PhaseOpen)
	noise := max(healthy[len(healthy)-1]-healthy[0], 2*time.Millisecond)
	if o <= h+noise {
		return fmt.Sprintf("≈ healthy (%s vs %s)", ms(o), ms(h))
	}
	return fmt.Sprintf("%.0f× (%s vs %s)", float64(o)/float64(max(h, time.Microsecond)), ms(o), ms(h))
}

// table is a Markdown table, its columns padded so that it reads as a
// table in a terminal too.
type table struct {
	header []string
	right  []bool // right-aligned columns
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t table) write(w io.Writer) error {
	width := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(cells []string) string {
		var b strings.Builder
		for i, c := range cells {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if t.right[i] {
				c = pad + c
			} else {
				c += pad
			}
			b.WriteString("| " + c + " ")
		}
		return b.String() + "|\n"
	}
	sep := make([]string, len(t.header))
	for i := range sep {
		sep[i] = strings.Repeat("-", max(width[i], 3))
		if t.right[i] {
			sep[i] = sep[i][1:] + ":"
		}
	}
	out := line(t.header) + line(sep)
	for _, r := range t.rows {
		out += line(r)
	}
	_, err := io.WriteString(w, out)
	return err
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

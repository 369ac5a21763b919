package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
)

// syntheticRun is a run: healthy creates at healthy each, open ones at open.
func syntheticRun(action v1alpha1.OpenAction, healthy, open []time.Duration) Run {
	r := Run{Action: action, FaultAt: 2 * time.Second, OpenedAt: 3 * time.Second, RecoveredAt: 6 * time.Second, ClosedAt: 8 * time.Second}
	for i, l := range healthy {
		r.Samples = append(r.Samples, Sample{Phase: PhaseHealthy, At: time.Duration(i) * 10 * time.Millisecond, Latency: l, Admitted: true})
	}
	for i, l := range open {
		r.Samples = append(r.Samples, Sample{Phase: PhaseOpen, At: 4*time.Second + time.Duration(i)*10*time.Millisecond, Latency: l, Admitted: true})
	}
	return r
}

func millis(v ...float64) []time.Duration {
	var out []time.Duration
	for _, f := range v {
		out = append(out, time.Duration(f*float64(time.Millisecond)))
	}
	return out
}

// TestReportIsMarkdownWithoutNoiseRatios: every table is Markdown (a
// header, a delimiter row, rows of as many cells), and a Bypass open phase
// a few milliseconds faster than healthy is "≈ healthy", not a 0.4× ratio,
// while Ignore's one-second wait is a ratio.
func TestReportIsMarkdownWithoutNoiseRatios(t *testing.T) {
	runs := []Run{
		syntheticRun(v1alpha1.OpenActionIgnore, millis(6, 7, 8), millis(1004, 1006, 1010)),
		syntheticRun(v1alpha1.OpenActionBypass, millis(6, 7.5, 9), millis(2.5, 3, 4)),
	}
	var buf bytes.Buffer
	if err := Report(&buf, runs); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Logf("\n%s", out)
	tables := 0
	for _, block := range strings.Split(out, "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		if !strings.HasPrefix(lines[0], "| ") {
			continue
		}
		tables++
		cells := strings.Count(lines[0], "|")
		if len(lines) < 3 || strings.Trim(lines[1], "|-: ") != "" || !strings.Contains(lines[1], "---") {
			t.Errorf("table without a Markdown delimiter row:\n%s", block)
		}
		for _, l := range lines {
			if !strings.HasPrefix(l, "| ") || !strings.HasSuffix(l, " |") || strings.Count(l, "|") != cells {
				t.Errorf("not a row of %d cells: %q", cells-1, l)
			}
		}
	}
	if tables != 3 {
		t.Errorf("%d Markdown tables, want 3:\n%s", tables, out)
	}
	if strings.Contains(out, "0.4×") || !strings.Contains(out, "≈ healthy (3.0 ms vs 7.5 ms)") {
		t.Errorf("Bypass's open phase: want ≈ healthy, not a ratio:\n%s", out)
	}
	if !strings.Contains(out, "144× (1006.0 ms vs 7.0 ms)") {
		t.Errorf("Ignore's open phase: want its ratio:\n%s", out)
	}
}

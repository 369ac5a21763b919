package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// row is one run's line in the table: the slow phase unless named
// otherwise.
type row struct {
	Name string
	// DepPeak is the most calls in flight at the dependency during the slow
	// phase, and DepPeakSettled the same from Settle after the slowdown on.
	DepPeak, DepPeakSettled int64
	// P50, P99 are the callers' latencies (every answer: served, rejected,
	// timed out); RejectedP99 only the rejected callers'.
	P50, P99, RejectedP99 time.Duration
	// Goodput is calls served per second; HealthyGoodput in the healthy
	// phase.
	Goodput, HealthyGoodput float64
	Rejected, TimedOut      int
	// Recover is how long after the latency returned the callers were
	// served as before: the end of the first second with no rejection and
	// at least 90 % of the healthy phase's goodput. -1: not within the run.
	Recover time.Duration
	// LimitBefore is the limit at the slowdown, LimitSlow its median from
	// Settle on (-1: no limit), and LimitBack how long after the latency
	// returned it was back to LimitBefore (-1: not within the run).
	LimitBefore, LimitSlow int
	LimitBack              time.Duration
}

func summarize(sc scenario, r result) row {
	slowStart, slowEnd := sc.Healthy, sc.Healthy+sc.SlowFor
	w := row{Name: r.name, LimitBefore: -1, LimitSlow: -1, LimitBack: -1, Recover: -1}
	var lat, rej []time.Duration
	served := 0
	for _, c := range r.calls {
		end := c.start + c.took
		if c.outcome == ok && end >= slowStart && end < slowEnd {
			served++
		}
		if c.start < slowStart || c.start >= slowEnd {
			continue
		}
		lat = append(lat, c.took)
		switch c.outcome {
		case rejected:
			w.Rejected++
			rej = append(rej, c.took)
		case timedOut:
			w.TimedOut++
		}
	}
	w.Goodput = float64(served) / sc.SlowFor.Seconds()
	w.P50, w.P99 = quantile(lat, 0.5), quantile(lat, 0.99)
	w.RejectedP99 = quantile(rej, 0.99)
	healthy := 0
	for _, c := range r.calls {
		if end := c.start + c.took; c.outcome == ok && end >= sc.Healthy/2 && end < sc.Healthy {
			healthy++ // the healthy phase's second half: past the callers' ramp
		}
	}
	w.HealthyGoodput = float64(healthy) / (sc.Healthy / 2).Seconds()

	var limits []int
	for _, s := range r.samples {
		if s.at >= slowStart && s.at < slowEnd {
			w.DepPeak = max(w.DepPeak, s.depPeak)
			if s.at >= slowStart+sc.Settle {
				w.DepPeakSettled = max(w.DepPeakSettled, s.depPeak)
				if s.limit >= 0 {
					limits = append(limits, s.limit)
				}
			}
		}
		if s.at < slowStart && s.limit >= 0 {
			w.LimitBefore = s.limit
		}
		if s.at >= slowEnd && w.LimitBack < 0 && w.LimitBefore >= 0 && s.limit >= w.LimitBefore {
			w.LimitBack = s.at - slowEnd
		}
	}
	if len(limits) > 0 {
		slices.Sort(limits)
		w.LimitSlow = limits[len(limits)/2]
	}
	w.Recover = recovery(sc, r, w.HealthyGoodput)
	return w
}

// recovery finds the first second after the slow phase with no rejection
// and at least 90 % of the healthy goodput.
func recovery(sc scenario, r result, healthy float64) time.Duration {
	from := sc.Healthy + sc.SlowFor
	for sec := time.Duration(0); from+sec+time.Second <= sc.Healthy+sc.SlowFor+sc.Recovered; sec += 100 * time.Millisecond {
		lo, hi := from+sec, from+sec+time.Second
		served, refused := 0, 0
		for _, c := range r.calls {
			end := c.start + c.took
			if end < lo || end >= hi {
				continue
			}
			switch c.outcome {
			case ok:
				served++
			case rejected:
				refused++
			}
		}
		if refused == 0 && float64(served) >= 0.9*healthy {
			return sec + time.Second
		}
	}
	return -1
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

func printTable(out io.Writer, sc scenario, rows []row) {
	fmt.Fprintf(out, "| run | in flight at the dependency, max (after %v) | caller p50 | caller p99 | rejected callers p99 | goodput /s | rejections | timeouts | limit before → while slow | served as before after | limit back after |\n", sc.Settle)
	fmt.Fprintln(out, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, w := range rows {
		lim, back := "—", "—"
		if w.LimitSlow >= 0 {
			lim, back = fmt.Sprintf("%d → %d", w.LimitBefore, w.LimitSlow), secs(w.LimitBack)
		}
		fmt.Fprintf(out, "| %s | %d (%d) | %s | %s | %s | %.1f | %d | %d | %s | %s | %s |\n", w.Name, w.DepPeak, w.DepPeakSettled,
			ms(w.P50), ms(w.P99), ms(w.RejectedP99), w.Goodput, w.Rejected, w.TimedOut, lim, secs(w.Recover), back)
	}
}

func ms(d time.Duration) string {
	switch {
	case d == 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < 10*time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func secs(d time.Duration) string {
	if d < 0 {
		return "not in the run"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

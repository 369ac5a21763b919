package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/tripswitch-dev/tripswitch/api/v1alpha1"
	"github.com/tripswitch-dev/tripswitch/internal/demo"
)

// signalRun looks like the demo's third run: seven quick healthy creates
// within 70 ms, the delayed phase's creates four at a time (so rejections
// pile up at one x and one latency), admitted ones while open, quick ones
// while the circuit waits to close, and a closed phase.
func signalRun() demo.Run {
	r := demo.Run{Action: v1alpha1.OpenActionIgnore, Signal: true, FaultAt: 500 * time.Millisecond, OpenedAt: 2 * time.Second,
		RecoveredAt: 8500 * time.Millisecond, ClosedAt: 14 * time.Second}
	add := func(p demo.Phase, at, lat time.Duration, admitted bool) {
		r.Samples = append(r.Samples, demo.Sample{Phase: p, At: at, Latency: lat, Admitted: admitted})
	}
	for i := range 7 {
		add(demo.PhaseHealthy, time.Duration(i)*10*time.Millisecond, 6*time.Millisecond, true)
	}
	for wave := range 2 {
		for range 4 {
			add(demo.PhaseDelayed, 500*time.Millisecond+time.Duration(wave)*time.Second, time.Second+3*time.Millisecond, false)
		}
	}
	for i := range 7 {
		add(demo.PhaseOpen, 2*time.Second+time.Duration(i)*time.Second, time.Second, true)
	}
	for i := range 20 {
		add(demo.PhaseRecovering, 8600*time.Millisecond+time.Duration(i)*250*time.Millisecond, 8*time.Millisecond, true)
	}
	for i := range 7 {
		add(demo.PhaseRecovered, 14*time.Second+time.Duration(i)*10*time.Millisecond, 6*time.Millisecond, true)
	}
	return r
}

// TestGroupCountsMarksThatCoincide: the eight rejections of two waves of
// four concurrent creates are two marks of four, not two marks that look
// like two creates; points apart in time stay apart.
func TestGroupCountsMarksThatCoincide(t *testing.T) {
	var rejected, apart plotter.XYs
	for _, s := range signalRun().Samples {
		pt := plotter.XY{X: s.At.Seconds(), Y: float64(s.Latency.Milliseconds())}
		switch {
		case !s.Admitted:
			rejected = append(rejected, pt)
		case s.Phase == demo.PhaseOpen:
			apart = append(apart, pt)
		}
	}
	at, counts := group(rejected, 14.0/150, 1200.0/40)
	if len(at) != 2 || fmt.Sprint(counts) != "[4 4]" {
		t.Errorf("8 rejections in two waves of 4: marks %v counts %v, want two marks of 4", at, counts)
	}
	if at, counts := group(apart, 14.0/150, 1200.0/40); len(at) != 7 || fmt.Sprint(counts) != "[1 1 1 1 1 1 1]" {
		t.Errorf("7 creates a second apart: marks %v counts %v", at, counts)
	}
}

// TestSecondTicks: a 14-second run is marked at every second, each labelled
// (the old default ticker labelled 2, 8 and 14 only).
func TestSecondTicks(t *testing.T) {
	var labels []string
	for _, tk := range (secondTicks{}).Ticks(0, 14.3) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if fmt.Sprint(labels) != "[0 1 2 3 4 5 6 7 8 9 10 11 12 13 14]" {
		t.Errorf("labelled ticks %v", labels)
	}
	var long []string
	for _, tk := range (secondTicks{}).Ticks(0, 60) {
		if tk.Label != "" {
			long = append(long, tk.Label)
		}
	}
	if len(long) > 21 || len(long) < 6 {
		t.Errorf("a minute: %d labelled ticks %v", len(long), long)
	}
}

// TestWriteTimeline draws the picture of a run (set TIMELINE_OUT to keep it).
func TestWriteTimeline(t *testing.T) {
	dir := os.Getenv("TIMELINE_OUT")
	if dir == "" {
		dir = t.TempDir()
	}
	paths, err := WriteTimeline(dir, []demo.Run{signalRun(), signalRun()})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if fi, err := os.Stat(p); err != nil || fi.Size() < 10_000 {
			t.Errorf("%s: %v", p, err)
		}
	}
	if filepath.Base(paths[1]) != "timeline.png" {
		t.Errorf("paths %v", paths)
	}
}

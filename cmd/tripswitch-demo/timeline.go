package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/tripswitch-dev/tripswitch/internal/demo"
)

var (
	admittedColor   = color.RGBA{R: 0x1b, G: 0x9e, B: 0x3e, A: 0xff}
	recoveringColor = color.RGBA{R: 0x1f, G: 0x5f, B: 0xbf, A: 0xff}
	rejectedColor   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	// Three bands that never overlap, so every shade on the picture is in
	// the legend.
	faultClosedBand = color.NRGBA{R: 0x80, G: 0x80, B: 0x80, A: 0x40}
	faultOpenBand   = color.NRGBA{R: 0xff, G: 0x90, B: 0x10, A: 0x70}
	healedOpenBand  = color.NRGBA{R: 0xff, G: 0xd0, B: 0x80, A: 0x50}
)

// WriteTimeline draws every create's latency over time, admitted and rejected
// apart, with the fault and the open circuit as shaded bands; one panel per
// run, stacked. It writes timeline.svg and timeline.png into dir and returns
// their paths.
func WriteTimeline(dir string, runs []demo.Run) ([]string, error) {
	var plots [][]*plot.Plot
	for _, r := range runs {
		p, err := runPlot(r)
		if err != nil {
			return nil, err
		}
		plots = append(plots, []*plot.Plot{p})
	}
	w, h := 24*vg.Centimeter, vg.Length(len(runs))*9*vg.Centimeter
	var paths []string
	for _, c := range []struct {
		name   string
		canvas interface {
			vg.CanvasWriterTo
		}
	}{
		{"timeline.svg", vgsvg.New(w, h)},
		{"timeline.png", vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))}},
	} {
		dc := draw.New(c.canvas)
		tiles := draw.Tiles{Rows: len(runs), Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter, PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
		canvases := plot.Align(plots, tiles, dc)
		for i := range plots {
			plots[i][0].Draw(canvases[i][0])
		}
		path := filepath.Join(dir, c.name)
		if err := writeCanvas(path, c.canvas); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func writeCanvas(path string, c vg.CanvasWriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func runPlot(r demo.Run) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("openAction: %s (webhook timeoutSeconds 1, injected delay 2s)", r.Name())
	p.X.Label.Text = "seconds since the run started"
	p.Y.Label.Text = "ConfigMap create latency (ms)"
	p.Add(plotter.NewGrid())

	var ok, recovering, rejected plotter.XYs
	top := 0.0
	for _, s := range r.Samples {
		pt := plotter.XY{X: s.At.Seconds(), Y: float64(s.Latency.Microseconds()) / 1000}
		top = max(top, pt.Y)
		switch {
		case !s.Admitted:
			rejected = append(rejected, pt)
		case s.Phase == demo.PhaseRecovering:
			recovering = append(recovering, pt)
		default:
			ok = append(ok, pt)
		}
	}
	// Headroom above the data for the legend, so it never covers a point.
	top *= 1.6
	for _, b := range []struct {
		from, to float64
		c        color.Color
		name     string
	}{
		{r.FaultAt.Seconds(), r.OpenedAt.Seconds(), faultClosedBand, "webhook delayed, circuit closed"},
		{r.OpenedAt.Seconds(), r.RecoveredAt.Seconds(), faultOpenBand, "webhook delayed, circuit open"},
		{r.RecoveredAt.Seconds(), r.ClosedAt.Seconds(), healedOpenBand, "webhook healthy, circuit still open"},
	} {
		if b.to <= b.from {
			continue
		}
		poly, err := plotter.NewPolygon(plotter.XYs{{X: b.from, Y: 0}, {X: b.to, Y: 0}, {X: b.to, Y: top}, {X: b.from, Y: top}})
		if err != nil {
			return nil, err
		}
		poly.Color, poly.LineStyle.Width = b.c, 0
		p.Add(poly)
		p.Legend.Add(b.name, poly)
	}
	for _, set := range []struct {
		xys   plotter.XYs
		c     color.Color
		shape draw.GlyphDrawer
		name  string
	}{
		{ok, admittedColor, draw.CircleGlyph{}, "create admitted"},
		{recovering, recoveringColor, draw.TriangleGlyph{}, "create admitted while waiting for the circuit to close"},
		{rejected, rejectedColor, draw.CrossGlyph{}, "create rejected"},
	} {
		if len(set.xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(set.xys)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: set.c, Radius: vg.Points(4), Shape: set.shape}
		p.Add(sc)
		p.Legend.Add(set.name, sc)
	}
	p.Legend.Top = true
	p.Legend.Left = false
	p.Y.Min, p.Y.Max = 0, top
	return p, nil
}

package main

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

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
	circuitColor    = color.RGBA{R: 0xb3, G: 0x50, B: 0x00, A: 0xff}
	// Three bands that never overlap, so every shade on the picture is in
	// the legend.
	faultClosedBand = color.NRGBA{R: 0x80, G: 0x80, B: 0x80, A: 0x40}
	faultOpenBand   = color.NRGBA{R: 0xff, G: 0x90, B: 0x10, A: 0x70}
	healedOpenBand  = color.NRGBA{R: 0xff, G: 0xd0, B: 0x80, A: 0x50}
)

// legendWidth is the strip right of each panel that holds its legend, so
// that the legend never covers the data.
const legendWidth = 10 * vg.Centimeter

// panel is one run's plot and the legend drawn beside it.
type panel struct {
	plot   *plot.Plot
	legend plot.Legend
}

// WriteTimeline draws every create's latency over time, admitted and rejected
// apart, with the fault and the open circuit as shaded bands, the fault and
// the recovery as dashed lines, and creates that would be drawn on top of one
// another as one mark with their count; one panel per run, stacked, each with
// its legend beside it. It writes timeline.svg and timeline.png into dir and
// returns their paths.
func WriteTimeline(dir string, runs []demo.Run) ([]string, error) {
	var panels []panel
	var plots [][]*plot.Plot
	for _, r := range runs {
		pn, err := runPlot(r)
		if err != nil {
			return nil, err
		}
		panels = append(panels, pn)
		plots = append(plots, []*plot.Plot{pn.plot})
	}
	w, h := 24*vg.Centimeter+legendWidth, vg.Length(len(runs))*9*vg.Centimeter
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
		canvases := plot.Align(plots, tiles, draw.Crop(dc, 0, -legendWidth, 0, 0))
		for i := range plots {
			pc := canvases[i][0]
			plots[i][0].Draw(pc)
			lc := pc
			lc.Min.X, lc.Max.X = pc.Max.X+4*vg.Millimeter, dc.Max.X-2*vg.Millimeter
			lc.Max.Y -= 8 * vg.Millimeter // below the panel's title
			panels[i].legend.Draw(lc)
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

func runPlot(r demo.Run) (panel, error) {
	p := plot.New()
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	p.Title.Text = fmt.Sprintf("openAction: %s (webhook timeoutSeconds 1, injected delay 2s)", r.Name())
	p.X.Label.Text = "seconds since the run started (×N: N creates at the same time and latency, one mark)"
	p.Y.Label.Text = "ConfigMap create latency (ms)"
	p.X.Tick.Marker = secondTicks{}
	p.Add(plotter.NewGrid())

	var ok, recovering, rejected plotter.XYs
	top, end := 0.0, r.ClosedAt.Seconds()
	for _, s := range r.Samples {
		pt := plotter.XY{X: s.At.Seconds(), Y: float64(s.Latency.Microseconds()) / 1000}
		top, end = max(top, pt.Y), max(end, pt.X)
		switch {
		case !s.Admitted:
			rejected = append(rejected, pt)
		case s.Phase == demo.PhaseRecovering:
			recovering = append(recovering, pt)
		default:
			ok = append(ok, pt)
		}
	}
	top *= 1.2 // room for the counts and the marks' names
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
			return panel{}, err
		}
		poly.Color, poly.LineStyle.Width = b.c, 0
		p.Add(poly)
		legend.Add(b.name, poly)
	}
	if err := addMarks(p, &legend, r, top); err != nil {
		return panel{}, err
	}
	// Marks closer than this share one glyph and say how many they are.
	dx, dy := end/150, top/40
	var counts []plot.Plotter
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
		at, n := group(set.xys, dx, dy)
		sc, err := plotter.NewScatter(at)
		if err != nil {
			return panel{}, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: set.c, Radius: vg.Points(4), Shape: set.shape}
		p.Add(sc)
		legend.Add(set.name, sc)
		var lxy plotter.XYs
		var ltext []string
		for i, k := range n {
			if k > 1 {
				lxy, ltext = append(lxy, at[i]), append(ltext, fmt.Sprintf("×%d", k))
			}
		}
		if len(lxy) > 0 {
			labels, err := plotter.NewLabels(plotter.XYLabels{XYs: lxy, Labels: ltext})
			if err != nil {
				return panel{}, err
			}
			// Above the mark, where no other mark of its phase is.
			labels.Offset = vg.Point{X: vg.Points(3), Y: vg.Points(7)}
			for i := range labels.TextStyle {
				labels.TextStyle[i].Color = set.c
			}
			counts = append(counts, labels)
		}
	}
	for _, c := range counts { // last, so that no mark covers a count
		p.Add(c)
	}
	p.X.Min, p.X.Max = 0, end*1.05
	p.Y.Min, p.Y.Max = 0, top
	return panel{plot: p, legend: legend}, nil
}

// addMarks draws the fault and the recovery as dashed vertical lines, and
// where the circuit opened and closed (as the configuration read back
// showed it) as solid ones, each named at its top.
func addMarks(p *plot.Plot, legend *plot.Legend, r demo.Run, top float64) error {
	var at plotter.XYs
	var names []string
	dashed := draw.LineStyle{Color: color.Black, Width: vg.Points(1.2), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}
	solid := draw.LineStyle{Color: circuitColor, Width: vg.Points(1.6)}
	named := map[string]bool{}
	for _, m := range []struct {
		x      float64
		name   string
		style  draw.LineStyle
		legend string
	}{
		{r.FaultAt.Seconds(), "fault", dashed, "fault injected, webhook healed (dashed)"},
		{r.OpenedAt.Seconds(), "opened", solid, "circuit opened, closed (solid)"},
		{r.RecoveredAt.Seconds(), "healed", dashed, "fault injected, webhook healed (dashed)"},
		{r.ClosedAt.Seconds(), "closed", solid, "circuit opened, closed (solid)"},
	} {
		if m.x <= 0 {
			continue
		}
		line, err := plotter.NewLine(plotter.XYs{{X: m.x, Y: 0}, {X: m.x, Y: top}})
		if err != nil {
			return err
		}
		line.LineStyle = m.style
		p.Add(line)
		if !named[m.legend] {
			named[m.legend] = true
			legend.Add(m.legend, line)
		}
		at, names = append(at, plotter.XY{X: m.x, Y: top}), append(names, m.name)
	}
	if len(at) == 0 {
		return nil
	}
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: at, Labels: names})
	if err != nil {
		return err
	}
	labels.Offset = vg.Point{X: vg.Points(3), Y: -vg.Points(11)}
	p.Add(labels)
	return nil
}

// group merges points closer than dx and dy to the first of them into one
// mark, in time order, and returns the marks and how many points each is.
func group(xys plotter.XYs, dx, dy float64) (plotter.XYs, []int) {
	pts := slices.Clone(xys)
	slices.SortStableFunc(pts, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
	var at plotter.XYs
	var counts []int
	for _, pt := range pts {
		i := slices.IndexFunc(at, func(m plotter.XY) bool { return math.Abs(pt.X-m.X) <= dx && math.Abs(pt.Y-m.Y) <= dy })
		if i < 0 {
			at, counts = append(at, pt), append(counts, 1)
			continue
		}
		counts[i]++
	}
	return at, counts
}

// secondTicks marks every second on a short run, every 2, 5 or 10 on longer
// ones, each labelled, with unlabelled minor ticks between.
type secondTicks struct{}

// Ticks implements plot.Ticker.
func (secondTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 30, 60} {
		step = s
		if (hi-lo)/s <= 20 {
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		if v+step/2 <= hi {
			ticks = append(ticks, plot.Tick{Value: v + step/2})
		}
	}
	return ticks
}

package scale

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"strconv"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The pictures' colours, one per thing shown, the same in every picture.
var (
	colourAgents      = color.RGBA{0x1f, 0x77, 0xb4, 0xff} // blue
	colourKured       = color.RGBA{0xff, 0x7f, 0x0e, 0xff} // orange
	colourCoordinator = color.RGBA{0x2c, 0xa0, 0x2c, 0xff} // green
	colourWaiting     = color.RGBA{0x99, 0x99, 0x99, 0xff} // grey
	colourDraining    = color.RGBA{0x1f, 0x77, 0xb4, 0xff} // blue
	colourHolding     = color.RGBA{0x2c, 0xa0, 0x2c, 0xff} // green
	colourLimit       = color.RGBA{0xd6, 0x27, 0x28, 0xff} // red
	shades            = []color.Color{color.RGBA{0xf0, 0xf0, 0xf0, 0xff}, color.RGBA{0xe0, 0xe0, 0xe0, 0xff}}
)

// band is a named stretch of the x axis (a phase), shaded.
type band struct {
	name     string
	from, to float64
}

// rateSeries is one line of the requests picture: requests per second.
type rateSeries struct {
	name   string
	colour color.Color
	perSec []float64
}

// requestsPlot is the requests per second over the whole run, with the
// phases shaded and named above the lines.
func requestsPlot(title string, series []rateSeries, bands []band) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds since the joint start"
	p.Y.Label.Text = "requests per second"
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	ymax := 1.0
	for _, s := range series {
		for _, v := range s.perSec {
			ymax = math.Max(ymax, v)
		}
	}
	// The phases' names just above the lines, the legend above them; the
	// names after every band, so no band covers its neighbour's name.
	top := ymax * 1.5
	for i, b := range bands {
		poly, err := plotter.NewPolygon(plotter.XYs{{X: b.from, Y: 0}, {X: b.to, Y: 0}, {X: b.to, Y: top}, {X: b.from, Y: top}})
		if err != nil {
			return nil, err
		}
		poly.Color = shades[i%len(shades)]
		poly.LineStyle.Width = 0
		p.Add(poly)
	}
	for i, b := range bands {
		// Names alternate between two heights so neighbours do not
		// overlap.
		y := ymax * (1.05 + 0.1*float64(i%2))
		labels, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: b.from, Y: y}}, Labels: []string{b.name}})
		if err != nil {
			return nil, err
		}
		for j := range labels.TextStyle {
			labels.TextStyle[j].Font.Size = vg.Points(8)
		}
		labels.Offset = vg.Point{X: vg.Points(2)}
		p.Add(labels)
	}
	for _, s := range series {
		xys := make(plotter.XYs, len(s.perSec))
		for i, v := range s.perSec {
			xys[i] = plotter.XY{X: float64(i), Y: v}
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Color = s.colour
		l.Width = vg.Points(1)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	p.Y.Min, p.Y.Max = 0, top
	p.Y.Tick.Marker = upTo{ymax}
	p.Add(plotter.NewGrid())
	return p, nil
}

// drainingPlot is one limit's rolling maintenance: nodes waiting, draining
// and holding a drain slot over time, and the limit.
func drainingPlot(run string, r rollResult, pool int) (*plot.Plot, error) {
	p := plot.New()
	mean := "n/a"
	if !math.IsNaN(r.meanDraining) {
		mean = fmt.Sprintf("%.1f", r.meanDraining)
	}
	p.Title.Text = fmt.Sprintf("%s, limit %d: %.1f s for %d nodes; %s draining on average while %d or more waited", run, r.limit, r.total.Seconds(), pool, mean, r.limit)
	p.X.Label.Text = "seconds since the requests"
	p.Y.Label.Text = "nodes"
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	for _, s := range []struct {
		name   string
		levels []level
		colour color.Color
		width  vg.Length
	}{
		{"waiting (asked, not yet draining)", r.levels.waiting, colourWaiting, vg.Points(1.5)},
		{"holding a drain slot", r.levels.holding, colourHolding, vg.Points(1)},
		{"draining (status Running)", r.levels.draining, colourDraining, vg.Points(1.5)},
	} {
		l, err := plotter.NewLine(stepXYs(s.levels))
		if err != nil {
			return nil, err
		}
		l.StepStyle = plotter.PostStep
		l.Color = s.colour
		l.Width = s.width
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	limit, err := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(r.limit)}, {X: r.levels.end, Y: float64(r.limit)}})
	if err != nil {
		return nil, err
	}
	limit.Color = colourLimit
	limit.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(limit)
	p.Legend.Add(fmt.Sprintf("limit (slots.limit %d)", r.limit), limit)
	// Room above the lines for the legend, without ticks past the pool.
	p.Y.Min, p.Y.Max = 0, float64(pool)*1.5
	p.Y.Tick.Marker = upTo{float64(pool)}
	p.X.Min = 0
	p.Add(plotter.NewGrid())
	return p, nil
}

// upTo is the default ticks up to max.
type upTo struct{ max float64 }

func (u upTo) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, t := range (plot.DefaultTicks{}).Ticks(min, u.max) {
		if t.Value <= u.max {
			if t.Label != "" {
				t.Label = strconv.FormatFloat(t.Value, 'f', -1, 64)
			}
			out = append(out, t)
		}
	}
	return out
}

func stepXYs(levels []level) plotter.XYs {
	xys := make(plotter.XYs, len(levels))
	for i, l := range levels {
		xys[i] = plotter.XY{X: l.at, Y: float64(l.n)}
	}
	return xys
}

// writePNG draws plots one above the other, with aligned axes, as a PNG of
// the given width and height per plot.
func writePNG(w io.Writer, plots []*plot.Plot, width, height vg.Length) error {
	img := vgimg.New(width, height*vg.Length(len(plots)))
	dc := draw.New(img)
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadX: vg.Millimeter, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(rows, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[i][0])
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

func savePNG(path string, plots []*plot.Plot, width, height vg.Length) error {
	var buf bytes.Buffer
	if err := writePNG(&buf, plots, width, height); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// TestPicturesRender draws both pictures from made-up figures: the
// benchmark's pictures come from this code, at the end of a long run.
func TestPicturesRender(t *testing.T) {
	req, err := requestsPlot("requests", []rateSeries{
		{name: "agents", colour: colourAgents, perSec: []float64{0, 5, 3, 1}},
		{name: "coordinator", colour: colourCoordinator, perSec: []float64{1, 1, 2, 1}},
	}, []band{{name: "start", from: 0, to: 2}, {name: "idle", from: 2, to: 3}})
	if err != nil {
		t.Fatal(err)
	}
	r := rollResult{limit: 2, meanDraining: 1.5, levels: roundLevels{
		waiting:  []level{{0, 0}, {0.1, 4}, {1, 2}, {2, 0}},
		draining: []level{{0, 0}, {0.5, 2}, {2, 0}},
		holding:  []level{{0, 0}, {0.4, 2}, {2.1, 0}},
		end:      2.1,
	}}
	dr, err := drainingPlot("fast drains", r, 4)
	if err != nil {
		t.Fatal(err)
	}
	r.meanDraining = math.NaN()
	dr2, err := drainingPlot("fast drains", r, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		plots []*plot.Plot
	}{{"requests", []*plot.Plot{req}}, {"draining", []*plot.Plot{dr, dr2}}} {
		var buf bytes.Buffer
		if err := writePNG(&buf, c.plots, 6*vg.Inch, 2*vg.Inch); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		img, err := png.Decode(&buf)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got, want := img.Bounds().Size(), (image.Point{X: int(math.Round(6 * vg.Inch.Dots(vgimg.DefaultDPI))), Y: int(math.Round(2 * float64(len(c.plots)) * vg.Inch.Dots(vgimg.DefaultDPI)))}); got != want {
			t.Errorf("%s: size %v, want %v", c.name, got, want)
		}
		if !hasColour(img, colourLimit) && c.name == "draining" {
			t.Errorf("%s: the limit's line is not drawn", c.name)
		}
		if !hasColour(img, colourAgents) {
			t.Errorf("%s: no line in the first series' colour", c.name)
		}
	}
}

// hasColour reports whether any pixel of img is close to c (lines are
// anti-aliased).
func hasColour(img image.Image, c color.RGBA) bool {
	near := func(a uint32, b uint8) bool { return math.Abs(float64(a>>8)-float64(b)) <= 24 }
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if near(r, c.R) && near(g, c.G) && near(b, c.B) {
				return true
			}
		}
	}
	return false
}

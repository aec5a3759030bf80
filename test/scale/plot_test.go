package scale

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"testing"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// series is one line of a chart: y values at x (seconds).
type series struct {
	name string
	x, y []float64
	// step draws the line as steps (a count that holds until it changes).
	step bool
}

// band shades an x range of a chart and names it (a phase).
type band struct {
	name     string
	from, to float64
}

type chart struct {
	title, xLabel, yLabel string
	series                []series
	bands                 []band
}

var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff},
}

const (
	chartW, chartH         = 1000, 420
	marginL, marginR       = 70, 20
	marginT, marginB       = 40, 50
	plotW                  = chartW - marginL - marginR
	plotH                  = chartH - marginT - marginB
	legendLine, legendStep = 10, 16
)

// render draws the chart as a PNG: axes with ticks, shaded and named
// bands, one coloured line per series and a legend. It needs no font file:
// golang.org/x/image's basicfont is compiled in.
func (c chart) render() ([]byte, error) {
	img := image.NewRGBA(image.Rect(0, 0, chartW, chartH))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	var xmax, ymax float64
	for _, s := range c.series {
		if len(s.x) != len(s.y) {
			return nil, fmt.Errorf("series %q: %d x values, %d y values", s.name, len(s.x), len(s.y))
		}
		for i := range s.x {
			xmax = math.Max(xmax, s.x[i])
			ymax = math.Max(ymax, s.y[i])
		}
	}
	for _, b := range c.bands {
		xmax = math.Max(xmax, b.to)
	}
	if xmax <= 0 {
		xmax = 1
	}
	ymax = niceCeil(ymax)
	px := func(x float64) int { return marginL + int(x/xmax*float64(plotW)) }
	py := func(y float64) int { return marginT + plotH - int(y/ymax*float64(plotH)) }

	shade := []color.RGBA{{0xf2, 0xf2, 0xf2, 0xff}, {0xe6, 0xe6, 0xe6, 0xff}}
	for i, b := range c.bands {
		r := image.Rect(px(b.from), marginT, px(b.to), marginT+plotH)
		draw.Draw(img, r, &image.Uniform{shade[i%2]}, image.Point{}, draw.Src)
		text(img, px(b.from)+3, marginT+12+12*(i%2), b.name, color.Black)
	}
	black := color.RGBA{0, 0, 0, 0xff}
	line(img, marginL, marginT+plotH, marginL+plotW, marginT+plotH, black)
	line(img, marginL, marginT, marginL, marginT+plotH, black)
	for i := 0; i <= 5; i++ {
		y := ymax * float64(i) / 5
		line(img, marginL-4, py(y), marginL, py(y), black)
		text(img, 5, py(y)+4, trimFloat(y), black)
		x := xmax * float64(i) / 5
		line(img, px(x), marginT+plotH, px(x), marginT+plotH+4, black)
		text(img, px(x)-10, marginT+plotH+18, trimFloat(x), black)
	}
	text(img, marginL, 20, c.title, black)
	text(img, marginL+plotW/2-40, chartH-10, c.xLabel, black)
	text(img, 5, marginT-8, c.yLabel, black)
	for i, s := range c.series {
		col := palette[i%len(palette)]
		for j := 1; j < len(s.x); j++ {
			if s.step {
				line(img, px(s.x[j-1]), py(s.y[j-1]), px(s.x[j]), py(s.y[j-1]), col)
				line(img, px(s.x[j]), py(s.y[j-1]), px(s.x[j]), py(s.y[j]), col)
			} else {
				line(img, px(s.x[j-1]), py(s.y[j-1]), px(s.x[j]), py(s.y[j]), col)
			}
		}
		ly := marginT + 10 + legendStep*i
		lx := marginL + plotW - 220
		for k := 0; k < 3; k++ {
			line(img, lx, ly-4+k, lx+legendLine*2, ly-4+k, col)
		}
		text(img, lx+legendLine*2+6, ly, s.name, black)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (c chart) write(path string) error {
	data, err := c.render()
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func text(img draw.Image, x, y int, s string, col color.Color) {
	d := font.Drawer{Dst: img, Src: &image.Uniform{col}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// line draws with Bresenham's algorithm.
func line(img *image.RGBA, x0, y0, x1, y1 int, col color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		img.Set(x0, y0, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// TestChartRenders draws a chart and checks where its line went: the
// benchmark's pictures come from this code.
func TestChartRenders(t *testing.T) {
	c := chart{title: "t", xLabel: "s", yLabel: "n",
		series: []series{{name: "a", x: []float64{0, 10}, y: []float64{0, 10}}},
		bands:  []band{{name: "p", from: 0, to: 5}}}
	data, err := c.render()
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds().Size(); got != (image.Point{chartW, chartH}) {
		t.Fatalf("size %v", got)
	}
	// The line from (0,0) to (10,10) ends at the plot's top right corner.
	end := img.At(marginL+plotW, marginT)
	if r, g, b, _ := end.RGBA(); r>>8 != uint32(palette[0].R) || g>>8 != uint32(palette[0].G) || b>>8 != uint32(palette[0].B) {
		t.Errorf("top right corner is %v, want the first series' colour", end)
	}
	// The band is shaded, away from the line and the text.
	if r, _, _, _ := img.At(marginL+10, marginT+plotH-40).RGBA(); r>>8 != 0xf2 {
		t.Errorf("band not shaded: red %#x", r>>8)
	}
	if _, err := (chart{series: []series{{x: []float64{1}, y: nil}}}).render(); err == nil {
		t.Error("a series with fewer y than x values rendered")
	}
}

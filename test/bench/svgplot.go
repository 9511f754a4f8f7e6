package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// A small line chart drawn as SVG by hand, for the memory soak's plot: no
// dependencies, no fonts or scripts fetched from anywhere.

// chartSeries is one line of a chart.
type chartSeries struct {
	Name  string
	Color string // an SVG colour
	Dash  string // stroke-dasharray; "" for a solid line
	X, Y  []float64
}

// chartHLine is a horizontal reference line, such as a limit.
type chartHLine struct {
	Y     float64
	Label string
	Color string
}

// chartBand is a shaded span of x, such as a phase of the run.
type chartBand struct {
	X0, X1 float64
	Label  string
}

// lineChart is a line chart with axes, ticks, a legend on the right,
// reference lines and shaded bands.
type lineChart struct {
	Title, Subtitle string
	XLabel, YLabel  string
	Width, Height   int // pixels; 0 for 1000 × 560
	Series          []chartSeries
	HLines          []chartHLine
	Bands           []chartBand
}

// Chart layout, in pixels.
const (
	chartMarginLeft   = 72
	chartMarginTop    = 44 // plus chartLineHeight for every line of the subtitle
	chartMarginBottom = 56
	chartLegendWidth  = 250
	chartLineHeight   = 15
)

// chartHLineDash is the dash pattern of reference lines.
const chartHLineDash = "1 3"

// niceStep returns a "round" tick step (1, 2 or 5 × 10^n) giving about n
// ticks over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 || n < 1 {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// fmtTick formats a tick value with no more decimals than step needs.
func fmtTick(v, step float64) string {
	dec := 0
	if step < 1 {
		dec = int(math.Ceil(-math.Log10(step)))
	}
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// xmlText escapes s for SVG text and attribute values.
func xmlText(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s)) // writes to a buffer: cannot fail
	return b.String()
}

// WriteSVG draws the chart. The y axis starts at 0; both axes end at a
// tick above the largest value.
func (c lineChart) WriteSVG(w io.Writer) error {
	width, height := c.Width, c.Height
	if width == 0 {
		width = 1000
	}
	if height == 0 {
		height = 560
	}
	var subtitle []string
	if c.Subtitle != "" {
		subtitle = strings.Split(c.Subtitle, "\n")
	}
	top := chartMarginTop + chartLineHeight*len(subtitle)
	plotW := float64(width - chartMarginLeft - chartLegendWidth)
	plotH := float64(height - top - chartMarginBottom)
	if plotW < 50 || plotH < 50 {
		return fmt.Errorf("chart of %d × %d pixels is too small", width, height)
	}

	var xMax, yMax float64
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		for i := range s.X {
			if math.IsNaN(s.X[i]) || math.IsNaN(s.Y[i]) || math.IsInf(s.X[i], 0) || math.IsInf(s.Y[i], 0) {
				return fmt.Errorf("series %q has a value that is not a number", s.Name)
			}
			xMax, yMax = max(xMax, s.X[i]), max(yMax, s.Y[i])
		}
	}
	for _, h := range c.HLines {
		yMax = max(yMax, h.Y)
	}
	for _, b := range c.Bands {
		xMax = max(xMax, b.X1)
	}
	xStep, yStep := niceStep(xMax, 10), niceStep(yMax, 8)
	xTop := math.Max(xStep, math.Ceil(xMax/xStep-1e-9)*xStep)
	yTop := math.Max(yStep, math.Ceil(yMax*1.05/yStep-1e-9)*yStep)
	px := func(x float64) float64 { return chartMarginLeft + x/xTop*plotW }
	py := func(y float64) float64 { return float64(top) + plotH - y/yTop*plotH }

	var b strings.Builder
	f := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	f(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	f(`<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", width, height)
	f(`<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", chartMarginLeft, xmlText(c.Title))
	for i, line := range subtitle {
		f(`<text x="%d" y="%d" font-size="11" fill="#555">%s</text>`+"\n", chartMarginLeft, 44+chartLineHeight*i, xmlText(line))
	}
	// Bands behind everything else.
	for i, band := range c.Bands {
		fill := "#f0f0f0"
		if i%2 == 1 {
			fill = "#e4e9f2"
		}
		f(`<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="%s"/>`+"\n", px(band.X0), top, px(band.X1)-px(band.X0), plotH, fill)
		f(`<text x="%.1f" y="%d" font-size="11" fill="#666" text-anchor="middle">%s</text>`+"\n", (px(band.X0)+px(band.X1))/2, top+14, xmlText(band.Label))
	}
	// Grid and ticks.
	f(`<g stroke="#ddd" stroke-width="1">` + "\n")
	for y := 0.0; y <= yTop+yStep/2; y += yStep {
		f(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", chartMarginLeft, py(y), px(xTop), py(y))
	}
	for x := 0.0; x <= xTop+xStep/2; x += xStep {
		f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f"/>`+"\n", px(x), top, px(x), py(0))
	}
	f("</g>\n")
	f(`<g font-size="11" fill="#333">` + "\n")
	for y := 0.0; y <= yTop+yStep/2; y += yStep {
		f(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", chartMarginLeft-6, py(y)+4, fmtTick(y, yStep))
	}
	for x := 0.0; x <= xTop+xStep/2; x += xStep {
		f(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(x), py(0)+16, fmtTick(x, xStep))
	}
	f("</g>\n")
	// Axes and their labels.
	f(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", chartMarginLeft, py(0), px(xTop), py(0))
	f(`<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", chartMarginLeft, top, chartMarginLeft, py(0))
	f(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", chartMarginLeft+plotW/2, height-12, xmlText(c.XLabel))
	f(`<text x="16" y="%.1f" text-anchor="middle" transform="rotate(-90 16 %.1f)">%s</text>`+"\n", float64(top)+plotH/2, float64(top)+plotH/2, xmlText(c.YLabel))
	// Reference lines, labelled in the legend.
	for _, h := range c.HLines {
		f(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2" stroke-dasharray="%s"><title>%s</title></line>`+"\n",
			chartMarginLeft, py(h.Y), px(xTop), py(h.Y), h.Color, chartHLineDash, xmlText(h.Label))
	}
	// The series.
	for _, s := range c.Series {
		if len(s.X) == 0 {
			continue
		}
		var pts []string
		for i := range s.X {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[i]), py(s.Y[i])))
		}
		dash := ""
		if s.Dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.Dash)
		}
		f(`<polyline fill="none" stroke="%s" stroke-width="1.8"%s points="%s"><title>%s</title></polyline>`+"\n", s.Color, dash, strings.Join(pts, " "), xmlText(s.Name))
	}
	// The legend.
	lx := float64(width-chartLegendWidth) + 16
	f(`<g font-size="11">` + "\n")
	type entry struct{ name, color, dash string }
	var entries []entry
	for _, s := range c.Series {
		entries = append(entries, entry{s.Name, s.Color, s.Dash})
	}
	for _, h := range c.HLines {
		entries = append(entries, entry{h.Label, h.Color, chartHLineDash})
	}
	for i, e := range entries {
		y := float64(top) + 8 + float64(i)*18
		dash := ""
		if e.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, e.dash)
		}
		f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx, y, lx+30, y, e.color, dash)
		f(`<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+38, y+4, xmlText(e.name))
	}
	f("</g>\n</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

// svgElements parses svg with encoding/xml and counts its elements by
// name; it fails the test if the document is not well-formed XML.
func svgElements(t *testing.T, svg []byte) (map[string]int, []string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	counts := map[string]int{}
	var texts []string
	depth, inText := 0, false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 && (tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Errorf("root element %v, want svg in the SVG namespace", tok.Name)
			}
			depth++
			counts[tok.Name.Local]++
			inText = tok.Name.Local == "text"
		case xml.EndElement:
			depth--
			inText = false
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		}
	}
	if depth != 0 {
		t.Errorf("unbalanced elements: depth %d at the end", depth)
	}
	return counts, texts
}

func TestLineChartWellFormed(t *testing.T) {
	c := lineChart{
		Title:    `Memory <soak> & "friends"`,
		Subtitle: "3 members; 'quoted'",
		XLabel:   "minutes", YLabel: "MiB",
		Series: []chartSeries{
			{Name: "bench-0 anon RSS", Color: "#1f77b4", X: []float64{0, 1, 2}, Y: []float64{10, 20, 15}},
			{Name: "bench-0 file <RSS>", Color: "#1f77b4", Dash: "7 4", X: []float64{0, 1, 2}, Y: []float64{5, 6, 7}},
			{Name: "empty", Color: "#000"},
		},
		HLines: []chartHLine{{Y: 30, Label: "limit & more", Color: "#888"}},
		Bands:  []chartBand{{X0: 0, X1: 0.5, Label: "fill"}, {X0: 0.5, X1: 0.8, Label: "ramp"}},
	}
	var buf bytes.Buffer
	if err := c.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	counts, texts := svgElements(t, buf.Bytes())
	if counts["polyline"] != 2 {
		t.Errorf("%d polylines, want 2 (the empty series draws none)", counts["polyline"])
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{`Memory <soak> & "friends"`, "minutes", "MiB", "bench-0 file <RSS>", "limit & more", "fill", "ramp", "empty"} {
		if !strings.Contains(all, want) {
			t.Errorf("the SVG's text lacks %q", want)
		}
	}
}

func TestLineChartErrors(t *testing.T) {
	for name, c := range map[string]lineChart{
		"mismatched": {Series: []chartSeries{{Name: "x", X: []float64{1, 2}, Y: []float64{1}}}},
		"NaN":        {Series: []chartSeries{{Name: "x", X: []float64{1}, Y: []float64{math.NaN()}}}},
		"too small":  {Width: 100, Height: 100},
	} {
		if err := c.WriteSVG(io.Discard); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// No data at all still draws axes.
	var buf bytes.Buffer
	if err := (lineChart{Title: "empty"}).WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	svgElements(t, buf.Bytes())
}

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct {
		span float64
		n    int
		want float64
	}{
		{100, 10, 10},
		{95, 8, 20},
		{3, 10, 0.5},
		{0.5, 10, 0.05},
		{0, 10, 1},
		{1234, 8, 200},
	} {
		if got := niceStep(tc.span, tc.n); math.Abs(got-tc.want) > 1e-9*tc.want {
			t.Errorf("niceStep(%v, %d) = %v, want %v", tc.span, tc.n, got, tc.want)
		}
	}
	if got := fmtTick(0.15, 0.05); got != "0.15" {
		t.Errorf("fmtTick = %q", got)
	}
	if got := fmtTick(20, 5); got != "20" {
		t.Errorf("fmtTick = %q", got)
	}
}

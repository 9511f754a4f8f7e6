package main

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Row is one line of the result table. Cells are free text; empty cells
// are printed as "–". Rows with the same What are printed next to each
// other so that targets measured by the same experiment sit side by side.
type Row struct {
	What   string // the measurement, e.g. "put, 1 writer, 256 B values"
	Target string // the target's Name()
	P50    string // median latency, if the row has one
	P99    string // 99th percentile latency, if the row has one
	Value  string // a throughput ("812 commits/s") or a time ("median 1.52 s, max 2.31 s")
	Note   string // anything else: sample count, errors, the individual trials

	// The figures of a latency row, for the plot.
	p50  time.Duration
	rate float64
}

// tableHeader is the column titles of the result table, in Row's field
// order.
var tableHeader = []string{"what", "target", "p50", "p99", "throughput or time", "note"}

// Table collects rows from all targets and prints them as Markdown.
// Experiments, and targets' own extra measurements, append rows with Add in
// any order; WriteMarkdown groups them by What.
type Table struct {
	rows []Row
}

// Add appends rows to the table.
func (t *Table) Add(rows ...Row) {
	t.rows = append(t.rows, rows...)
}

// Len returns the number of rows added so far.
func (t *Table) Len() int { return len(t.rows) }

// grouped returns the rows ordered by the first appearance of their What;
// rows with the same What keep the order in which they were added.
func (t *Table) grouped() []Row {
	var order []string
	groups := make(map[string][]Row)
	for _, r := range t.rows {
		if _, ok := groups[r.What]; !ok {
			order = append(order, r.What)
		}
		groups[r.What] = append(groups[r.What], r)
	}
	out := make([]Row, 0, len(t.rows))
	for _, what := range order {
		out = append(out, groups[what]...)
	}
	return out
}

// WriteMarkdown writes the table as a GitHub-flavoured Markdown table with
// padded columns, so that it is readable both as text and rendered.
func (t *Table) WriteMarkdown(w io.Writer) error {
	cells := [][]string{tableHeader}
	for _, r := range t.grouped() {
		cells = append(cells, []string{
			mdCell(r.What), mdCell(r.Target), mdCell(r.P50),
			mdCell(r.P99), mdCell(r.Value), mdCell(r.Note),
		})
	}
	widths := make([]int, len(tableHeader))
	for _, line := range cells {
		for i, c := range line {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	writeLine := func(line []string) {
		b.WriteString("|")
		for i, c := range line {
			b.WriteString(" ")
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)))
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	writeLine(cells[0])
	b.WriteString("|")
	for _, wd := range widths {
		b.WriteString(strings.Repeat("-", wd+2))
		b.WriteString("|")
	}
	b.WriteString("\n")
	for _, line := range cells[1:] {
		writeLine(line)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// mdCell makes s safe for a Markdown table cell: pipes are escaped,
// newlines become spaces and an empty cell becomes "–".
func mdCell(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "–"
	}
	s = strings.ReplaceAll(s, "\r\n", " ")
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

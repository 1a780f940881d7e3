package report

import (
	"fmt"
	"html/template"
	"io"
	"strings"

	"collbench/internal/words"
	"collbench/results"
)

// HTMLInput is what an HTML report shows: runs (the first is "current"),
// an optional baseline overlaid on the plots, and an optional comparison.
type HTMLInput struct {
	Title      string
	Runs       []Series
	Baseline   *Series
	Comparison *Comparison
}

type htmlSection struct {
	Collective string
	Plots      []template.HTML
	Tables     []htmlTable
}

type htmlTable struct {
	Label string
	Head  []string
	Rows  [][]string
}

type htmlRun struct {
	Label  string
	Header []string
}

var htmlTmpl = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font-family:sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:90%}
th,td{border:1px solid #ccc;padding:2px 8px;text-align:right}
th{background:#f0f0f0}
.regressed,.missing{background:#fdd}.improved{background:#dfd}
.verdict{font-size:120%;font-weight:bold}.fail{color:#b00}.pass{color:#070}
pre{background:#f8f8f8;padding:.5em}
</style></head><body>
<h1>{{.Title}}</h1>
{{range .Runs}}<h2>Run: {{.Label}}</h2><pre>{{range .Header}}{{.}}
{{end}}</pre>{{end}}
{{with .Comparison}}<h2>Comparison</h2>
<p class="verdict {{if .Failed}}fail{{else}}pass{{end}}">{{.Line}}</p>
{{range .Warnings}}<p class="fail">Warning: {{.}}</p>{{end}}
<table><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr class="{{.Class}}">{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>{{end}}
{{range .Sections}}<h2 id="{{.Collective}}">{{.Collective}}</h2>
{{range .Plots}}<div class="plot">{{.}}</div>
{{end}}{{range .Tables}}<h3>{{.Label}}</h3><table><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{end}}{{end}}
<p>Written by collbench. This page is self-contained: no scripts, no network.</p>
</body></html>
`))

type htmlCompareRow struct {
	Class string
	Cells []string
}

// inlineSVG strips the XML prolog so the SVG can sit inside HTML.
func inlineSVG(svg string) template.HTML {
	if i := strings.Index(svg, "<svg"); i >= 0 {
		svg = svg[i:]
	}
	return template.HTML(svg) //nolint:gosec // SVG made by collbench from numbers, no user text; produced by the plotting library from our own numbers
}

// WriteHTML writes one self-contained HTML report.
func WriteHTML(w io.Writer, in HTMLInput) error {
	data := struct {
		Title      string
		Runs       []htmlRun
		Comparison any
		Sections   []htmlSection
	}{Title: in.Title}
	for _, s := range in.Runs {
		var b strings.Builder
		WriteHeader(&b, s.Doc)
		if s.Doc.Topology != nil {
			fmt.Fprintf(&b, "# topology: %s [fingerprint %s]\n", s.Doc.Topology.Summary, s.Doc.Topology.Fingerprint)
		}
		data.Runs = append(data.Runs, htmlRun{Label: s.Label, Header: strings.Split(strings.TrimSpace(b.String()), "\n")})
	}
	if c := in.Comparison; c != nil {
		var rows []htmlCompareRow
		for _, r := range c.Rows {
			rows = append(rows, htmlCompareRow{Class: string(r.Verdict), Cells: r.cells()})
		}
		data.Comparison = struct {
			Failed   bool
			Line     string
			Warnings []string
			Head     []string
			Rows     []htmlCompareRow
		}{c.Failed, c.verdictLine(), c.Warnings, compareHeader, rows}
	}
	plotSeries := append([]Series(nil), in.Runs...)
	if in.Baseline != nil {
		plotSeries = append(plotSeries, *in.Baseline)
	}
	var colls []string
	seen := map[string]bool{}
	for _, s := range plotSeries {
		for _, r := range s.Doc.Results {
			if !seen[r.Collective] {
				seen[r.Collective] = true
				colls = append(colls, r.Collective)
			}
		}
	}
	for _, coll := range colls {
		sec := htmlSection{Collective: coll}
		for _, kind := range PlotKinds {
			if svg := PlotSVG(kind, coll, plotSeries); svg != "" {
				sec.Plots = append(sec.Plots, inlineSVG(svg))
			}
		}
		for _, s := range in.Runs {
			t := htmlTable{Label: s.Label, Head: []string{"group", "size", "count", "type", "redop", "root", "mode", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"}}
			for _, r := range s.Doc.Results {
				if r.Collective != coll {
					continue
				}
				t.Rows = append(t.Rows, htmlRows(r, "all", r.SizeBytes, r.Count, r.OutOfPlace, r.InPlace)...)
				for _, g := range r.Groups {
					t.Rows = append(t.Rows, htmlRows(r, fmt.Sprintf("%d %s", g.ID, words.GroupExact(g.Ranks)), g.SizeBytes, g.Count, g.OutOfPlace, g.InPlace)...)
				}
			}
			if len(t.Rows) > 0 {
				sec.Tables = append(sec.Tables, t)
			}
		}
		data.Sections = append(data.Sections, sec)
	}
	return htmlTmpl.Execute(w, data)
}

func htmlRows(r results.Row, group string, size, count int64, oop, ip *results.Half) [][]string {
	var out [][]string
	root := "-"
	if r.Root >= 0 {
		root = fmt.Sprint(r.Root)
	}
	for _, m := range []struct {
		name string
		h    *results.Half
	}{{"out-of-place", oop}, {"in-place", ip}} {
		if m.h == nil {
			continue
		}
		wrong := "N/A"
		if m.h.Wrong != nil {
			wrong = fmt.Sprint(*m.h.Wrong)
		}
		out = append(out, []string{group, words.Bytes(size), fmt.Sprint(count), r.DType, r.Op, root, m.name,
			FormatTime(m.h.TimeUS), fmt.Sprintf("%.2f", m.h.AlgBW), fmt.Sprintf("%.2f", m.h.BusBW), wrong})
	}
	return out
}

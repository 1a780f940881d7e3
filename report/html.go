package report

import (
	"bytes"
	"cmp"
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"

	"collbench/internal/plotstyle"
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

// worstShown bounds the first screen's table of the worst rows.
const worstShown = 10

type htmlPlot struct {
	SVG    template.HTML
	Legend []plotstyle.Entry
	Note   string
}

type htmlSection struct {
	Collective string
	Plots      []htmlPlot
	Tables     []htmlTable
}

type htmlTable struct {
	Label string
	Head  []string
	Rows  [][]string
}

type htmlRun struct {
	Label, Role, Path, Tool, Started, Backend, Ranks, Machine string
	Header                                                    []string
}

type htmlCompareRow struct {
	Class string
	Cells []string
}

type htmlVerdict struct {
	Class string // pass, fail, inconclusive
	Line  string
	// Where is what got worse, band by band; Notes are warnings and notes.
	Where []string
	Notes []string
	// WorstTitle heads the table of the worst rows.
	WorstTitle string
	WorstHead  []string
	Worst      []htmlCompareRow
}

var htmlTmpl = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:sans-serif;margin:1.5em auto;padding:0 1em;max-width:1200px;color:#222}
h1{font-size:150%;margin:.2em 0}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:90%}
th,td{border:1px solid #ccc;padding:2px 8px;text-align:right}
td.why,th.why,td.text{text-align:left}
th{background:#f0f0f0}
.wide{overflow-x:auto;max-width:100%}
tr.regressed,tr.missing{background:#fdd}tr.improved{background:#dfd}
.verdict{font-size:125%;font-weight:bold;padding:.4em .6em;border-left:6px solid}
.verdict.fail{color:#900;border-color:#900;background:#fdecea}.verdict.pass{color:#1b5e20;border-color:#2e7d32;background:#e8f5e9}.verdict.inconclusive{color:#7a4f01;border-color:#b26a00;background:#fff4e0}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:1em}
.plot svg{width:100%;height:auto;display:block}
.legend{list-style:none;padding:0;margin:.2em 0;display:flex;flex-wrap:wrap;gap:.3em 1.2em;font-size:90%}
.legend .sym{font-size:130%}
.note{font-size:90%;color:#555}
details{margin:.3em 0}pre{background:#f8f8f8;padding:.5em;overflow-x:auto}
@media print{.plots{display:block}}
</style></head><body>
<h1>{{.Title}}</h1>
<section id="verdict" data-verdict="{{.Verdict.Class}}">
<p class="verdict {{.Verdict.Class}}">{{.Verdict.Line}}</p>
{{if .Verdict.Where}}<ul>{{range .Verdict.Where}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{range .Verdict.Notes}}<p class="note">{{.}}</p>{{end}}
{{if .Verdict.Worst}}<h2>{{.Verdict.WorstTitle}}</h2>
<div class="wide"><table><tr>{{range .Verdict.WorstHead}}<th>{{.}}</th>{{end}}</tr>
{{range .Verdict.Worst}}<tr class="{{.Class}}">{{range $i, $c := .Cells}}<td{{if eq $i 6}} class="why"{{end}}>{{$c}}</td>{{end}}</tr>
{{end}}</table></div>{{end}}
</section>
<h2>Runs</h2>
<div class="wide"><table><tr><th>run</th><th>role</th><th>tool</th><th>started</th><th>backend</th><th>ranks</th><th>machine</th></tr>
{{range .Runs}}<tr><td class="text">{{.Label}}</td><td class="text">{{.Role}}</td><td class="text">{{.Tool}}</td><td class="text">{{.Started}}</td><td class="text">{{.Backend}}</td><td>{{.Ranks}}</td><td class="text">{{.Machine}}</td></tr>
{{end}}</table></div>
{{range .Runs}}<details><summary>{{.Label}}: {{.Path}}</summary><pre>{{range .Header}}{{.}}
{{end}}</pre></details>{{end}}
{{range .Sections}}{{if .Plots}}<h2 id="plots-{{.Collective}}">{{.Collective}}</h2>
<div class="plots">{{range .Plots}}<figure class="plot">{{.SVG}}
<ul class="legend">{{range .Legend}}<li><span class="sym" style="color:{{.Color}}">{{.Symbol}}</span> {{.Name}}{{if .Dashed}} (dashed){{end}}</li>{{end}}</ul>
{{if .Note}}<figcaption class="note">{{.Note}}</figcaption>{{end}}</figure>
{{end}}</div>{{end}}{{end}}
{{range .Sections}}{{if .Tables}}<h2 id="{{.Collective}}">{{.Collective}}: measured rows</h2>
{{range .Tables}}<h3>{{.Label}}</h3><div class="wide"><table><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table></div>
{{end}}{{end}}{{end}}
{{with .Comparison}}<h2 id="comparison">Every compared row</h2>
<div class="wide"><table><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr class="{{.Class}}">{{range $i, $c := .Cells}}<td{{if eq $i 13}} class="why"{{end}}>{{$c}}</td>{{end}}</tr>
{{end}}</table></div>{{end}}
<p class="note">Written by collbench. This page is self-contained: no scripts, no network.</p>
</body></html>
`))

// inlineSVG strips the XML prolog so the SVG can sit inside HTML.
func inlineSVG(svg string) template.HTML {
	if i := strings.Index(svg, "<svg"); i >= 0 {
		svg = svg[i:]
	}
	return template.HTML(svg) //nolint:gosec // G203: SVG drawn by the plotting library from our own numbers
}

// pagePlot draws one plot for the page: the legend is the page's, below
// the picture, outside the data.
func pagePlot(kind, coll string, series []Series) (htmlPlot, bool) {
	d, err := drawPlot(kind, coll, series)
	if err != nil {
		return htmlPlot{}, false
	}
	wt, err := d.plot.WriterTo(plotWidth, plotHeight, "svg")
	if err != nil {
		return htmlPlot{}, false
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		return htmlPlot{}, false
	}
	return htmlPlot{SVG: inlineSVG(b.String()), Legend: d.entries, Note: d.note}, true
}

// runRole says what a run is on the page.
func runRole(i int, compared bool) string {
	switch {
	case i == 0 && compared:
		return "current"
	case i == 0:
		return "first"
	}
	return "also shown"
}

func htmlRunOf(s Series, role string) htmlRun {
	d := s.Doc
	var b strings.Builder
	WriteHeader(&b, d)
	path := s.Path
	if path == "" {
		path = s.Label
	}
	run := htmlRun{Label: s.Label, Role: role, Path: path, Tool: strings.TrimSpace(d.Tool.Name + " " + d.Tool.Version),
		Started: startedOf(d), Backend: words.OrDash(strings.TrimSpace(d.Environment.Backend.Name + " " + d.Environment.Backend.Version)),
		Ranks: fmt.Sprint(d.Config.Ranks), Machine: words.OrDash(d.Environment.Host),
		Header: strings.Split(strings.TrimSpace(b.String()), "\n")}
	if d.Topology != nil && d.Topology.Summary != "" {
		run.Machine = d.Topology.Summary
	}
	return run
}

// WriteHTML writes one self-contained HTML report: the verdict and the
// worst rows first, then who ran, the plots, and the tables.
func WriteHTML(w io.Writer, in HTMLInput) error {
	data := struct {
		Title      string
		Verdict    htmlVerdict
		Runs       []htmlRun
		Comparison any
		Sections   []htmlSection
	}{Title: in.Title}
	for i, s := range in.Runs {
		data.Runs = append(data.Runs, htmlRunOf(s, runRole(i, in.Comparison != nil)))
	}
	if in.Baseline != nil {
		data.Runs = append(data.Runs, htmlRunOf(*in.Baseline, "baseline"))
	}
	if c := in.Comparison; c != nil {
		data.Verdict = comparisonVerdict(c)
		var rows []htmlCompareRow
		for _, r := range c.Rows {
			rows = append(rows, htmlCompareRow{Class: string(r.Verdict), Cells: append(r.cells(), r.Why)})
		}
		data.Comparison = struct {
			Head []string
			Rows []htmlCompareRow
		}{append(slices.Clone(compareHeader), "why"), rows}
	} else {
		data.Verdict = runVerdict(in.Runs)
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
			if p, ok := pagePlot(kind, coll, plotSeries); ok {
				sec.Plots = append(sec.Plots, p)
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

// comparisonVerdict answers the first question of a comparison: did
// anything get worse, and where.
func comparisonVerdict(c *Comparison) htmlVerdict {
	v := htmlVerdict{Class: "pass", Line: c.verdictLine()}
	switch {
	case c.Failed:
		v.Class = "fail"
	case c.Inconclusive:
		v.Class = "inconclusive"
		v.Where = append(v.Where, c.Unjudged...)
	}
	for _, s := range c.Shifts {
		if s.Regressed {
			v.Where = append(v.Where, fmt.Sprintf("%s, %s: %s slower as a whole (median %s %%, allowed %s %%)", s.Case, s.Band, s.Metric, trimPct(-s.MedianPct), trimPct(s.AllowedPct)))
		}
	}
	v.Notes = append(append(append([]string{}, c.Warnings...), c.Notes...), c.AlgorithmNotes...)
	gain := func(r CompareRow) float64 {
		if r.Metric == "busbw" {
			return r.DeltaPct
		}
		return -r.DeltaPct
	}
	var worst []CompareRow
	for _, r := range c.Rows {
		if r.Verdict == Regressed || r.Verdict == Missing {
			worst = append(worst, r)
		}
	}
	v.WorstTitle = "Worst regressions"
	if len(worst) == 0 {
		v.WorstTitle = "Nothing regressed; the largest changes, and why each is within its limit"
		for _, r := range c.Rows {
			if r.Verdict == OK || r.Verdict == Improved {
				worst = append(worst, r)
			}
		}
		slices.SortStableFunc(worst, func(a, b CompareRow) int { return cmp.Compare(math.Abs(gain(b)), math.Abs(gain(a))) })
	} else {
		// Missing rows first (nothing to measure), then the largest loss.
		slices.SortStableFunc(worst, func(a, b CompareRow) int {
			if (a.Verdict == Missing) != (b.Verdict == Missing) {
				if a.Verdict == Missing {
					return -1
				}
				return 1
			}
			return cmp.Compare(gain(a), gain(b))
		})
	}
	if len(worst) > worstShown {
		v.WorstTitle += fmt.Sprintf(" (%d of %d; every row is below)", worstShown, len(worst))
		worst = worst[:worstShown]
	}
	v.WorstHead = []string{"case", "size", "mode", "baseline", "current", "delta", "why"}
	for _, r := range worst {
		cells := r.cells()
		v.Worst = append(v.Worst, htmlCompareRow{Class: string(r.Verdict),
			Cells: []string{caseName(r), words.Bytes(r.SizeBytes), r.Mode, cells[8], cells[9], cells[10], r.Why}})
	}
	return v
}

// runVerdict is the first screen of a page without a baseline: were the
// values right, and the peak of each collective.
func runVerdict(runs []Series) htmlVerdict {
	v := htmlVerdict{Class: "pass"}
	rows, wrongRows, unverified := 0, 0, 0
	first := ""
	for _, s := range runs {
		for _, r := range s.Doc.Results {
			rows++
			for _, h := range []struct {
				mode string
				h    *results.Half
			}{{"out-of-place", r.OutOfPlace}, {"in-place", r.InPlace}} {
				switch {
				case h.h == nil:
				case h.h.Wrong == nil:
					unverified++
				case *h.h.Wrong > 0:
					wrongRows++
					if first == "" {
						first = fmt.Sprintf("%s: %s %s %s, %d wrong", s.Label, r.Collective, words.Bytes(r.SizeBytes), h.mode, *h.h.Wrong)
					}
				}
			}
		}
	}
	switch {
	case wrongRows > 0:
		v.Class = "fail"
		v.Line = fmt.Sprintf("FAIL: %d measurement(s) had wrong values (first: %s)", wrongRows, first)
	case unverified > 0:
		v.Line = fmt.Sprintf("%d row(s) measured; %d measurement(s) were not verified (run with -c 1 to check every value)", rows, unverified)
	default:
		v.Line = fmt.Sprintf("PASS: every value of %d row(s) verified right", rows)
	}
	for _, s := range runs {
		v.Where = append(v.Where, peaks(s)...)
	}
	v.Notes = append(v.Notes, "No baseline was given, so nothing is judged against an earlier run: add --baseline FILE to see what got worse.")
	return v
}

// peaks says each collective's best bandwidth in one run: bus bandwidth,
// or algorithm bandwidth where every row is of one rank.
func peaks(s Series) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range s.Doc.Results {
		if seen[r.Collective] {
			continue
		}
		seen[r.Collective] = true
		one := oneRank([]Series{s}, r.Collective)
		best, at := 0.0, int64(0)
		for _, x := range s.Doc.Results {
			if x.Collective != r.Collective {
				continue
			}
			for _, h := range []*results.Half{x.OutOfPlace, x.InPlace} {
				if h == nil {
					continue
				}
				v := h.BusBW
				if one {
					v = h.AlgBW
				}
				if v > best {
					best, at = v, x.SizeBytes
				}
			}
		}
		what := "busbw"
		if one {
			what = "algbw (one rank)"
		}
		out = append(out, fmt.Sprintf("%s, %s: peak %s %.2f GB/s at %s", s.Label, r.Collective, what, best, words.Bytes(at)))
	}
	return out
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

func startedOf(d *results.Document) string {
	if d.Started.IsZero() {
		return "-"
	}
	return d.Started.UTC().Format("2006-01-02 15:04:05Z")
}

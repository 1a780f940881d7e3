package render

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"collbench/doctor/internal/record"
	"collbench/internal/plotstyle"
)

// NodeHistory is one node's records, by topology fingerprint.
type NodeHistory struct {
	Host string
	// Current is the fingerprint of the newest record; Records are its
	// records, oldest first; Others counts the records kept under earlier
	// fingerprints (the node before a part was swapped).
	Current string
	Records []NodeRecord
	Others  map[string]int
}

// HistoryHosts lists the hosts a history directory keeps.
func HistoryHosts(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot read --history %s: %v", dir, err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// LoadNodeHistory reads every record of host in dir.
func LoadNodeHistory(dir, host string) (*NodeHistory, error) {
	fps, err := os.ReadDir(filepath.Join(dir, safeName(host)))
	if err != nil {
		return nil, fmt.Errorf("--history %s keeps no node %s (%v)", dir, host, err)
	}
	h := &NodeHistory{Host: host, Others: map[string]int{}}
	var newest time.Time
	all := map[string][]NodeRecord{}
	for _, fp := range fps {
		if !fp.IsDir() {
			continue
		}
		recs, err := LoadNode(dir, host, fp.Name())
		if err != nil {
			return nil, err
		}
		if len(recs) == 0 {
			continue
		}
		all[fp.Name()] = recs
		if last := recs[len(recs)-1].Time; h.Current == "" || last.After(newest) {
			h.Current, newest = fp.Name(), last
		}
	}
	if h.Current == "" {
		return nil, fmt.Errorf("--history %s has no records of node %s yet: run collbench doctor --history %s there first", dir, host, dir)
	}
	h.Records = all[h.Current]
	for fp, recs := range all {
		if fp != h.Current {
			h.Others[fp] = len(recs)
		}
	}
	return h, nil
}

func legendOf(series map[string]plotter.XYs) []plotstyle.Entry {
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]plotstyle.Entry, len(names))
	for i, n := range names {
		out[i] = plotstyle.EntryOf(i, n, false)
	}
	return out
}

// historyPlot draws one metric over time, a line per series, as SVG text.
func historyPlot(title, ylabel string, series map[string]plotter.XYs) (string, error) {
	p, err := historyPlotPlot(title, ylabel, series)
	if err != nil {
		return "", err
	}
	wt, err := p.WriterTo(9*vg.Inch, 3.5*vg.Inch, "svg")
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		return "", err
	}
	return b.String(), nil
}

// historyPlotPlot builds the plot of historyPlot.
func historyPlotPlot(title, ylabel string, series map[string]plotter.XYs) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.X.Tick.Marker = plot.TimeTicks{Format: "2006-01-02\n15:04"}
	p.Y.Min = 0 // a drop shows in proportion
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, n := range names {
		line, dots, err := plotstyle.Series(series[n], i)
		if err != nil {
			return nil, err
		}
		p.Add(line, dots)
	}
	return p, nil
}

// WriteHTML writes the node's history as a self-contained page (no
// scripts, no network): what changed in the newest run, a plot per metric
// over the runs, and the runs' table.
func (h *NodeHistory) WriteHTML(w io.Writer) error {
	type plotted struct {
		Title  string
		SVG    template.HTML
		Legend []plotstyle.Entry
	}
	type run struct {
		Time, Mode, Verdict string
		Figures, Counters   int
	}
	byMetric := map[string]map[string]plotter.XYs{}
	for _, r := range h.Records {
		x := float64(r.Time.Unix())
		for _, f := range r.Figures {
			if byMetric[f.Metric] == nil {
				byMetric[f.Metric] = map[string]plotter.XYs{}
			}
			byMetric[f.Metric][f.Part] = append(byMetric[f.Metric][f.Part], plotter.XY{X: x, Y: f.Value})
		}
		for _, c := range r.Counters {
			m := "error counters, growth per GB"
			if byMetric[m] == nil {
				byMetric[m] = map[string]plotter.XYs{}
			}
			name := c.Part + " " + c.Counter
			byMetric[m][name] = append(byMetric[m][name], plotter.XY{X: x, Y: c.PerGB()})
		}
	}
	metrics := make([]string, 0, len(byMetric))
	for m := range byMetric {
		metrics = append(metrics, m)
	}
	slices.Sort(metrics)
	var plots []plotted
	for _, m := range metrics {
		svg, err := historyPlot(fmt.Sprintf("%s: %s", h.Host, m), m, byMetric[m])
		if err != nil {
			return err
		}
		plots = append(plots, plotted{m, template.HTML(strings.TrimPrefix(svg, `<?xml version="1.0"?>`)), legendOf(byMetric[m])}) //nolint:gosec // G203: SVG drawn by gonum from our own figures
	}
	var runs []run
	for i := len(h.Records) - 1; i >= 0; i-- {
		r := h.Records[i]
		v := "healthy"
		if !r.Healthy {
			v = "findings"
		}
		runs = append(runs, run{r.Time.Format(time.RFC3339), r.Mode, v, len(r.Figures), len(r.Counters)})
	}
	// The newest run against those before it: what the page says first.
	var changes []record.Finding
	if n := len(h.Records); n > 1 {
		_, changes = CompareNode(h.Records[n-1], h.Records[:n-1], HistoryRules{})
	}
	var others []string
	for fp, n := range h.Others {
		others = append(others, fmt.Sprintf("%s (%d run(s))", fp, n))
	}
	slices.Sort(others)
	return historyPage.Execute(w, map[string]any{"H": h, "Plots": plots, "Runs": runs, "Changes": changes, "Others": others})
}

var historyPage = template.Must(template.New("history").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>collbench node history: {{.H.Host}}</title>
<style>
body { font-family: sans-serif; margin: 1.5em; max-width: 1200px; }
.warn { background: #fff3cd; padding: .5em; border-left: 4px solid #b8860b; }
.ok { background: #e8f5e9; padding: .5em; border-left: 4px solid #2e7d32; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
svg { max-width: 100%; height: auto; }
.legend { list-style: none; padding: 0; columns: 3; } .legend span { font-size: 1.2em; }
</style></head><body>
<h1>Node {{.H.Host}}: {{len .H.Records}} doctor run(s)</h1>
{{if .Changes}}<div class="warn"><b>The newest run is worse than the node's own past:</b><ul>{{range .Changes}}<li>{{.Part}}: {{.Msg}}</li>{{end}}</ul></div>
{{else}}<div class="ok">The newest run is within its own past runs' figures.</div>{{end}}
<p>Topology fingerprint {{.H.Current}}.{{if .Others}} Earlier fingerprints of this host (before a part was swapped): {{range $i, $o := .Others}}{{if $i}}, {{end}}{{$o}}{{end}}.{{end}}</p>
{{range .Plots}}<h2>{{.Title}}</h2>
{{.SVG}}
<ul class="legend">{{range .Legend}}<li><span style="color: {{.Color}}">{{.Symbol}}</span> {{.Name}}</li>{{end}}</ul>
{{end}}
<h2>Runs, newest first</h2>
<table><tr><th>time</th><th>mode</th><th>verdict</th><th>figures</th><th>counters that grew</th></tr>
{{range .Runs}}<tr><td>{{.Time}}</td><td>{{.Mode}}</td><td>{{.Verdict}}</td><td>{{.Figures}}</td><td>{{.Counters}}</td></tr>
{{end}}</table>
</body></html>
`))

package render

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/internal/words"
	"collbench/report"
)

// The page's bounds, so it stays usable at 1,024 hosts: the findings
// listed, the hosts of the host map and the hosts given their own map.
const (
	pageFindings = 20
	mapHosts     = 32
	ownMaps      = 16
)

// evTable is a table of evidence: text for the terminal, HTML on a page.
type evTable interface {
	Header(cells ...any)
	Append(cells ...any) error
	Render() error
}

// newTable is a table written to w: plain text, or the page's table when
// w is the page's evidence.
func newTable(w io.Writer) evTable {
	if h, ok := w.(*htmlEvidence); ok {
		return &pageTable{doc: h}
	}
	return report.PlainTable(w)
}

// evBlock is one section of evidence on the page: its title, its lines
// of text and its tables.
type evBlock struct {
	Title  string
	Lines  []string
	Tables []evPageTable
}

// evPageTable is one table of a block; Omitted names the columns left
// out because no row had a figure in them.
type evPageTable struct {
	Head    []string
	Rows    [][]string
	Omitted string
}

// htmlEvidence takes the text report's evidence as it is written and
// keeps it as blocks of lines and tables for the page.
type htmlEvidence struct {
	blocks []evBlock
	part   string // a line not yet ended
}

func (h *htmlEvidence) block() *evBlock {
	if len(h.blocks) == 0 {
		h.blocks = append(h.blocks, evBlock{})
	}
	return &h.blocks[len(h.blocks)-1]
}

// Write splits the text into lines: "## title" starts a block, other
// lines are the block's text.
func (h *htmlEvidence) Write(p []byte) (int, error) {
	text := h.part + string(p)
	lines := strings.Split(text, "\n")
	h.part = lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		switch {
		case strings.TrimSpace(l) == "":
		case strings.HasPrefix(l, "## "):
			h.blocks = append(h.blocks, evBlock{Title: strings.TrimPrefix(l, "## ")})
		default:
			h.block().Lines = append(h.block().Lines, strings.TrimPrefix(strings.TrimPrefix(l, "# "), "note: "))
		}
	}
	return len(p), nil
}

// pageTable is a table bound for the page.
type pageTable struct {
	doc  *htmlEvidence
	head []string
	rows [][]string
}

func strs(cells []any) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = fmt.Sprint(c)
	}
	return out
}

func (t *pageTable) Header(cells ...any) { t.head = strs(cells) }

func (t *pageTable) Append(cells ...any) error {
	t.rows = append(t.rows, strs(cells))
	return nil
}

// Render keeps the table, leaving out each column no row has a figure in.
func (t *pageTable) Render() error {
	var keep []int
	var omitted []string
	for c := range t.head {
		empty := len(t.rows) > 0
		for _, r := range t.rows {
			if c < len(r) && r[c] != "-" && r[c] != "" {
				empty = false
				break
			}
		}
		if empty {
			omitted = append(omitted, t.head[c])
			continue
		}
		keep = append(keep, c)
	}
	pt := evPageTable{}
	for _, c := range keep {
		pt.Head = append(pt.Head, t.head[c])
	}
	for _, r := range t.rows {
		var row []string
		for _, c := range keep {
			if c < len(r) {
				row = append(row, r[c])
			}
		}
		pt.Rows = append(pt.Rows, row)
	}
	if len(omitted) > 0 {
		pt.Omitted = "left out, no row has a figure: " + strings.Join(omitted, ", ")
	}
	b := t.doc.block()
	b.Tables = append(b.Tables, pt)
	return nil
}

// mapCell is one cell of a heat map.
type mapCell struct {
	Text    string
	Style   template.CSS
	Culprit bool
	Head    bool
}

// heatMap is a matrix drawn as a table: a host's GPUs, or the hosts.
type heatMap struct {
	ID, Title, Note string
	Rows            [][]mapCell
}

// culprits are the parts the findings name, for the page to highlight:
// the first FAIL's (or the first finding's) ranks, pairs and hosts.
type culprits struct {
	ranks map[int]bool
	pairs map[[2]int]bool
	hosts map[string]bool
	// hostPairs are two hosts a finding names together.
	hostPairs map[[2]string]bool
}

func rankHosts(r *record.Report) map[int]string {
	m := map[int]string{}
	for _, g := range r.GPUs {
		m[g.Rank] = g.Host
	}
	for _, p := range r.Pairs {
		m[p.A], m[p.B] = p.Host, p.Host
	}
	for _, c := range r.Cross {
		m[c.A], m[c.B] = c.HostA, c.HostB
	}
	return m
}

func culpritsOf(r *record.Report) culprits {
	c := culprits{ranks: map[int]bool{}, pairs: map[[2]int]bool{}, hosts: map[string]bool{}, hostPairs: map[[2]string]bool{}}
	if len(r.Findings) == 0 {
		return c
	}
	// The first finding is the worst (findings are sorted); every FAIL
	// is a culprit as well.
	hostOf := rankHosts(r)
	for i, f := range r.Findings {
		if i > 0 && f.Severity != "FAIL" {
			continue
		}
		switch len(f.Ranks) {
		case 0:
		case 2:
			a, b := f.Ranks[0], f.Ranks[1]
			c.pairs[[2]int{a, b}], c.pairs[[2]int{b, a}] = true, true
			if ha, hb := hostOf[a], hostOf[b]; ha != "" && hb != "" && ha != hb {
				c.hostPairs[[2]string{ha, hb}], c.hostPairs[[2]string{hb, ha}] = true, true
			}
		default:
			for _, x := range f.Ranks {
				c.ranks[x] = true
			}
		}
		if f.Host != "" && len(f.Ranks) != 1 && len(f.Ranks) != 2 {
			c.hosts[f.Host] = true
		}
	}
	return c
}

// heat is a cell's background: pale where the figure is as fast as the
// best of its kind, deep vermilion where it is slow (a scale colour-blind
// readers tell apart; the figure is written in the cell as well).
func heat(v, top float64) (template.CSS, bool) {
	if v <= 0 || top <= 0 {
		return "background:#eee", false
	}
	f := math.Max(0, math.Min(1, v/top))
	// From vermilion (213,94,0) at f=0 to a pale blue (231,242,250) at 1.
	mix := func(a, b float64) int { return int(math.Round(a + (b-a)*f)) }
	dark := f < 0.45
	s := fmt.Sprintf("background:rgb(%d,%d,%d)", mix(213, 231), mix(94, 242), mix(0, 250))
	if dark {
		s += ";color:#fff"
	}
	return template.CSS(s), dark //nolint:gosec // G203: a colour we format from numbers
}

// hostMap is one host's pairs as a heat map, row sends to column.
func hostMap(r *record.Report, host string, c culprits, top float64) (heatMap, bool) {
	ranks, val := hostPairs(r, host)
	if len(ranks) < 2 {
		return heatMap{}, false
	}
	m := heatMap{ID: "map-" + host, Title: host + ": one-way GB/s between GPUs (row sends to column)"}
	head := []mapCell{{Head: true}}
	for _, x := range ranks {
		head = append(head, mapCell{Text: fmt.Sprintf("rank %d", x), Head: true, Culprit: c.ranks[x]})
	}
	m.Rows = append(m.Rows, head)
	for _, a := range ranks {
		row := []mapCell{{Text: fmt.Sprintf("rank %d", a), Head: true, Culprit: c.ranks[a]}}
		for _, b := range ranks {
			if a == b {
				row = append(row, mapCell{Text: "X", Style: "background:#eee"})
				continue
			}
			v := val[[2]int{a, b}]
			style, _ := heat(v, top)
			row = append(row, mapCell{Text: facts.GB(v), Style: style, Culprit: c.pairs[[2]int{a, b}] || c.ranks[a] || c.ranks[b]})
		}
		m.Rows = append(m.Rows, row)
	}
	return m, true
}

// hostWorst is the slowest figure measured within each host (its slowest
// pair, one way) and between each two hosts (the slowest GPU pair across
// them, or their allreduce where no GPU pair was measured).
func hostWorst(r *record.Report) (within map[string]float64, between map[[2]string]float64) {
	within, between = map[string]float64{}, map[[2]string]float64{}
	low := func(m map[[2]string]float64, k [2]string, v float64) {
		if old, ok := m[k]; !ok || v < old {
			m[k] = v
		}
	}
	for _, p := range r.Pairs {
		if old, ok := within[p.Host]; !ok || p.OneWay() < old {
			within[p.Host] = p.OneWay()
		}
	}
	for _, x := range append(slices.Clone(r.Cross), r.Leaves...) {
		low(between, [2]string{x.HostA, x.HostB}, x.Both)
		low(between, [2]string{x.HostB, x.HostA}, x.Both)
	}
	if len(r.Cross) == 0 {
		for _, x := range r.HostPair {
			low(between, [2]string{x.A, x.B}, x.BusBW)
			low(between, [2]string{x.B, x.A}, x.BusBW)
		}
	}
	return within, between
}

// shownHosts picks the hosts the page maps: every host when few, else
// those the findings name, then the slowest, up to mapHosts.
func shownHosts(r *record.Report, c culprits, within map[string]float64, between map[[2]string]float64) []string {
	if len(r.Hosts) <= mapHosts {
		return r.Hosts
	}
	worst := map[string]float64{}
	for h, v := range within {
		worst[h] = v
	}
	for k, v := range between {
		if old, ok := worst[k[0]]; !ok || v < old {
			worst[k[0]] = v
		}
	}
	named := map[string]bool{}
	for h := range c.hosts {
		named[h] = true
	}
	for k := range c.hostPairs {
		named[k[0]] = true
	}
	hostOf := rankHosts(r)
	for x := range c.ranks {
		named[hostOf[x]] = true
	}
	for k := range c.pairs {
		named[hostOf[k[0]]] = true
	}
	for _, f := range r.Findings {
		if f.Host != "" {
			named[f.Host] = true
		}
	}
	order := slices.Clone(r.Hosts)
	slices.SortStableFunc(order, func(a, b string) int {
		if named[a] != named[b] {
			if named[a] {
				return -1
			}
			return 1
		}
		wa, oka := worst[a]
		wb, okb := worst[b]
		switch {
		case oka && !okb:
			return -1
		case okb && !oka:
			return 1
		case wa < wb:
			return -1
		case wa > wb:
			return 1
		}
		return 0
	})
	order = order[:mapHosts]
	// Keep the shown hosts in the run's order, so neighbours stay near.
	at := map[string]int{}
	for i, h := range r.Hosts {
		at[h] = i
	}
	slices.SortFunc(order, func(a, b string) int { return at[a] - at[b] })
	return order
}

// hostsMap is the host × host map: the slowest pair within each host on
// the diagonal, the slowest GPU pair between two hosts off it.
func hostsMap(r *record.Report, hosts []string, c culprits, within map[string]float64, between map[[2]string]float64) heatMap {
	m := heatMap{ID: "map-hosts", Title: "hosts: the slowest GPU pair of each two hosts, GB/s (diagonal: the slowest pair within the host, one way)"}
	topIn, topOut := 0.0, 0.0
	for _, v := range within {
		topIn = max(topIn, v)
	}
	for _, v := range between {
		topOut = max(topOut, v)
	}
	head := []mapCell{{Head: true}}
	for _, h := range hosts {
		head = append(head, mapCell{Text: h, Head: true, Culprit: c.hosts[h]})
	}
	m.Rows = append(m.Rows, head)
	measured := 0
	for _, a := range hosts {
		row := []mapCell{{Text: a, Head: true, Culprit: c.hosts[a]}}
		for _, b := range hosts {
			var v, top float64
			var ok bool
			if a == b {
				v, ok = within[a]
				top = topIn
			} else {
				v, ok = between[[2]string{a, b}]
				top = topOut
			}
			if !ok {
				row = append(row, mapCell{Text: "·", Style: "background:#fff;color:#999"})
				continue
			}
			measured++
			style, _ := heat(v, top)
			row = append(row, mapCell{Text: facts.GB(v), Style: style, Culprit: c.hostPairs[[2]string{a, b}] || (a == b && c.hosts[a])})
		}
		m.Rows = append(m.Rows, row)
	}
	m.Note = "· : not measured as a pair (doctor pairs hosts in rounds, not every host with every other)."
	if len(hosts) < len(r.Hosts) {
		m.Note += fmt.Sprintf(" Showing %s of %s hosts: those the findings name, then the slowest; every figure is in the JSON report.",
			words.Count(len(hosts)), words.Count(len(r.Hosts)))
	}
	return m
}

// pageFinding is one finding as the page lists it.
type pageFinding struct {
	Severity, Class, Part, Stage, Msg, Cause string
}

// WriteHTML writes a self-contained page: the verdict and the culprit
// first, the heat maps with the culprit marked, then the evidence as
// tables (rolled up above LargeWorld ranks, as the text report is).
func WriteHTML(r *record.Report, w io.Writer) error {
	c := culpritsOf(r)
	data := map[string]any{"R": r}
	verdict, class := "Healthy: every stage met its peers and its expectation, and every value was right", "ok"
	if r.Healthy && len(r.NoExpectation) > 0 {
		verdict = "Healthy: every stage met its peers and every value was right; some figures had no expectation to meet (below)"
	}
	if !r.Healthy && len(r.Findings) == 0 {
		verdict, class = "Not healthy, though no finding was recorded: see the notes and the JSON report", "fail"
	}
	if !r.Healthy && len(r.Findings) > 0 {
		f := r.Findings[0]
		class = "warn"
		if f.Severity == "FAIL" {
			class = "fail"
		}
		verdict = fmt.Sprintf("%s %s: %s", f.Severity, f.Part, f.Msg)
		data["Culprit"] = f.Part
		data["Cause"] = f.Cause
	}
	if r.StoppedIn != "" {
		verdict += fmt.Sprintf(" (the run stopped in stage %q)", r.StoppedIn)
	}
	data["Verdict"], data["Class"] = verdict, class
	var fs []pageFinding
	for i, f := range r.Findings {
		if i == pageFindings {
			break
		}
		fs = append(fs, pageFinding{f.Severity, strings.ToLower(f.Severity), f.Part, f.Stage, f.Msg, f.Cause})
	}
	data["Findings"] = fs
	if n := len(r.Findings) - len(fs); n > 0 {
		data["More"] = fmt.Sprintf("... and %s more finding(s): every one is in the JSON report", words.Count(n))
	}
	data["Stages"] = stagesLine(r)
	within, between := hostWorst(r)
	hosts := shownHosts(r, c, within, between)
	var maps []heatMap
	if len(r.Hosts) > 1 && len(between) > 0 && r.Ranks > LargeWorld {
		maps = append(maps, hostsMap(r, hosts, c, within, between))
	}
	top := 0.0
	for _, p := range r.Pairs {
		top = max(top, p.AB, p.BA)
	}
	own := 0
	for _, h := range hosts {
		if own == ownMaps {
			break
		}
		if m, ok := hostMap(r, h, c, top); ok {
			maps = append(maps, m)
			own++
		}
	}
	if n := len(r.Hosts) - own; own == ownMaps && n > 0 {
		data["MapsNote"] = fmt.Sprintf("Each host's own map is drawn for %d hosts (those the findings name, then the slowest); %s more are in the JSON report.", own, words.Count(n))
	}
	data["Maps"] = maps
	ev := &htmlEvidence{}
	var err error
	if rolledUp(r, EvidenceAuto) {
		err = writeRolledUp(r, ev)
	} else {
		err = writeEvidence(r, ev)
	}
	if err != nil {
		return err
	}
	data["Evidence"] = ev.blocks
	return doctorPage.Execute(w, data)
}

var doctorPage = template.Must(template.New("doctor").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>collbench doctor: {{if .R.Healthy}}healthy{{else}}{{len .R.Findings}} finding(s){{end}}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font-family:sans-serif;margin:1.5em auto;padding:0 1em;max-width:1200px;color:#222}
h1{font-size:140%;margin:.2em 0}
table{border-collapse:collapse;margin:.4em 0 1.2em;font-size:90%}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}th{background:#f0f0f0}
td.text,th.text{text-align:left}
.wide{overflow-x:auto;max-width:100%}
.verdict{font-size:125%;font-weight:bold;padding:.4em .6em;border-left:6px solid}
.verdict.fail{color:#900;border-color:#900;background:#fdecea}.verdict.warn{color:#8a5a00;border-color:#b8860b;background:#fff3cd}
.verdict.ok{color:#1b5e20;border-color:#2e7d32;background:#e8f5e9}
tr.fail td:first-child{color:#900;font-weight:bold}tr.warn td:first-child{color:#8a5a00;font-weight:bold}
table.heat td,table.heat th{min-width:3.5em}
table.heat .culprit{outline:3px solid #000;outline-offset:-3px;font-weight:bold}
table.heat th.culprit{background:#000;color:#fff}
.note{font-size:90%;color:#555}
</style></head><body>
<h1>collbench doctor</h1>
<section id="verdict" data-verdict="{{.Class}}">
<p class="verdict {{.Class}}">{{.Verdict}}</p>
{{with .Culprit}}<p id="culprit">Culprit: <b>{{.}}</b>{{with $.Cause}}; {{.}}{{end}}. It is outlined on the map{{if gt (len $.Maps) 1}}s{{end}} below.</p>{{end}}
<p class="note">{{.R.Mode}} search, {{.R.Ranks}} ranks on {{len .R.Hosts}} host(s), {{.R.Backend}} backend, {{printf "%.1f" .R.Seconds}} s{{if .R.Modelled}} (a cluster model: times are modelled){{end}}{{with .Stages}}. Stages: {{.}}{{end}}</p>
{{if .Findings}}<div class="wide"><table><tr><th class="text">severity</th><th class="text">part</th><th class="text">stage</th><th class="text">finding</th><th class="text">likely cause</th></tr>
{{range .Findings}}<tr class="{{.Class}}"><td class="text">{{.Severity}}</td><td class="text">{{.Part}}</td><td class="text">{{.Stage}}</td><td class="text">{{.Msg}}</td><td class="text">{{.Cause}}</td></tr>
{{end}}</table></div>{{with .More}}<p class="note">{{.}}</p>{{end}}{{end}}
{{range .R.NoExpectation}}<p class="note">No expectation: {{.}}</p>{{end}}
{{range .R.Notes}}<p class="note">Note: {{.}}</p>{{end}}
</section>
{{range .Maps}}<h2 id="{{.ID}}">{{.Title}}</h2>
<div class="wide"><table class="heat">{{range .Rows}}<tr>{{range .}}{{if .Head}}<th{{if .Culprit}} class="culprit"{{end}}>{{.Text}}</th>{{else}}<td style="{{.Style}}"{{if .Culprit}} class="culprit"{{end}}>{{.Text}}</td>{{end}}{{end}}</tr>
{{end}}</table></div>{{with .Note}}<p class="note">{{.}}</p>{{end}}{{end}}
{{with .MapsNote}}<p class="note">{{.}}</p>{{end}}
<h2>Evidence</h2>
{{range .Evidence}}{{with .Title}}<h3>{{.}}</h3>{{end}}{{range .Lines}}<p class="note">{{.}}</p>{{end}}
{{range .Tables}}<div class="wide"><table><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table></div>{{with .Omitted}}<p class="note">Columns {{.}}.</p>{{end}}{{end}}{{end}}
<p class="note">Written by collbench. This page is self-contained: no scripts, no network.</p>
</body></html>
`))

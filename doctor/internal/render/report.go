// Package render writes a doctor report: the text report (report.go,
// rolled up above LargeWorld ranks by rollup.go), the HTML page (html.go),
// Prometheus' format (prom.go), and a node's history with its page
// (history.go, historyhtml.go).
package render

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/internal/words"
)

// Evidence says how much of the evidence the text report writes.
type Evidence string

// The amounts of evidence.
const (
	// EvidenceAuto writes every figure for a world of at most LargeWorld
	// ranks and rolls them up above it.
	EvidenceAuto Evidence = "auto"
	// EvidenceSummary always rolls the figures up: distributions, the
	// outliers first, and one row per stage of the plan.
	EvidenceSummary Evidence = "summary"
	// EvidenceAll writes every figure, one row per GPU, pair and round.
	EvidenceAll Evidence = "all"
)

// ParseEvidence accepts auto, summary or all.
func ParseEvidence(s string) (Evidence, error) {
	switch e := Evidence(strings.ToLower(strings.TrimSpace(s))); e {
	case EvidenceAuto, EvidenceSummary, EvidenceAll:
		return e, nil
	case "":
		return EvidenceAuto, nil
	}
	return "", fmt.Errorf("unknown --evidence %q (valid: auto, summary, all)", s)
}

// LargeWorld is the most ranks whose evidence the text report writes in
// full by default; above it the report rolls the figures up.
const LargeWorld = 16

// rolledUp says whether the text report rolls the evidence up.
func rolledUp(r *record.Report, e Evidence) bool {
	switch e {
	case EvidenceAll:
		return false
	case EvidenceSummary:
		return true
	}
	return r.Ranks > LargeWorld
}

// WriteText writes the verdict first, one line per finding, then the
// evidence: every figure for a small world, rolled up above LargeWorld
// ranks (WriteTextWith chooses).
func WriteText(r *record.Report, w io.Writer) error { return WriteTextWith(r, w, EvidenceAuto) }

// WriteTextWith writes the verdict, then as much evidence as e asks for.
func WriteTextWith(r *record.Report, w io.Writer, e Evidence) error {
	rolled := rolledUp(r, e)
	writeVerdict(r, w, rolled)
	if rolled {
		return writeRolledUp(r, w)
	}
	return writeEvidence(r, w)
}

// writeVerdict writes the title line, the findings (the first
// maxFindingLines of them when rolled), the notes and the stages.
func writeVerdict(r *record.Report, w io.Writer, rolled bool) {
	verdict := "healthy"
	if !r.Healthy {
		verdict = fmt.Sprintf("%d finding(s)", len(r.Findings))
	}
	if r.StoppedIn != "" {
		verdict += fmt.Sprintf(", stopped in stage %q", r.StoppedIn)
	}
	modelled := ""
	if r.Modelled {
		modelled = " modelled"
	}
	fmt.Fprintf(w, "# collbench doctor (%s): %d ranks on %d host(s), %s backend, %.1f s%s: %s\n",
		r.Mode, r.Ranks, len(r.Hosts), r.Backend, r.Seconds, modelled, verdict)
	shown := r.Findings
	if rolled && len(shown) > maxFindingLines {
		shown = shown[:maxFindingLines]
	}
	for _, f := range shown {
		fmt.Fprintln(w, f.Line())
	}
	if rest := r.Findings[len(shown):]; len(rest) > 0 {
		fails := 0
		for _, f := range rest {
			if f.Severity == "FAIL" {
				fails++
			}
		}
		fmt.Fprintf(w, "... and %s more finding(s), %s of them FAIL: every one is in the JSON report (-o) and with --evidence all\n", words.Count(len(rest)), words.Count(fails))
	}
	if r.Healthy && len(r.NoExpectation) == 0 {
		fmt.Fprintln(w, "OK: every stage met its peers and its expectation, and every value was right")
	} else if r.Healthy {
		fmt.Fprintln(w, "OK: every stage met its peers and every value was right; some figures had no expectation to meet (below)")
	}
	for _, n := range r.NoExpectation {
		fmt.Fprintln(w, "# no expectation: "+n)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "# note: "+n)
	}
	if len(r.Stages) > 0 {
		fmt.Fprintln(w, "# stages"+map[bool]string{true: " (modelled time)"}[r.Modelled]+": "+stagesLine(r))
	}
	if r.StoppedIn != "" {
		done := "none"
		if len(r.Completed) > 0 {
			done = strings.Join(r.Completed, ", ")
		}
		fmt.Fprintf(w, "# note: the run stopped in stage %q; stages finished: %s; the figures below are what was measured\n", r.StoppedIn, done)
	}
}

// writeEvidence writes every figure: one row per GPU, pair, host pair and
// round of the plan.
func writeEvidence(r *record.Report, w io.Writer) error {
	if len(r.GPUs) > 0 {
		what := "device-to-device copy and the fill kernel"
		if facts.HostMemory(r.Backend) {
			what = "memory copy and the fill loop"
		}
		fmt.Fprintf(w, "\n## each %s alone (all at once): %s\n", facts.Unit(r.Backend), what)
		t := newTable(w)
		t.Header("rank", "host", "device", "bus id", "copy GB/s", "expected", "%", "fill Gelem/s", "expected", "%")
		ofExp := func(v, exp float64) (string, string) {
			if exp <= 0 {
				return "-", "-"
			}
			return facts.GB(exp), fmt.Sprintf("%.0f%%", v/exp*100)
		}
		for _, g := range r.GPUs {
			ce, cp := ofExp(g.CopyGBps, g.CopyExpected)
			fe, fp := ofExp(g.FillGelem, g.FillExpected)
			_ = t.Append(fmt.Sprint(g.Rank), g.Host, g.Device, words.OrDash(g.BusID), facts.GB(g.CopyGBps), ce, cp, facts.GB(g.FillGelem), fe, fp)
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	if len(r.Pairs) > 0 {
		fmt.Fprintln(w, "\n## every pair within a host (GB/s per direction; both = both ways at once)")
		t := newTable(w)
		t.Header("host", "pair", "class", "expected", "a->b", "b->a", "both", "latency us", "transport")
		for _, p := range r.Pairs {
			_ = t.Append(p.Host, fmt.Sprintf("%d-%d", p.A, p.B), p.Class, facts.GB(p.Expected), facts.GB(p.AB), facts.GB(p.BA), facts.GB(p.Both),
				fmt.Sprintf("%.1f", p.LatencyUS), words.OrDash(p.Transport))
		}
		if err := t.Render(); err != nil {
			return err
		}
		for _, h := range r.Hosts {
			if _, page := w.(*htmlEvidence); page {
				break // the page draws the matrices as heat maps
			}
			if m := pairMatrix(r, h); m != "" {
				fmt.Fprintf(w, "\n%s: one-way GB/s (row sends to column)\n%s", h, m)
			}
		}
	}
	if len(r.Cross) > 0 || len(r.HostPair) > 0 {
		fmt.Fprintln(w, "\n## across hosts: every GPU pair of two hosts (sendrecv both ways, GB/s) and the host pair's allreduce")
		t := newTable(w)
		t.Header("hosts", "GPU pairs", "slowest pair", "slowest", "median", "rails median", "allreduce busbw")
		for _, s := range crossSummary(r) {
			_ = t.Append(s.hosts, fmt.Sprint(s.pairs), s.slowest, facts.GB(s.min), facts.GB(s.median), facts.GB(s.rails), facts.GB(s.allreduce))
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	if r.World != nil {
		writeWorld(r, w)
	}
	writePaths(r, w)
	if err := writeCounters(r, w); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n## plan")
	t := newTable(w)
	t.Header("stage", "round", "groups", "what")
	for _, p := range r.Plan {
		_ = t.Append(p.Stage, fmt.Sprint(p.Round), layoutWords(p.Layout), p.What)
	}
	return t.Render()
}

// crossRow sums up the pairs across one host pair.
type crossRow struct {
	hosts, slowest                string
	pairs                         int
	min, median, rails, allreduce float64
}

// crossSummary is one row per host pair measured across hosts, in the
// order they were measured: one line per host pair, not per GPU pair.
func crossSummary(r *record.Report) []crossRow {
	var order []string
	by := map[string]*crossRow{}
	vals, rails := map[string][]float64{}, map[string][]float64{}
	row := func(a, b string) *crossRow {
		k := a + " - " + b
		if by[k] == nil {
			by[k] = &crossRow{hosts: k, slowest: "-"}
			order = append(order, k)
		}
		return by[k]
	}
	for _, c := range r.Cross {
		x := row(c.HostA, c.HostB)
		k := x.hosts
		x.pairs++
		vals[k] = append(vals[k], c.Both)
		if c.Rail() {
			rails[k] = append(rails[k], c.Both)
		}
		if x.pairs == 1 || c.Both < x.min {
			x.min, x.slowest = c.Both, fmt.Sprintf("%d-%d", c.A, c.B)
		}
	}
	for _, h := range r.HostPair {
		row(h.A, h.B).allreduce = h.BusBW
	}
	out := make([]crossRow, 0, len(order))
	for _, k := range order {
		x := by[k]
		x.median, x.rails = facts.Median(vals[k]), facts.Median(rails[k])
		out = append(out, *x)
	}
	return out
}

// hostPairs are the ranks of host's measured pairs, sorted, and each
// pair's one-way figure keyed by (sender, receiver).
func hostPairs(r *record.Report, host string) ([]int, map[[2]int]float64) {
	var ranks []int
	val := map[[2]int]float64{}
	for _, p := range r.Pairs {
		if p.Host != host {
			continue
		}
		for _, x := range []int{p.A, p.B} {
			if !slices.Contains(ranks, x) {
				ranks = append(ranks, x)
			}
		}
		val[[2]int{p.A, p.B}], val[[2]int{p.B, p.A}] = p.AB, p.BA
	}
	slices.Sort(ranks)
	return ranks, val
}

// pairMatrix renders one host's one-way figures as a matrix.
func pairMatrix(r *record.Report, host string) string {
	ranks, val := hostPairs(r, host)
	if len(ranks) < 2 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%8s", "")
	for _, c := range ranks {
		fmt.Fprintf(&b, " %8s", fmt.Sprintf("r%d", c))
	}
	b.WriteByte('\n')
	for _, a := range ranks {
		fmt.Fprintf(&b, "%8s", fmt.Sprintf("r%d", a))
		for _, c := range ranks {
			if a == c {
				fmt.Fprintf(&b, " %8s", "X")
			} else {
				fmt.Fprintf(&b, " %8s", facts.GB(val[[2]int{a, c}]))
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// stagesLine is each stage's time and rounds, or why it was skipped.
func stagesLine(r *record.Report) string {
	var parts []string
	for _, s := range r.Stages {
		if s.Skipped != "" {
			parts = append(parts, fmt.Sprintf("%s skipped (%s)", s.Stage, s.Skipped))
		} else {
			parts = append(parts, fmt.Sprintf("%s %.1f s%s", s.Stage, s.Seconds, roundsWord(s.Rounds)))
		}
	}
	return strings.Join(parts, "; ")
}

// roundsWord is ", 3 rounds" (nothing for a stage of no rounds).
func roundsWord(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return ", 1 round"
	}
	return fmt.Sprintf(", %d rounds", n)
}

// countersShown bounds the counter table of the text report; the JSON
// keeps every row.
const countersShown = 20

// writeCounters writes the error counters that grew, each part and counter
// once (the stages summed), the fastest growth per GB first.
func writeCounters(r *record.Report, w io.Writer) error {
	if len(r.Counters) == 0 {
		if len(r.Watched) > 0 {
			fmt.Fprintln(w, "\n## error counters: none grew during the run")
			for _, x := range r.Watched {
				fmt.Fprintln(w, "watched on "+x)
			}
		}
		return nil
	}
	defer func() {
		for _, x := range r.Watched {
			fmt.Fprintln(w, "watched on "+x)
		}
	}()
	type row struct {
		host, part, counter string
		growth              uint64
		gb                  float64
		stages              []string
	}
	var rows []*row
	by := map[string]*row{}
	for _, c := range r.Counters {
		k := c.Host + "|" + c.Part.Name() + "|" + c.Counter
		x := by[k]
		if x == nil {
			x = &row{host: c.Host, part: c.Part.Name(), counter: c.Counter}
			by[k] = x
			rows = append(rows, x)
		}
		x.growth += c.Growth()
		x.gb += c.GB()
		if !slices.Contains(x.stages, c.Stage) {
			x.stages = append(x.stages, c.Stage)
		}
	}
	rate := func(x *row) float64 {
		if x.gb > 0 {
			return float64(x.growth) / x.gb
		}
		return math.Inf(1)
	}
	slices.SortStableFunc(rows, func(a, b *row) int {
		if ra, rb := rate(a), rate(b); ra != rb {
			if ra > rb {
				return -1
			}
			return 1
		}
		return 0
	})
	fmt.Fprintln(w, "\n## error counters that grew during the run (the stages summed; GB: traffic over the part meanwhile)")
	t := newTable(w)
	t.Header("host", "part", "counter", "growth", "GB", "per GB", "stages")
	for i, x := range rows {
		if i == countersShown {
			break
		}
		per := "-"
		if x.gb > 0 {
			per = fmt.Sprintf("%.3g", rate(x))
		}
		_ = t.Append(x.host, x.part, x.counter, fmt.Sprint(x.growth), fmt.Sprintf("%.3g", x.gb), per, strings.Join(x.stages, ", "))
	}
	if err := t.Render(); err != nil {
		return err
	}
	if len(rows) > countersShown {
		fmt.Fprintf(w, "... and %d more in the JSON report (counter_growth)\n", len(rows)-countersShown)
	}
	return nil
}

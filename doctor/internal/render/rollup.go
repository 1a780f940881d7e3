package render

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/internal/words"
)

// The rolled-up text report's limits: it stays a screen or two at any
// world size, and the JSON report keeps every figure.
const (
	// maxFindingLines is the most findings written one per line.
	maxFindingLines = 10
	// outliers is how many of the slowest GPUs, pairs and host pairs are
	// listed.
	outliers = 4
	// slowHosts is how many of the slowest hosts are listed.
	slowHosts = 3
)

// writeRolledUp writes the evidence of a large world: each stage's
// figures as a distribution with the slowest first, and the plan as one
// row per stage.
func writeRolledUp(r *record.Report, w io.Writer) error {
	fmt.Fprintf(w, "# evidence rolled up for %s ranks on %s host(s): distributions and the slowest first; every figure is in the JSON report (-o) and with --evidence all\n",
		words.Count(r.Ranks), words.Count(len(r.Hosts)))
	for _, section := range []func(*record.Report, io.Writer) error{rolledGPUs, rolledPairs, rolledCross} {
		if err := section(r, w); err != nil {
			return err
		}
	}
	if r.World != nil {
		writeWorld(r, w)
	}
	writePaths(r, w)
	fmt.Fprintln(w, "\n## plan (one row per stage; every round is in the JSON report)")
	t := newTable(w)
	t.Header("stage", "rounds", "groups of its first round", "what")
	for _, s := range planByStage(r.Plan) {
		_ = t.Append(s.stage, words.Count(s.rounds), layoutWords(s.first.Layout), s.what)
	}
	return t.Render()
}

// ratio is v over ref, 0 when ref is unknown.
func ratio(v, ref float64) float64 {
	if ref <= 0 {
		return 0
	}
	return v / ref
}

// pct writes a ratio as a percentage, "-" when unknown.
func pct(x float64) string {
	if x <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", x*100)
}

// spread is the distribution of one figure over many parts.
type spread struct {
	n                int
	lo, median, hi   float64
	expected, under  float64 // the median expectation; how many parts fall below 75% of theirs
	withExpectations int
}

func spreadOf(vals, exps []float64) spread {
	s := spread{n: len(vals)}
	if len(vals) == 0 {
		return s
	}
	s.lo, s.hi, s.median = slices.Min(vals), slices.Max(vals), facts.Median(vals)
	var known []float64
	for i, e := range exps {
		if e > 0 {
			known = append(known, e)
			s.withExpectations++
			if vals[i] < 0.75*e {
				s.under++
			}
		}
	}
	s.expected = facts.Median(known)
	return s
}

func (s spread) cells(name string) []any {
	under := "-"
	if s.withExpectations > 0 {
		under = words.Count(int(s.under))
	}
	return []any{name, words.Count(s.n), facts.GB(s.lo), facts.GB(s.median), facts.GB(s.hi), facts.GB(s.expected), pct(ratio(s.median, s.expected)), under}
}

// rolledGPUs writes each GPU alone as two distributions, the slowest GPUs
// against the median, and the slowest hosts by their GPUs' median.
func rolledGPUs(r *record.Report, w io.Writer) error {
	if len(r.GPUs) == 0 {
		return nil
	}
	var copies, fills, copyExp, fillExp []float64
	byHost := map[string][]record.GPUFigure{}
	var hosts []string
	for _, g := range r.GPUs {
		copies, fills = append(copies, g.CopyGBps), append(fills, g.FillGelem)
		copyExp, fillExp = append(copyExp, g.CopyExpected), append(fillExp, g.FillExpected)
		if byHost[g.Host] == nil {
			hosts = append(hosts, g.Host)
		}
		byHost[g.Host] = append(byHost[g.Host], g)
	}
	cs, fs := spreadOf(copies, copyExp), spreadOf(fills, fillExp)
	fmt.Fprintf(w, "\n## each %s alone (all at once): %s %ss on %s host(s)\n", facts.Unit(r.Backend), words.Count(len(r.GPUs)), facts.Unit(r.Backend), words.Count(len(hosts)))
	t := newTable(w)
	t.Header("figure", facts.Unit(r.Backend)+"s", "min", "median", "max", "expected", "median/expected", "below 75% of expected")
	_ = t.Append(cs.cells("copy GB/s")...)
	_ = t.Append(fs.cells("fill Gelem/s")...)
	if err := t.Render(); err != nil {
		return err
	}
	// The GPUs that stand out from their own host, by the worse of their
	// two figures against the host's median (a host slow alike is the
	// hosts' table below).
	hostMedian := map[string][2]float64{}
	for _, h := range hosts {
		var c, f []float64
		for _, g := range byHost[h] {
			c, f = append(c, g.CopyGBps), append(f, g.FillGelem)
		}
		hostMedian[h] = [2]float64{facts.Median(c), facts.Median(f)}
	}
	score := func(g record.GPUFigure) float64 {
		m := hostMedian[g.Host]
		return min(ratioOr1(g.CopyGBps, m[0]), ratioOr1(g.FillGelem, m[1]))
	}
	slow := slices.Clone(r.GPUs)
	slices.SortStableFunc(slow, func(a, b record.GPUFigure) int { return cmp.Compare(score(a), score(b)) })
	fmt.Fprintf(w, "\nthe %d %ss that stand out most from their host (the worse of copy and fill against the host's median):\n", min(outliers, len(slow)), facts.Unit(r.Backend))
	t = newTable(w)
	t.Header("rank", "host", "bus id", "copy GB/s", "of host", "of expected", "fill Gelem/s", "of host", "of expected")
	for _, g := range slow[:min(outliers, len(slow))] {
		m := hostMedian[g.Host]
		_ = t.Append(fmt.Sprint(g.Rank), g.Host, words.OrDash(g.BusID), facts.GB(g.CopyGBps), pct(ratio(g.CopyGBps, m[0])), pct(ratio(g.CopyGBps, g.CopyExpected)),
			facts.GB(g.FillGelem), pct(ratio(g.FillGelem, m[1])), pct(ratio(g.FillGelem, g.FillExpected)))
	}
	if err := t.Render(); err != nil {
		return err
	}
	if len(hosts) < 2 {
		return nil
	}
	// The slowest hosts: a host whose GPUs are all slow alike shows here
	// even where no one GPU stands out from its host.
	type hostRow struct {
		host       string
		gpus       int
		copy, fill float64
		copyExp    float64
		fillExp    float64
	}
	rows := make([]hostRow, 0, len(hosts))
	for _, h := range hosts {
		var ce, fe []float64
		for _, g := range byHost[h] {
			ce, fe = append(ce, g.CopyExpected), append(fe, g.FillExpected)
		}
		m := hostMedian[h]
		rows = append(rows, hostRow{host: h, gpus: len(byHost[h]), copy: m[0], fill: m[1], copyExp: facts.Median(ce), fillExp: facts.Median(fe)})
	}
	hscore := func(h hostRow) float64 { return min(ratioOr1(h.copy, cs.median), ratioOr1(h.fill, fs.median)) }
	slices.SortStableFunc(rows, func(a, b hostRow) int { return cmp.Compare(hscore(a), hscore(b)) })
	fmt.Fprintf(w, "\nthe %d slowest hosts (the median of their %ss against the median of all):\n", min(slowHosts, len(rows)), facts.Unit(r.Backend))
	t = newTable(w)
	t.Header("host", facts.Unit(r.Backend)+"s", "copy GB/s", "of median", "of expected", "fill Gelem/s", "of median", "of expected")
	for _, h := range rows[:min(slowHosts, len(rows))] {
		_ = t.Append(h.host, fmt.Sprint(h.gpus), facts.GB(h.copy), pct(ratio(h.copy, cs.median)), pct(ratio(h.copy, h.copyExp)),
			facts.GB(h.fill), pct(ratio(h.fill, fs.median)), pct(ratio(h.fill, h.fillExp)))
	}
	return t.Render()
}

// ratioOr1 is v over ref, or 1 (unremarkable) when ref is unknown.
func ratioOr1(v, ref float64) float64 {
	if ref <= 0 {
		return 1
	}
	return v / ref
}

// rolledPairs writes the pairs within hosts as one distribution per link
// class, the slowest pairs, and the matrices of the hosts a finding names.
func rolledPairs(r *record.Report, w io.Writer) error {
	if len(r.Pairs) == 0 {
		return nil
	}
	var classes []string
	vals, exps := map[string][]float64{}, map[string][]float64{}
	hosts := map[string]bool{}
	for _, p := range r.Pairs {
		if vals[p.Class] == nil {
			classes = append(classes, p.Class)
		}
		vals[p.Class] = append(vals[p.Class], p.OneWay())
		exps[p.Class] = append(exps[p.Class], p.Expected)
		hosts[p.Host] = true
	}
	fmt.Fprintf(w, "\n## every pair within a host: %s pairs on %s host(s) (one-way GB/s, the slower direction)\n", words.Count(len(r.Pairs)), words.Count(len(hosts)))
	t := newTable(w)
	t.Header("class", "pairs", "min", "median", "max", "expected", "median/expected", "below 75% of expected")
	medians := map[string]float64{}
	for _, c := range classes {
		s := spreadOf(vals[c], exps[c])
		medians[c] = s.median
		_ = t.Append(s.cells(c)...)
	}
	if err := t.Render(); err != nil {
		return err
	}
	slow := slices.Clone(r.Pairs)
	score := func(p record.PairFigure) float64 { return ratioOr1(p.OneWay(), medians[p.Class]) }
	slices.SortStableFunc(slow, func(a, b record.PairFigure) int { return cmp.Compare(score(a), score(b)) })
	fmt.Fprintf(w, "\nthe %d slowest pairs (one way against the median of their class):\n", min(outliers, len(slow)))
	t = newTable(w)
	t.Header("host", "pair", "class", "expected", "a->b", "b->a", "both", "of median", "latency us", "transport")
	for _, p := range slow[:min(outliers, len(slow))] {
		_ = t.Append(p.Host, fmt.Sprintf("%d-%d", p.A, p.B), p.Class, facts.GB(p.Expected), facts.GB(p.AB), facts.GB(p.BA), facts.GB(p.Both),
			pct(ratio(p.OneWay(), medians[p.Class])), fmt.Sprintf("%.1f", p.LatencyUS), words.OrDash(p.Transport))
	}
	if err := t.Render(); err != nil {
		return err
	}
	fmt.Fprintln(w, "(each host's matrix of pairs: --evidence all)")
	return nil
}

// rolledCross writes the host pairs measured across hosts: how many, the
// spread of their slowest GPU pairs and allreduces, then the slowest.
func rolledCross(r *record.Report, w io.Writer) error {
	if len(r.Cross) == 0 && len(r.HostPair) == 0 {
		return nil
	}
	rows := crossSummary(r)
	var mins, ars []float64
	for _, x := range rows {
		if x.pairs > 0 {
			mins = append(mins, x.min)
		}
		if x.allreduce > 0 {
			ars = append(ars, x.allreduce)
		}
	}
	fmt.Fprintf(w, "\n## across hosts: %s host pair(s), %s GPU pairs (sendrecv both ways, GB/s) and the host pairs' allreduce\n",
		words.Count(len(rows)), words.Count(len(r.Cross)))
	t := newTable(w)
	t.Header("figure", "host pairs", "min", "median", "max")
	for _, d := range []struct {
		name string
		v    []float64
	}{{"slowest GPU pair", mins}, {"allreduce busbw", ars}} {
		if len(d.v) > 0 {
			_ = t.Append(d.name, words.Count(len(d.v)), facts.GB(slices.Min(d.v)), facts.GB(facts.Median(d.v)), facts.GB(slices.Max(d.v)))
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	med := facts.Median(mins)
	medAR := facts.Median(ars)
	score := func(x crossRow) float64 {
		s := 1.0
		if x.pairs > 0 {
			s = ratioOr1(x.min, med)
		}
		if x.allreduce > 0 {
			s = min(s, ratioOr1(x.allreduce, medAR))
		}
		return s
	}
	slices.SortStableFunc(rows, func(a, b crossRow) int { return cmp.Compare(score(a), score(b)) })
	fmt.Fprintf(w, "\nthe %d slowest host pairs:\n", min(outliers, len(rows)))
	t = newTable(w)
	t.Header("hosts", "GPU pairs", "slowest pair", "slowest", "median", "rails median", "allreduce busbw")
	for _, s := range rows[:min(outliers, len(rows))] {
		_ = t.Append(s.hosts, fmt.Sprint(s.pairs), s.slowest, facts.GB(s.min), facts.GB(s.median), facts.GB(s.rails), facts.GB(s.allreduce))
	}
	return t.Render()
}

// writeWorld writes the whole-world allreduce and its bisection.
func writeWorld(r *record.Report, w io.Writer) {
	fmt.Fprintf(w, "\n## whole world: allreduce %d ranks, %s: busbw %s GB/s", r.World.Ranks, words.Bytes(r.World.Bytes), facts.GB(r.World.BusBW))
	if r.World.Expected > 0 {
		fmt.Fprintf(w, " (expected %s)", facts.GB(r.World.Expected))
	}
	fmt.Fprintln(w)
	for _, b := range r.World.Bisect {
		fmt.Fprintln(w, "  bisect: "+b)
	}
}

// stagePlan is the rounds of one stage.
type stagePlan struct {
	stage  string
	rounds int
	first  record.PlanStep
	what   string
}

// planByStage folds the plan into one entry per stage, in the order the
// stages ran: how many rounds, the first round, and what the rounds did
// (the first round's words, and how many other kinds of round there were).
func planByStage(plan []record.PlanStep) []stagePlan {
	var out []stagePlan
	kinds := map[string]map[string]bool{}
	for _, p := range plan {
		if len(out) == 0 || out[len(out)-1].stage != p.Stage {
			out = append(out, stagePlan{stage: p.Stage, first: p, what: p.What})
			kinds[p.Stage] = map[string]bool{}
		}
		out[len(out)-1].rounds++
		kinds[p.Stage][roundKind(p.What)] = true
	}
	for i := range out {
		if n := len(kinds[out[i].stage]) - 1; n > 0 {
			out[i].what += fmt.Sprintf(" (and %d other kind(s) of round)", n)
		}
	}
	return out
}

// roundKind is what a round did, less the numbers that change from round
// to round ("local rank l with l+3").
func roundKind(what string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, what)
}

// layoutWords shortens a plan's groups for a person: "1,024 groups of 8:
// [[0-7],[8-15],…]"; words that are not a list of groups stay as they are.
func layoutWords(layout string) string {
	var gs [][]int
	if !strings.HasPrefix(layout, "[") || json.Unmarshal([]byte(layout), &gs) != nil || len(gs) == 0 {
		return layout
	}
	return words.Groups(gs)
}

// writePaths writes, on one line, the paths between hosts NCCL's proxy
// showed inside doctor's collectives by stage, then the slowest few of
// those judged slow (all are in the JSON report).
func writePaths(r *record.Report, w io.Writer) {
	if len(r.PathsSeen) == 0 {
		return
	}
	fmt.Fprintln(w, "\n## paths between hosts, on the wire inside doctor's collectives (NCCL's proxy, through collbench's profiler plugin)")
	var stages []string
	for _, p := range r.PathsSeen {
		stages = append(stages, fmt.Sprintf("%s %s paths (median %s GB/s, %s slow)", p.Stage, words.Count(p.Paths), facts.GB(p.Median), words.Count(p.Slow)))
	}
	fmt.Fprintln(w, "  "+strings.Join(stages, "; "))
	slow := slices.Clone(r.SlowPaths)
	slices.SortStableFunc(slow, func(a, b record.PathFigure) int { return cmp.Compare(a.GBps, b.GBps) })
	for _, p := range slow[:min(outliers, len(slow))] {
		fmt.Fprintf(w, "  slow: %s rank %d (%s) → rank %d (%s): %s GB/s, %s\n", p.Stage, p.From, p.FromHost, p.To, p.ToHost, facts.GB(p.GBps), p.Why)
	}
}

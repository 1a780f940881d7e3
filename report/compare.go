package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"collbench/internal/words"
	"collbench/results"
)

// Verdict is a compared row's outcome.
type Verdict string

// The verdicts.
const (
	OK        Verdict = "ok"
	Improved  Verdict = "improved"
	Regressed Verdict = "regressed"
	Missing   Verdict = "missing"
	New       Verdict = "new"
	// Inconclusive: the change is beyond the threshold but within the
	// runs' own measured spread, so those runs cannot judge it.
	Inconclusive Verdict = "inconclusive"
)

// Band sets how rows from MinSize up are judged: by bus bandwidth drop or
// by time rise, in percent, with an absolute floor for times.
type Band struct {
	MinSize int64   `json:"min_size" yaml:"min_size"`
	Metric  string  `json:"metric" yaml:"metric"` // busbw or time
	Pct     float64 `json:"pct" yaml:"pct"`
	FloorUS float64 `json:"floor_us,omitempty" yaml:"floor_us"`
}

// Thresholds configure a comparison.
type Thresholds struct {
	Bands        []Band `json:"bands"`
	AllowMissing bool   `json:"allow_missing"`
	Strict       bool   `json:"strict"`
}

// DefaultThresholds: below 1 MiB a time rise of more than 10% and 2 µs
// regresses; from 1 MiB a bus bandwidth drop of more than 5%.
func DefaultThresholds() Thresholds {
	return Thresholds{Bands: []Band{{MinSize: 0, Metric: "time", Pct: 10, FloorUS: 2}, {MinSize: 1 << 20, Metric: "busbw", Pct: 5}}}
}

// Validate checks the bands.
func (t Thresholds) Validate() error {
	if len(t.Bands) == 0 {
		return errors.New("no threshold bands")
	}
	for i, b := range t.Bands {
		if b.Metric != "busbw" && b.Metric != "time" {
			return fmt.Errorf("band %d: metric %q must be busbw or time", i, b.Metric)
		}
		if b.Pct <= 0 || b.MinSize < 0 || b.FloorUS < 0 {
			return fmt.Errorf("band %d: pct must be positive, min_size and floor_us not negative", i)
		}
	}
	return nil
}

func (t Thresholds) band(size int64) (Band, string) {
	bands := append([]Band(nil), t.Bands...)
	sort.Slice(bands, func(a, b int) bool { return bands[a].MinSize < bands[b].MinSize })
	pick := bands[0]
	for _, b := range bands {
		if size >= b.MinSize {
			pick = b
		}
	}
	return pick, fmt.Sprintf(">= %s %s", words.Bytes(pick.MinSize), pick.Metric)
}

// CompareRow is one row and mode of the comparison.
type CompareRow struct {
	Collective string  `json:"collective"`
	DType      string  `json:"dtype"`
	Op         string  `json:"op"`
	Root       int     `json:"root"`
	Layout     string  `json:"layout"`
	SizeBytes  int64   `json:"size_bytes"`
	Mode       string  `json:"mode"`
	Band       string  `json:"band"`
	Metric     string  `json:"metric"`
	Baseline   float64 `json:"baseline"`
	Current    float64 `json:"current"`
	DeltaPct   float64 `json:"delta_pct"`   // the metric's change, current against baseline: a rise in time or busbw is positive
	AllowedPct float64 `json:"allowed_pct"` // the threshold applied, noise included
	// SpreadPct is the change the two runs' own measured spread covers
	// (twice the larger relative spread of either side), 0 where neither
	// measured one.
	SpreadPct float64 `json:"spread_pct,omitempty"`
	Verdict   Verdict `json:"verdict"`
	// Why says what decided the verdict: the threshold, the measured
	// noise that widened it, or the absolute floor for small times.
	Why string `json:"why,omitempty"`
	// BaselineAlgorithm and CurrentAlgorithm are what the library ran the
	// row with on each side, where the runs recorded it.
	BaselineAlgorithm string `json:"baseline_algorithm,omitempty"`
	CurrentAlgorithm  string `json:"current_algorithm,omitempty"`
	// baseCycles and curCycles are each side's cycle times (--stable,
	// --cycles), in cycle order: a band's rows measured together.
	baseCycles, curCycles []float64
}

// RunInfo identifies one side of a comparison.
type RunInfo struct {
	Label       string `json:"label"`
	Tool        string `json:"tool"`
	Started     string `json:"started,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Machine     string `json:"machine,omitempty"`
	// Backend is the backend and its library's version, e.g. "nccl 2.28.3"
	// or "cpu go1.26.8".
	Backend string `json:"backend,omitempty"`
	Runs    int    `json:"runs,omitempty"`
}

// Comparison is a current run judged against a baseline.
type Comparison struct {
	Baseline   RunInfo         `json:"baseline"`
	Current    RunInfo         `json:"current"`
	Thresholds Thresholds      `json:"thresholds"`
	Rows       []CompareRow    `json:"rows"`
	Counts     map[Verdict]int `json:"counts"`
	Warnings   []string        `json:"warnings,omitempty"`
	Failed     bool            `json:"failed"`
	Reasons    []string        `json:"reasons,omitempty"`
	// AlgorithmNotes say, for each band of regressed sizes, whether the
	// library's choice of algorithm changed there.
	AlgorithmNotes []string `json:"algorithm_notes,omitempty"`
	// Notes help read the verdict (e.g. how noisy the cpu backend is).
	Notes []string `json:"notes,omitempty"`
	// Shifts judge each case's band of sizes as a whole: a slowdown too
	// small for any one noisy row shows in the median of many.
	Shifts []Shift `json:"shifts,omitempty"`
	// Inconclusive is set when nothing failed but some rows or bands could
	// not be judged: the runs' own spread is wider than the change asked
	// for. Unjudged says where, and CatchablePct is the smallest change
	// those parts could have caught.
	Inconclusive bool     `json:"inconclusive,omitempty"`
	Unjudged     []string `json:"unjudged,omitempty"`
	CatchablePct float64  `json:"catchable_pct,omitempty"`
}

// Shift is one case's band of sizes judged as a whole: the median change
// of its rows against an allowance of half the row threshold, or more
// where the rows' changes scatter widely (three standard errors of that
// median).
type Shift struct {
	Case       string  `json:"case"`
	Band       string  `json:"band"`
	Metric     string  `json:"metric"`
	Rows       int     `json:"rows"`
	MedianPct  float64 `json:"median_pct"`  // the median gain: negative is worse
	AllowedPct float64 `json:"allowed_pct"` // the smallest median loss these rows could tell from noise
	AskedPct   float64 `json:"asked_pct"`   // the row threshold: the change the comparison was asked to catch
	Regressed  bool    `json:"regressed"`
	// Inconclusive: the band could not catch a change of the size asked
	// for (AllowedPct beyond AskedPct) and did not clearly improve.
	Inconclusive bool `json:"inconclusive,omitempty"`
	// label is the rows' band (CompareRow.Band).
	label string
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// sizeSpan is "8 B-512 KiB" for the rows' smallest and largest size.
func sizeSpan(rs []CompareRow) string {
	lo, hi := rs[0].SizeBytes, rs[0].SizeBytes
	for _, r := range rs {
		lo, hi = min(lo, r.SizeBytes), max(hi, r.SizeBytes)
	}
	if lo == hi {
		return words.Bytes(lo)
	}
	return words.Bytes(lo) + "-" + words.Bytes(hi)
}

// caseName names a row's case: collective, type, op, root and groups.
func caseName(r CompareRow) string {
	name := r.Collective + " " + r.DType
	if r.Op != "" && r.Op != "none" {
		name += " " + r.Op
	}
	if r.Root >= 0 {
		name += fmt.Sprintf(" root %d", r.Root)
	}
	if r.Layout != "" && r.Layout != "all" {
		name += " groups " + shortLayout(r.Layout)
	}
	return name
}

// shortLayout writes a rank list for a text report: a preset name as it
// is, an explicit list of many ranks as ranges and a count ("1,024 groups
// of 8: [[0-7],[8-15],…]"); JSON keeps the list as given.
func shortLayout(s string) string {
	if len(s) <= 40 {
		return s
	}
	var gs [][]int
	if json.Unmarshal([]byte(s), &gs) == nil && len(gs) > 0 {
		return words.Groups(gs)
	}
	r := []rune(s)
	if len(r) > 60 {
		return string(r[:59]) + "…"
	}
	return s
}

// ErrNothingInCommon is returned when no row of the current run matches the baseline.
var ErrNothingInCommon = errors.New("the two runs have no row in common (collective, type, op, root, groups and size)")

func info(label string, d *results.Document) RunInfo {
	ri := RunInfo{Label: label, Tool: d.Tool.Name + " " + d.Tool.Version,
		Backend: strings.TrimSpace(d.Environment.Backend.Name + " " + d.Environment.Backend.Version)}
	if !d.Started.IsZero() {
		ri.Started = d.Started.UTC().Format("2006-01-02 15:04:05Z")
	}
	if d.Topology != nil {
		ri.Fingerprint, ri.Machine = d.Topology.Fingerprint, d.Topology.Summary
	}
	if d.Baseline != nil {
		ri.Runs = d.Baseline.Runs
	}
	return ri
}

// inputWarnings says what the inputs cannot vouch for: the same run on
// both sides, different machines or backends, lines left unread.
func inputWarnings(c *Comparison, base, cur *results.Document, baseLabel, curLabel string) []string {
	w := c.Warnings
	if results.SameRun(base, cur) {
		w = append(w, "the baseline and the current run are the same run: every row compares with itself")
	}
	if b, k := c.Baseline.Fingerprint, c.Current.Fingerprint; b != "" && k != "" && b != k {
		w = append(w, fmt.Sprintf("machine shape differs: baseline %s (%s), current %s (%s)", b, c.Baseline.Machine, k, c.Current.Machine))
	} else if bm, km := base.Machine(), cur.Machine(); bm != "" && km != "" && bm != km {
		w = append(w, fmt.Sprintf("the machines differ: the baseline ran on %s, the current run on %s", bm, km))
	}
	for _, side := range []struct {
		label string
		d     *results.Document
	}{{baseLabel, base}, {curLabel, cur}} {
		if u := side.d.UnreadWords(); u != "" {
			w = append(w, side.label+": "+u)
		}
	}
	if bn, kn := base.Environment.Backend.Name, cur.Environment.Backend.Name; bn != "" && kn != "" && bn != kn {
		// Two backends side by side (MPI against NCCL, the TCP engine
		// against MPI): say which side's rows came from which.
		w = append(w, fmt.Sprintf("two backends side by side: the baseline column's rows came from the %s backend (%s), the current column's from the %s backend (%s)",
			bn, c.Baseline.Backend, kn, c.Current.Backend))
	} else if b, k := c.Baseline.Backend, c.Current.Backend; b != "" && k != "" && b != k {
		w = append(w, fmt.Sprintf("backend or library version differs: baseline %s, current %s", b, k))
	}
	return w
}

// spreadKnown reports whether d measured the spread of its rows (cycles).
func spreadKnown(d *results.Document) bool {
	for _, r := range d.Results {
		for _, h := range r.Halves() {
			if h.Cycles != nil || h.Runs > 1 {
				return true
			}
		}
	}
	return false
}

// Compare judges cur against base, row by row and mode by mode.
func Compare(base, cur *results.Document, baseLabel, curLabel string, th Thresholds) (*Comparison, error) {
	if err := th.Validate(); err != nil {
		return nil, err
	}
	c := &Comparison{Baseline: info(baseLabel, base), Current: info(curLabel, cur), Thresholds: th, Counts: map[Verdict]int{}}
	c.Warnings = inputWarnings(c, base, cur, baseLabel, curLabel)
	baseRows := map[string]results.Row{}
	var baseOrder []string
	baseDups := 0
	for _, r := range base.Results {
		k := results.RowKey(base, r)
		if _, dup := baseRows[k]; dup {
			baseDups++ // the first of duplicate rows is compared
			continue
		}
		baseOrder = append(baseOrder, k)
		baseRows[k] = r
	}
	common := 0
	seen := map[string]bool{}
	add := func(r results.Row, layout, mode string, b, k *results.Half, ba, ka *results.AlgoChoice) {
		if cr, ok := judgeRow(th, r, layout, mode, b, k, ba, ka); ok {
			cr.baseCycles, cr.curCycles = cycleTimes(b), cycleTimes(k)
			c.Rows = append(c.Rows, cr)
			c.Counts[cr.Verdict]++
		}
	}
	dups := 0
	for _, r := range cur.Results {
		k := results.RowKey(cur, r)
		if seen[k] {
			dups++ // the same row twice: only the first is compared
			continue
		}
		seen[k] = true
		br, ok := baseRows[k]
		layout := layoutOf(cur, r)
		if !ok {
			add(r, layout, "out-of-place", nil, r.OutOfPlace, nil, r.Algorithm)
			add(r, layout, "in-place", nil, r.InPlace, nil, r.Algorithm)
			continue
		}
		common++
		add(r, layout, "out-of-place", br.OutOfPlace, r.OutOfPlace, br.Algorithm, r.Algorithm)
		add(r, layout, "in-place", br.InPlace, r.InPlace, br.Algorithm, r.Algorithm)
	}
	for _, k := range baseOrder {
		if !seen[k] {
			r := baseRows[k]
			add(r, layoutOf(base, r), "out-of-place", r.OutOfPlace, nil, r.Algorithm, nil)
			add(r, layoutOf(base, r), "in-place", r.InPlace, nil, r.Algorithm, nil)
		}
	}
	for _, d := range []struct {
		n    int
		side string
	}{{baseDups, baseLabel}, {dups, curLabel}} {
		if d.n > 0 {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s has %d rows that repeat an earlier row (same collective, type, op, root, groups and size); only the first of each was compared", d.side, d.n))
		}
	}
	host := hostDiffers(base, cur)
	host.demoteRows(c)
	c.AlgorithmNotes = algorithmNotes(c.Rows)
	if common == 0 {
		return nil, fmt.Errorf("%w: the baseline holds %s; the current run holds %s; compare runs of the same collective, type and sizes",
			ErrNothingInCommon, Cases(base), Cases(cur))
	}
	c.Shifts = shifts(c.Rows, th)
	host.demoteShifts(c)
	loneRows(c)
	if n := c.Counts[Regressed]; n > 0 {
		c.Reasons = append(c.Reasons, fmt.Sprintf("%d regressed", n))
	}
	slower := 0
	for _, s := range c.Shifts {
		if s.Regressed {
			slower++
		}
	}
	if slower > 0 {
		c.Reasons = append(c.Reasons, fmt.Sprintf("%d band(s) slower as a whole", slower))
	}
	if n := c.Counts[Missing]; n > 0 && !th.AllowMissing {
		c.Reasons = append(c.Reasons, fmt.Sprintf("%d missing", n))
	}
	if th.Strict && len(c.Warnings) > 0 {
		c.Reasons = append(c.Reasons, "machine or library differs (--strict)")
	}
	c.Failed = len(c.Reasons) > 0
	c.unjudged()
	if strings.HasPrefix(c.Baseline.Backend, "cpu") && strings.HasPrefix(c.Current.Backend, "cpu") && c.Counts[Regressed]+c.Counts[Improved]+c.Counts[Inconclusive] > 0 &&
		c.Baseline.Runs <= 1 && !spreadKnown(base) && !spreadKnown(cur) {
		c.Notes = append(c.Notes, "both runs are on the cpu backend, whose times move by tens of percent between identical runs on a shared host: "+
			"record both with --stable (or --cycles 3), gate on a baseline of several runs (collbench baseline make), or widen the thresholds")
	}
	return c, nil
}

func layoutOf(d *results.Document, r results.Row) string {
	if r.Layout != "" {
		return r.Layout
	}
	if len(d.Config.Groups) > 1 {
		return d.Config.RankList
	}
	return "all"
}

func metric(h *results.Half, m string) float64 {
	if m == "busbw" {
		return h.BusBW
	}
	return h.TimeUS
}

// noise is the larger relative spread either side measured: per-iteration
// CV, the spread of a run's cycles (--cycles), or a baseline's spread over
// runs and their cycles.
func noise(hs ...*results.Half) float64 {
	n := 0.0
	for _, h := range hs {
		if h.Iter != nil {
			n = math.Max(n, h.Iter.CV)
		}
		n = math.Max(n, h.Spread)
		n = math.Max(n, h.Cycles.Spread(h.TimeUS))
	}
	return n
}

// algorithmNotes groups each case's regressed sizes into bands of
// consecutive sizes and says for each whether the library's choice of
// algorithm changed there, e.g. "allreduce float sum, 1 MiB-16 MiB:
// NCCL's choice changed: RING/LL128/16ch -> TREE/SIMPLE/16ch".
func algorithmNotes(rows []CompareRow) []string {
	type sizeInfo struct {
		regressed bool
		base, cur string
	}
	type caseInfo struct {
		name  string
		sizes map[int64]*sizeInfo
	}
	var order []string
	cases := map[string]*caseInfo{}
	for _, r := range rows {
		if r.Verdict == Missing || r.Verdict == New {
			continue
		}
		name := caseName(r)
		ci, ok := cases[name]
		if !ok {
			ci = &caseInfo{name: name, sizes: map[int64]*sizeInfo{}}
			cases[name] = ci
			order = append(order, name)
		}
		si, ok := ci.sizes[r.SizeBytes]
		if !ok {
			si = &sizeInfo{base: r.BaselineAlgorithm, cur: r.CurrentAlgorithm}
			ci.sizes[r.SizeBytes] = si
		}
		si.regressed = si.regressed || r.Verdict == Regressed
	}
	var notes []string
	for _, name := range order {
		ci := cases[name]
		var sizes []int64
		for s := range ci.sizes {
			sizes = append(sizes, s)
		}
		sort.Slice(sizes, func(a, b int) bool { return sizes[a] < sizes[b] })
		// Runs of consecutive regressed sizes with the same pair of choices.
		for i := 0; i < len(sizes); {
			si := ci.sizes[sizes[i]]
			if !si.regressed {
				i++
				continue
			}
			j := i
			for j+1 < len(sizes) {
				nx := ci.sizes[sizes[j+1]]
				if !nx.regressed || nx.base != si.base || nx.cur != si.cur {
					break
				}
				j++
			}
			band := words.Bytes(sizes[i])
			if j > i {
				band += "-" + words.Bytes(sizes[j])
			}
			var what string
			switch {
			case si.base == "" && si.cur == "":
				i = j + 1
				continue // nothing to say
			case si.base == "":
				what = "the baseline recorded no algorithm (current: " + si.cur + ")"
			case si.cur == "":
				what = "the current run recorded no algorithm (baseline: " + si.base + ")"
			case si.base != si.cur:
				what = "the algorithm changed: " + si.base + " -> " + si.cur
			default:
				what = "same algorithm (" + si.cur + "): the slowdown is not the library's choice"
			}
			notes = append(notes, fmt.Sprintf("%s, %s regressed: %s", name, band, what))
			i = j + 1
		}
	}
	return notes
}

// trimPct writes a percentage with at most one decimal, none when whole.
func trimPct(v float64) string {
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0")
}

// Cases says what a document measured, case by case with its sizes:
// "allreduce float sum 8 B-4 MiB, allgather float 8 B-4 MiB".
func Cases(d *results.Document) string {
	type span struct{ lo, hi int64 }
	var order []string
	spans := map[string]*span{}
	for _, r := range d.Results {
		k := caseName(CompareRow{Collective: r.Collective, DType: r.DType, Op: r.Op, Root: r.Root, Layout: layoutOf(d, r)})
		x := spans[k]
		if x == nil {
			x = &span{r.SizeBytes, r.SizeBytes}
			spans[k] = x
			order = append(order, k)
		}
		x.lo, x.hi = min(x.lo, r.SizeBytes), max(x.hi, r.SizeBytes)
	}
	if len(order) == 0 {
		return "no rows"
	}
	var parts []string
	for i, k := range order {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(order)-3))
			break
		}
		x := spans[k]
		sz := words.Bytes(x.lo)
		if x.hi != x.lo {
			sz += "-" + words.Bytes(x.hi)
		}
		parts = append(parts, k+" "+sz)
	}
	return strings.Join(parts, ", ")
}

// unjudged says which rows and bands could not be judged, and the smallest
// change they could have caught: the widest allowance of a band judged as
// a whole, or else the median allowance of the rows not judged (one row of
// a few microseconds can spread by hundreds of percent). A comparison with
// nothing failed and something unjudged is inconclusive.
func (c *Comparison) unjudged() {
	var rows []float64
	for _, r := range c.Rows {
		if r.Verdict == Inconclusive {
			rows = append(rows, r.AllowedPct)
		}
	}
	if len(rows) > 0 {
		c.Unjudged = append(c.Unjudged, fmt.Sprintf("%d row(s) changed beyond the threshold where these runs cannot judge it (each row's why says how)", len(rows)))
		c.CatchablePct = math.Round(median(rows)*10) / 10
	}
	bands := 0.0
	for _, s := range c.Shifts {
		if s.Inconclusive {
			bands = math.Max(bands, s.AllowedPct)
			c.Unjudged = append(c.Unjudged, fmt.Sprintf("%s, %s (%s): median %+.1f%%, but these runs can only tell a change beyond %s%% from noise, and %s%% was asked",
				s.Case, s.Band, s.Metric, s.MedianPct, trimPct(s.AllowedPct), trimPct(s.AskedPct)))
		}
	}
	if bands > 0 {
		c.CatchablePct = bands
	}
	c.Inconclusive = !c.Failed && len(c.Unjudged) > 0
}

package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"collbench/internal/golden"
	"collbench/internal/hostload"

	"collbench/results"
)

func cmpDoc(label string, scale float64, cv float64, fp string) *results.Document {
	d := &results.Document{Schema: results.Schema, SchemaVersion: 1, Tool: results.Tool{Name: "collbench", Version: "1.2.3"},
		Started: time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC), Config: results.Config{Ranks: 4}}
	d.Environment.Backend = results.Backend{Name: "nccl", Version: "2.28.3"}
	d.Topology = &results.TopologySummary{Summary: "4x NVIDIA H200; NV18 between all pairs", Fingerprint: fp, GPUs: 4}
	add := func(coll string, size int64, t, bw float64) {
		h := func(t, bw float64) *results.Half {
			out := &results.Half{TimeUS: t, BusBW: bw, AlgBW: bw / 1.5}
			if cv > 0 {
				out.Iter = &results.IterStats{Samples: 20, CV: cv}
			}
			return out
		}
		d.Results = append(d.Results, results.Row{Collective: coll, DType: "float", Op: "sum", Root: -1, SizeBytes: size, Ranks: 4,
			OutOfPlace: h(t, bw), InPlace: h(t*1.01, bw/1.01)})
	}
	add("allreduce", 8, 8.2, 0.001)
	add("allreduce", 64<<10, 11.1*scale, 8.8/scale)
	add("allreduce", 64<<20, 320.5*scale, 314.1/scale)
	add("allgather", 1<<30, 2450, 328)
	_ = label
	return d
}

func TestCompareVerdicts(t *testing.T) {
	base := cmpDoc("base", 1, 0, "aaa")
	cur := cmpDoc("cur", 1.2, 0, "bbb") // 20% slower on two rows
	cur.Results = cur.Results[:3]       // allgather went missing
	cur.Results = append(cur.Results, results.Row{Collective: "alltoall", DType: "float", Op: "none", Root: -1, SizeBytes: 1 << 20,
		OutOfPlace: &results.Half{TimeUS: 20, BusBW: 40}})
	c, err := Compare(base, cur, "baseline.json", "today.json", DefaultThresholds())
	if err != nil {
		t.Fatal(err)
	}
	want := map[Verdict]int{OK: 2, Regressed: 4, Missing: 2, New: 1}
	for v, n := range want {
		if c.Counts[v] != n {
			t.Errorf("%s: %d, want %d (%v)", v, c.Counts[v], n, c.Counts)
		}
	}
	if !c.Failed || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "machine shape differs") {
		t.Fatalf("failed %v warnings %v", c.Failed, c.Warnings)
	}
	formats := map[string]string{"table": "compare.table.golden", "markdown": "compare.md.golden", "junit": "compare.junit.golden", "json": "compare.json.golden"}
	for f, g := range formats {
		var b bytes.Buffer
		if err := WriteComparison(&b, c, f); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, g, b.Bytes())
	}
	var b bytes.Buffer
	if err := WriteComparison(&b, c, "junit"); err != nil {
		t.Fatal(err)
	}
	var suites junitSuites
	if err := xml.Unmarshal(b.Bytes(), &suites); err != nil || suites.Failures != 3 || suites.Tests != 4 {
		t.Fatalf("junit: %v %+v", err, suites)
	}
	if err := WriteComparison(&b, c, "yaml"); err == nil {
		t.Fatal("unknown format accepted")
	}
}

func TestCompareNoiseAllowedMissingAndStrict(t *testing.T) {
	base := cmpDoc("b", 1, 0.08, "aaa")
	cur := cmpDoc("c", 1.12, 0.08, "aaa") // 12% slower, inside twice an 8% CV
	c, err := Compare(base, cur, "b", "c", DefaultThresholds())
	if err != nil || c.Failed || c.Counts[Regressed] != 0 {
		t.Fatalf("noise should absorb the change: %v %+v", err, c.Counts)
	}
	cur.Results = cur.Results[:2]
	th := DefaultThresholds()
	th.AllowMissing = true
	if c, _ := Compare(base, cur, "b", "c", th); c.Failed || c.Counts[Missing] != 4 {
		t.Fatalf("allow-missing: %+v", c)
	}
	cur.Environment.Backend.Version = "2.29.0"
	th.Strict = true
	if c, _ := Compare(base, cur, "b", "c", th); !c.Failed || !strings.Contains(strings.Join(c.Warnings, ";"), "library version differs: baseline nccl 2.28.3, current nccl 2.29.0") {
		t.Fatalf("strict: %+v", c)
	}
	other := cmpDoc("x", 1, 0, "aaa")
	for i := range other.Results {
		other.Results[i].DType = "half"
	}
	if _, err := Compare(base, other, "b", "x", DefaultThresholds()); !errors.Is(err, ErrNothingInCommon) {
		t.Fatalf("nothing in common: %v", err)
	}
	if _, err := Compare(base, cur, "b", "c", Thresholds{}); err == nil {
		t.Fatal("empty thresholds accepted")
	}
}

var svgTextRE = regexp.MustCompile(`<text[^>]*>([^<]*)</text>`)

func svgTexts(svg string) []string {
	var out []string
	for _, m := range svgTextRE.FindAllStringSubmatch(svg, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestPlotsHaveTheExpectedSeries(t *testing.T) {
	base, cur := cmpDoc("b", 1, 0, "f"), cmpDoc("c", 1.1, 0, "f")
	series := []Series{{Label: "today", Doc: cur}, {Label: "baseline", Doc: base}}
	texts := strings.Join(svgTexts(PlotSVG("busbw", "allreduce", series)), "|")
	for _, want := range []string{"today in-place", "today out-of-place", "baseline in-place", "baseline out-of-place", "allreduce: bus bandwidth", "busbw (GB/s)"} {
		if !strings.Contains(texts, want) {
			t.Errorf("busbw plot lacks %q: %s", want, texts)
		}
	}
	if texts := strings.Join(svgTexts(PlotSVG("time", "allreduce", series)), "|"); !strings.Contains(texts, "time (us)") {
		t.Errorf("time plot: %s", texts)
	}
	g := sampleDocument()
	g.Results = []results.Row{{Collective: "allreduce", SizeBytes: 1 << 20, Groups: []results.GroupResult{
		{ID: 0, Ranks: []int{0, 1}, OutOfPlace: &results.Half{BusBW: 70}}, {ID: 1, Ranks: []int{2, 3}, OutOfPlace: &results.Half{BusBW: 72}}}}}
	texts = strings.Join(svgTexts(PlotSVG("groups", "allreduce", []Series{{Label: "run", Doc: g}})), "|")
	if !strings.Contains(texts, "g0 [0,1]") || !strings.Contains(texts, "g1 [2,3]") {
		t.Errorf("group bars: %s", texts)
	}
	if PlotSVG("groups", "allgather", []Series{{Label: "run", Doc: g}}) != "" {
		t.Error("no groups, no bars")
	}
	if _, err := Plot("pie", "allreduce", series); err == nil {
		t.Error("unknown kind accepted")
	}
}

// TestHTMLReportStructure checks the report is self-contained and holds
// the expected sections, tables and plots; the skeleton is golden.
func TestHTMLReportStructure(t *testing.T) {
	base, cur := cmpDoc("b", 1, 0, "f"), cmpDoc("c", 1.3, 0, "f")
	c, err := Compare(base, cur, "baseline.json", "today.json", DefaultThresholds())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	err = WriteHTML(&b, HTMLInput{Title: "nightly", Runs: []Series{{Label: "today", Doc: cur}}, Baseline: &Series{Label: "baseline", Doc: base}, Comparison: c})
	if err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, banned := range []string{"<script", "http://", "https://", "<link", "@import"} {
		onlyW3 := banned == "http://" && strings.Count(html, "http://www.w3.org") == strings.Count(html, "http://")
		if strings.Contains(strings.ToLower(html), banned) && !onlyW3 {
			t.Errorf("report is not self-contained: contains %q", banned)
		}
	}
	// The skeleton: headings, table and plot counts, verdict.
	var skel []string
	for _, m := range regexp.MustCompile(`<(h[123])[^>]*>([^<]*)</h[123]>`).FindAllStringSubmatch(html, -1) {
		skel = append(skel, m[1]+" "+m[2])
	}
	skel = append(skel, "tables "+itoa(strings.Count(html, "<table>")), "svgs "+itoa(strings.Count(html, "<svg")),
		"regressed rows "+itoa(strings.Count(html, `<tr class="regressed">`)))
	verdict := regexp.MustCompile(`<p class="verdict[^"]*">([^<]*)</p>`).FindStringSubmatch(html)
	if verdict == nil {
		t.Fatal("no verdict")
	}
	skel = append(skel, "verdict "+verdict[1])
	golden.Check(t, "report.html.skeleton.golden", []byte(strings.Join(skel, "\n")+"\n"))
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestCompareAlgorithmNotes(t *testing.T) {
	mk := func(scale float64, algo map[int64]string) *results.Document {
		d := &results.Document{Config: results.Config{Ranks: 2}}
		for _, size := range []int64{64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20} {
			s := 1.0
			if size >= 1<<20 && size <= 64<<20 {
				s = scale // the regressed band
			}
			r := results.Row{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: size, Ranks: 2,
				OutOfPlace: &results.Half{TimeUS: float64(size) / 1e4 * s, BusBW: 100 / s}}
			if a, ok := algo[size]; ok {
				p := strings.Split(a, "/")
				r.Algorithm = &results.AlgoChoice{Algo: p[0], Proto: p[1], Channels: p[2]}
			}
			d.Results = append(d.Results, r)
		}
		return d
	}
	before := map[int64]string{64 << 10: "RING/LL/0..1", 1 << 20: "RING/LL128/0..15", 4 << 20: "RING/LL128/0..15",
		16 << 20: "RING/LL128/0..15", 64 << 20: "RING/SIMPLE/0..15", 256 << 20: "RING/SIMPLE/0..15"}
	after := map[int64]string{64 << 10: "RING/LL/0..1", 1 << 20: "TREE/SIMPLE/0..15", 4 << 20: "TREE/SIMPLE/0..15",
		16 << 20: "TREE/SIMPLE/0..15", 64 << 20: "RING/SIMPLE/0..15", 256 << 20: "RING/SIMPLE/0..15"}
	c, err := Compare(mk(1, before), mk(1.3, after), "b", "c", DefaultThresholds())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"allreduce float sum, 1 MiB-16 MiB regressed: the algorithm changed: RING/LL128/16ch -> TREE/SIMPLE/16ch",
		"allreduce float sum, 64 MiB regressed: same algorithm (RING/SIMPLE/16ch): the slowdown is not the library's choice",
	}
	if strings.Join(c.AlgorithmNotes, "\n") != strings.Join(want, "\n") {
		t.Fatalf("notes:\n%s\nwant:\n%s", strings.Join(c.AlgorithmNotes, "\n"), strings.Join(want, "\n"))
	}
	var b bytes.Buffer
	if err := WriteComparison(&b, c, "table"); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "compare-algorithm.table.golden", b.Bytes())
	// Only one side recorded it.
	c, _ = Compare(mk(1, nil), mk(1.3, after), "b", "c", DefaultThresholds())
	if len(c.AlgorithmNotes) == 0 || !strings.Contains(c.AlgorithmNotes[0], "the baseline recorded no algorithm (current: TREE/SIMPLE/16ch)") {
		t.Fatalf("one-sided: %q", c.AlgorithmNotes)
	}
	// Neither: nothing to say.
	c, _ = Compare(mk(1, nil), mk(1.3, nil), "b", "c", DefaultThresholds())
	if len(c.AlgorithmNotes) != 0 {
		t.Fatalf("no algorithms, yet notes: %q", c.AlgorithmNotes)
	}
}

// TestCompareUsesCycleSpread: a run of several cycles carries its own
// noise, which widens what a comparison allows.
func TestCompareUsesCycleSpread(t *testing.T) {
	base := cmpDoc("b", 1, 0, "aaa")
	cur := cmpDoc("c", 1.12, 0, "aaa") // 12% slower
	c, _ := Compare(base, cur, "b", "c", DefaultThresholds())
	if c.Counts[Regressed] == 0 {
		t.Fatal("12% slower without any noise should regress")
	}
	for i := range cur.Results {
		for _, h := range cur.Results[i].Halves() {
			h.Cycles = &results.CycleStats{N: 5, TimeMinUS: h.TimeUS * 0.93, TimeMaxUS: h.TimeUS * 1.07} // ±7%: allowed 14%
		}
	}
	c, _ = Compare(base, cur, "b", "c", DefaultThresholds())
	if c.Counts[Regressed] != 0 || c.Failed {
		t.Fatalf("cycle spread ignored: %+v", c.Counts)
	}
	// 12% is beyond the 5% and 10% thresholds but within the spread: those
	// rows cannot be judged, and the comparison says so.
	if c.Counts[Inconclusive] == 0 || !c.Inconclusive || c.CatchablePct < 14 {
		t.Fatalf("a change within the spread but beyond the threshold should be inconclusive: %+v, catchable %g", c.Counts, c.CatchablePct)
	}
	var out bytes.Buffer
	if err := WriteComparison(&out, c, "table"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "# INCONCLUSIVE (the runs' own spread hides changes below ") || !strings.Contains(out.String(), "# unjudged: 2 row(s) changed beyond the threshold") {
		t.Fatalf("the verdict line does not say it cannot judge:\n%s", out.String())
	}
}

// levelDoc is a --stable run of 16 rows per band whose every cycle moves
// all rows alike by the factors in levels (a host whose speed changes),
// slowed by slow.
func levelDoc(slow float64, levels []float64) *results.Document {
	d := &results.Document{Schema: results.Schema, SchemaVersion: 1, Config: results.Config{Ranks: 4, Stable: true}}
	d.Environment.Backend = results.Backend{Name: "cpu"}
	for i := range 16 {
		for _, size := range []int64{int64(8) << (i % 12), int64(1<<20) << (i % 8)} {
			tm := (float64(size)/1e3 + 10) * slow
			var times []float64
			for _, l := range levels {
				times = append(times, tm*l*(1+0.002*float64(i%3)))
			}
			cs := &results.CycleStats{N: len(times), TimesUS: times, TimeMinUS: slices.Min(times), TimeMaxUS: slices.Max(times)}
			cs.BusBWMin, cs.BusBWMax = 100/(cs.TimeMaxUS/tm*slow), 100/(cs.TimeMinUS/tm*slow)
			d.Results = append(d.Results, results.Row{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: size + int64(i), Ranks: 4,
				OutOfPlace: &results.Half{TimeUS: tm, BusBW: 100 / slow, Cycles: cs}})
		}
	}
	return d
}

// TestCompareSaysInconclusiveWhereTheHostMoved: two runs whose cycles show
// the host's speed moving every row alike by ±20% cannot judge a 10%
// change as a whole, however many rows agree: inconclusive, never FAIL,
// naming what they could catch. Twice as slow is beyond that and fails;
// with steady cycles the same 10% fails; a same-build pair of steady
// runs passes.
func TestCompareSaysInconclusiveWhereTheHostMoved(t *testing.T) {
	moving := []float64{1, 1.2, 0.8, 1.1, 0.9}
	steady := []float64{1, 1.002, 0.998, 1.001, 0.999}
	cases := []struct {
		name                     string
		base, cur                *results.Document
		failed, inconclusive     bool
		catchAtLeast, catchBelow float64
	}{
		{"moving host, 10% slower", levelDoc(1, moving), levelDoc(1.1, moving), false, true, 39, 41},
		{"moving host, twice as slow", levelDoc(1, moving), levelDoc(2, moving), true, false, 0, 100},
		{"steady host, 10% slower", levelDoc(1, steady), levelDoc(1.1, steady), true, false, 0, 1},
		{"steady host, same build", levelDoc(1, steady), levelDoc(1.01, steady), false, false, 0, 1},
	}
	for _, tc := range cases {
		c, err := Compare(tc.base, tc.cur, "a", "b", DefaultThresholds())
		if err != nil {
			t.Fatal(err)
		}
		if c.Failed != tc.failed || c.Inconclusive != tc.inconclusive || c.CatchablePct < tc.catchAtLeast || c.CatchablePct >= tc.catchBelow {
			t.Errorf("%s: failed %v (%v), inconclusive %v (%v), catchable %g; want failed %v inconclusive %v catchable in [%g, %g)",
				tc.name, c.Failed, c.Reasons, c.Inconclusive, c.Unjudged, c.CatchablePct, tc.failed, tc.inconclusive, tc.catchAtLeast, tc.catchBelow)
		}
		if tc.inconclusive {
			var out bytes.Buffer
			if err := WriteComparison(&out, c, "junit"); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out.String(), "<failure") {
				t.Errorf("%s: an inconclusive comparison wrote a junit failure:\n%s", tc.name, out.String())
			}
		}
	}
}

// TestCompareJudgesABandAsAWhole: rows that scatter by up to ±12% each,
// with a spread measured on both sides wide enough that no single row
// regresses, compare as PASS; the same rows each 10% slower fail as a
// band, in the time band and in the busbw band alike.
func TestCompareJudgesABandAsAWhole(t *testing.T) {
	noise := []float64{0.04, -0.08, 0.12, -0.02, 0.07, -0.11, 0.01, 0.09, -0.05, -0.12, 0.03, 0.06, -0.07, 0.10, -0.03, 0.0}
	doc := func(slow float64, jitter bool) *results.Document {
		d := &results.Document{Schema: results.Schema, SchemaVersion: 1, Config: results.Config{Ranks: 4}}
		d.Environment.Backend = results.Backend{Name: "cpu"}
		for i, n := range noise {
			f := slow
			if jitter {
				f *= 1 + n
			}
			for _, size := range []int64{int64(8) << i, int64(1<<20) << (i % 8)} {
				tm := float64(size)/1e3 + 10
				d.Results = append(d.Results, results.Row{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: size + int64(i), Ranks: 4,
					OutOfPlace: &results.Half{TimeUS: tm * f, BusBW: 100 / f, Spread: 0.15}})
			}
		}
		return d
	}
	same, err := Compare(doc(1, false), doc(1, true), "a", "b", DefaultThresholds())
	if err != nil {
		t.Fatal(err)
	}
	if same.Failed || same.Counts[Regressed] != 0 || len(same.Shifts) != 2 {
		t.Fatalf("noise alone: failed %v (%v), %d regressed rows, shifts %+v", same.Failed, same.Reasons, same.Counts[Regressed], same.Shifts)
	}
	slow, err := Compare(doc(1, false), doc(1.10, true), "a", "b", DefaultThresholds())
	if err != nil {
		t.Fatal(err)
	}
	if slow.Counts[Regressed] != 0 {
		t.Fatalf("%d rows regressed on their own: the case does not test the band", slow.Counts[Regressed])
	}
	if !slow.Failed || len(slow.Shifts) != 2 || !slow.Shifts[0].Regressed || !slow.Shifts[1].Regressed {
		t.Fatalf("10%% slower: failed %v (%v), shifts %+v", slow.Failed, slow.Reasons, slow.Shifts)
	}
	var out bytes.Buffer
	if err := WriteComparison(&out, slow, "table"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "# as a whole: allreduce float sum, ") || !strings.Contains(out.String(), "REGRESSED") {
		t.Fatalf("the table does not say which band regressed:\n%s", out.String())
	}
}

// TestCompareSaysInconclusiveWhereTheHostWasShared: a current run during
// which other processes took 45% of the host (the baseline's: 2%) is
// slower for that reason alone; its 30% loss is not judged (never FAIL),
// a loss beyond what the share explains still fails, runs on hosts alike
// are judged as ever, and a baseline that shared its host is judged as it
// is, with a note that a slowdown could hide.
func TestCompareSaysInconclusiveWhereTheHostWasShared(t *testing.T) {
	withLoad := func(d *results.Document, others float64) *results.Document {
		d.Environment.HostLoad = &hostload.Load{OthersPct: others, CPUs: 2}
		return d
	}
	cases := []struct {
		name                 string
		baseLoad, curLoad    float64
		slow                 float64
		failed, inconclusive bool
		want                 string
	}{
		{"current shared, 30% slower", 2, 45, 1.3, false, true, "the current run shared its host: others took 45% of its CPU time against 2%"},
		{"current shared, 5 times slower", 2, 45, 5, true, false, ""},
		{"hosts alike, 30% slower", 40, 45, 1.3, true, false, ""},
		{"baseline shared, same build", 45, 2, 1, false, false, ""},
	}
	for _, tc := range cases {
		c, err := Compare(withLoad(cmpDoc("b", 1, 0, "aaa"), tc.baseLoad), withLoad(cmpDoc("c", tc.slow, 0, "aaa"), tc.curLoad), "b", "c", DefaultThresholds())
		if err != nil {
			t.Fatal(err)
		}
		if tc.baseLoad > tc.curLoad && (len(c.Notes) == 0 || !strings.Contains(c.Notes[0], "the baseline shared its host (others took 45% of its CPU time, 2% during the current run)")) {
			t.Errorf("%s: no note of the baseline's busy host: %q", tc.name, c.Notes)
		}
		if c.Failed != tc.failed || c.Inconclusive != tc.inconclusive || !strings.Contains(strings.Join(c.Unjudged, "\n"), tc.want) {
			t.Errorf("%s: failed %v (%v), inconclusive %v, unjudged %q", tc.name, c.Failed, c.Reasons, c.Inconclusive, c.Unjudged)
		}
	}
}

// TestCompareLoneRowOnNoisyRuns: one row of 16 beyond twice its cycles'
// range, in a band not slower as a whole, is inconclusive where the rows
// spread beyond the threshold (±20% cycles against 10%), and regressed
// where they hold still (±1%).
func TestCompareLoneRowOnNoisyRuns(t *testing.T) {
	doc := func(spread, lone float64) *results.Document {
		d := &results.Document{Schema: results.Schema, SchemaVersion: 1, Config: results.Config{Ranks: 4}}
		d.Environment.Backend = results.Backend{Name: "cpu"}
		for i := range 16 {
			tm := 10.0 + float64(i)
			if i == 7 {
				tm *= lone
			}
			cs := &results.CycleStats{N: 3, TimesUS: []float64{tm * (1 - spread), tm, tm * (1 + spread)}, TimeMinUS: tm * (1 - spread), TimeMaxUS: tm * (1 + spread)}
			d.Results = append(d.Results, results.Row{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: int64(8) << i % (1 << 19), Ranks: 4,
				OutOfPlace: &results.Half{TimeUS: tm, Cycles: cs}})
		}
		return d
	}
	noisy, err := Compare(doc(0.2, 1), doc(0.2, 2), "a", "b", DefaultThresholds())
	if err != nil {
		t.Fatal(err)
	}
	if noisy.Failed || !noisy.Inconclusive || noisy.Counts[Inconclusive] != 1 {
		t.Errorf("noisy runs: failed %v (%v), inconclusive %v, counts %v", noisy.Failed, noisy.Reasons, noisy.Inconclusive, noisy.Counts)
	}
	still, _ := Compare(doc(0.01, 1), doc(0.01, 2), "a", "b", DefaultThresholds())
	if !still.Failed || still.Counts[Regressed] != 1 {
		t.Errorf("steady runs: failed %v, counts %v: a lone row twice as slow must regress", still.Failed, still.Counts)
	}
}

// TestCompareOneModeRowsOnNoisyRuns: on noisy runs, rows that regressed in
// one mode while their other mode at the same size held still (3 of 16
// sizes, scattered) are inconclusive; on steady runs they regress.
func TestCompareOneModeRowsOnNoisyRuns(t *testing.T) {
	doc := func(spread float64, slow bool) *results.Document {
		d := &results.Document{Schema: results.Schema, SchemaVersion: 1, Config: results.Config{Ranks: 4}}
		d.Environment.Backend = results.Backend{Name: "cpu"}
		half := func(tm float64) *results.Half {
			cs := &results.CycleStats{N: 3, TimesUS: []float64{tm * (1 - spread), tm, tm * (1 + spread)}, TimeMinUS: tm * (1 - spread), TimeMaxUS: tm * (1 + spread)}
			return &results.Half{TimeUS: tm, Cycles: cs}
		}
		for i := range 16 {
			tm := 10.0 + float64(i)
			ip := tm
			if slow && i%5 == 2 {
				ip *= 2 // in-place only
			}
			d.Results = append(d.Results, results.Row{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: int64(8) << i, Ranks: 4,
				OutOfPlace: half(tm), InPlace: half(ip)})
		}
		return d
	}
	noisy, _ := Compare(doc(0.2, false), doc(0.2, true), "a", "b", DefaultThresholds())
	if noisy.Failed || noisy.Counts[Inconclusive] != 3 {
		t.Errorf("noisy runs: failed %v (%v), counts %v", noisy.Failed, noisy.Reasons, noisy.Counts)
	}
	still, _ := Compare(doc(0.01, false), doc(0.01, true), "a", "b", DefaultThresholds())
	if !still.Failed || still.Counts[Regressed] != 3 {
		t.Errorf("steady runs: failed %v, counts %v", still.Failed, still.Counts)
	}
}

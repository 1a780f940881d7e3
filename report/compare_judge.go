package report

import (
	"fmt"
	"math"

	"collbench/results"
)

// minShiftRows is the fewest rows a band needs to be judged as a whole.
const minShiftRows = 4

// judgeRow judges one mode of a row against the baseline's (b, ba: the
// baseline's half and algorithm; k, ka: the current run's); false when
// neither side has the mode.
//
// A change beyond the threshold but within twice the runs' own measured
// spread is inconclusive: those runs could not tell it from noise, and a
// same-build pair must never read as a regression.
func judgeRow(th Thresholds, r results.Row, layout, mode string, b, k *results.Half, ba, ka *results.AlgoChoice) (CompareRow, bool) {
	band, label := th.band(r.SizeBytes)
	cr := CompareRow{Collective: r.Collective, DType: r.DType, Op: r.Op, Root: r.Root, Layout: layout,
		SizeBytes: r.SizeBytes, Mode: mode, Band: label, Metric: band.Metric}
	if ba != nil {
		cr.BaselineAlgorithm = ba.String()
	}
	if ka != nil {
		cr.CurrentAlgorithm = ka.String()
	}
	switch {
	case b == nil && k == nil:
		return cr, false
	case k == nil:
		cr.Verdict = Missing
		cr.Baseline = metric(b, band.Metric)
		cr.Why = "not in the current run"
	case b == nil:
		cr.Verdict = New
		cr.Current = metric(k, band.Metric)
		cr.Why = "not in the baseline"
	default:
		cr.Baseline, cr.Current = metric(b, band.Metric), metric(k, band.Metric)
		cr.SpreadPct = math.Round(200*noise(b, k)*100) / 100
		cr.AllowedPct = math.Max(band.Pct, cr.SpreadPct)
		cr.Verdict = OK
		if cr.Baseline <= 0 {
			cr.Why = "the baseline is 0: nothing to compare against"
			break
		}
		// The delta is the metric's own change; a better run has more
		// bandwidth or less time.
		cr.DeltaPct = math.Round((cr.Current-cr.Baseline)/cr.Baseline*1e4) / 100
		gain := cr.DeltaPct
		if band.Metric != "busbw" {
			gain = -gain
		}
		floorOK := band.Metric == "busbw" || math.Abs(cr.Current-cr.Baseline) > band.FloorUS
		switch {
		case gain < -cr.AllowedPct && floorOK:
			cr.Verdict = Regressed
		case gain < -band.Pct && floorOK:
			cr.Verdict = Inconclusive
		case gain > cr.AllowedPct && floorOK:
			cr.Verdict = Improved
		}
		cr.Why = why(band, cr, gain, floorOK)
	}
	return cr, true
}

// shifts judges each case's bands as a whole: the median change of the
// band's rows against half the row threshold, widened to three standard
// errors of that median where the rows' changes scatter, and to twice the
// spread of the band's own level over either run's cycles (bandLevelSpread)
// where the runs repeated their sweep: a host whose speed moves moves
// every row of a cycle alike, and that part of the noise does not shrink
// with the number of rows. Where what the band could catch is wider than
// the row threshold and the band did not clearly improve, it is
// inconclusive: a change of the size asked for could hide there (unless
// one of its rows regressed on its own).
func shifts(rows []CompareRow, th Thresholds) []Shift {
	type key struct{ name, band string }
	var order []key
	groups := map[key][]CompareRow{}
	for _, r := range rows {
		if r.Verdict == Missing || r.Verdict == New || r.Baseline <= 0 {
			continue
		}
		k := key{caseName(r), r.Band}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var out []Shift
	for _, k := range order {
		rs := groups[k]
		if len(rs) < minShiftRows {
			continue
		}
		gains := make([]float64, len(rs))
		var baseCyc, curCyc [][]float64
		rowRegressed := false
		for i, r := range rs {
			rowRegressed = rowRegressed || r.Verdict == Regressed
			gains[i] = r.DeltaPct
			if r.Metric != "busbw" {
				gains[i] = -r.DeltaPct
			}
			baseCyc, curCyc = append(baseCyc, r.baseCycles), append(curCyc, r.curCycles)
		}
		med := median(gains)
		dev := make([]float64, len(gains))
		for i, g := range gains {
			dev[i] = math.Abs(g - med)
		}
		// The standard error of a median of n values whose spread is
		// estimated robustly (1.4826 MAD), times three.
		se := 1.2533 * 1.4826 * median(dev) / math.Sqrt(float64(len(gains)))
		band, _ := th.band(rs[0].SizeBytes)
		level := 200 * math.Max(bandLevelSpread(baseCyc), bandLevelSpread(curCyc))
		allowed := math.Max(math.Max(band.Pct/2, 3*se), level)
		s := Shift{Case: k.name, Band: sizeSpan(rs), label: k.band, Metric: rs[0].Metric, Rows: len(rs), AskedPct: band.Pct,
			MedianPct: math.Round(med*100) / 100, AllowedPct: math.Round(allowed*100) / 100, Regressed: med < -allowed}
		// A band with a regressed row has its verdict already.
		s.Inconclusive = !s.Regressed && !rowRegressed && allowed > band.Pct && med < allowed
		out = append(out, s)
	}
	return out
}

// loneRows makes inconclusive the regressed rows of a band that is not
// slower as a whole, where the band's rows typically spread beyond the
// threshold, that such runs cannot single out: a lone one (one, or one in
// 20), or one whose other mode at the same size (in-place against
// out-of-place, the same algorithm) did not regress. On two busy cores a
// same-build pair had single rows beyond twice their own cycles' range,
// one mode at a time. On runs whose rows hold still, every regressed row
// still fails.
func loneRows(c *Comparison) {
	type at struct {
		size int64
		mode string
	}
	for i, s := range c.Shifts {
		if s.Regressed {
			continue
		}
		var idx []int
		var spreads []float64
		verdict := map[at]Verdict{}
		for j, r := range c.Rows {
			if caseName(r) == s.Case && r.Band == s.label && r.Verdict != Missing && r.Verdict != New {
				spreads = append(spreads, r.SpreadPct)
				verdict[at{r.SizeBytes, r.Mode}] = r.Verdict
				if r.Verdict == Regressed {
					idx = append(idx, j)
				}
			}
		}
		if len(idx) == 0 || median(spreads) <= s.AskedPct {
			continue
		}
		lone := len(idx) <= max(1, len(spreads)/20)
		for _, j := range idx {
			r := c.Rows[j]
			other := map[string]string{"in-place": "out-of-place", "out-of-place": "in-place"}[r.Mode]
			twin, measured := verdict[at{r.SizeBytes, other}]
			why := ""
			switch {
			case lone:
				why = "a lone row"
			case measured && twin != Regressed && twin != Inconclusive:
				why = "its " + other + " twin did not move beyond the threshold"
			default:
				continue
			}
			c.Rows[j].Verdict = Inconclusive
			c.Rows[j].Why += fmt.Sprintf("; %s, in a band not slower as a whole whose rows spread by %s %% (median)", why, trimPct(median(spreads)))
			c.Counts[Regressed]--
			c.Counts[Inconclusive]++
			c.Shifts[i].Inconclusive = true
		}
	}
}

// cycleTimes is a half's cycle times, nil where it has none.
func cycleTimes(h *results.Half) []float64 {
	if h == nil || h.Cycles == nil || len(h.Cycles.TimesUS) < 2 {
		return nil
	}
	return h.Cycles.TimesUS
}

// bandLevelSpread is how far a band's level moved between the cycles of
// one run: for each cycle, the median over the band's rows of that cycle's
// time against the row's median time; then the half-range of those levels
// around their median. 0 where fewer than minShiftRows rows share a cycle
// count.
func bandLevelSpread(rows [][]float64) float64 {
	n := 0
	counts := map[int]int{}
	for _, c := range rows {
		if len(c) >= 2 {
			counts[len(c)]++
			if counts[len(c)] > counts[n] {
				n = len(c)
			}
		}
	}
	if counts[n] < minShiftRows {
		return 0
	}
	levels := make([]float64, n)
	for i := range n {
		var ratios []float64
		for _, c := range rows {
			if len(c) == n {
				if m := median(c); m > 0 {
					ratios = append(ratios, c[i]/m)
				}
			}
		}
		levels[i] = median(ratios)
	}
	lo, hi := levels[0], levels[0]
	for _, l := range levels {
		lo, hi = math.Min(lo, l), math.Max(hi, l)
	}
	if m := median(levels); m > 0 {
		return (hi - lo) / 2 / m
	}
	return 0
}

// why says in words what decided a compared row's verdict.
func why(band Band, cr CompareRow, gain float64, floorOK bool) string {
	change := "rose"
	if cr.DeltaPct < 0 {
		change = "fell"
	}
	what := "time"
	if band.Metric == "busbw" {
		what = "busbw"
	}
	limit := fmt.Sprintf("the %s %% threshold", trimPct(band.Pct))
	if cr.AllowedPct > band.Pct {
		limit = fmt.Sprintf("measured noise ±%s %%", trimPct(cr.AllowedPct))
	}
	switch {
	case math.Abs(gain) > cr.AllowedPct && !floorOK:
		return fmt.Sprintf("within the %s µs floor (%s %s by %.2f µs)", trimPct(band.FloorUS), what, change, math.Abs(cr.Current-cr.Baseline))
	case cr.Verdict == Inconclusive:
		return fmt.Sprintf("%s %s %s %% (beyond the %s %% threshold, within the runs' own spread ±%s %%: they cannot tell a change below %s %% from noise)",
			what, change, trimPct(math.Abs(cr.DeltaPct)), trimPct(band.Pct), trimPct(cr.AllowedPct), trimPct(cr.AllowedPct))
	case cr.Verdict == OK:
		return "within " + limit
	case band.Metric == "time":
		return fmt.Sprintf("%s %s %s %% (beyond %s and the %s µs floor)", what, change, trimPct(math.Abs(cr.DeltaPct)), limit, trimPct(band.FloorUS))
	}
	return fmt.Sprintf("%s %s %s %% (beyond %s)", what, change, trimPct(math.Abs(cr.DeltaPct)), limit)
}

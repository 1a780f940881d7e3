package measure

import (
	"slices"

	"collbench/results"
)

// mergeCycles merges a row's measurements over cycles: the reported half
// is the median cycle's, with every cycle's time, the range of times and
// bus bandwidths, and the wrong elements of every cycle.
func mergeCycles(rows []results.Row) results.Row {
	out := rows[len(rows)-1]
	pick := func(get func(results.Row) *results.Half) *results.Half {
		var hs []*results.Half
		for _, r := range rows {
			if h := get(r); h != nil {
				hs = append(hs, h)
			}
		}
		return mergeHalves(hs)
	}
	out.OutOfPlace = pick(func(r results.Row) *results.Half { return r.OutOfPlace })
	out.InPlace = pick(func(r results.Row) *results.Half { return r.InPlace })
	if len(out.Groups) > 0 {
		gs := append([]results.GroupResult(nil), out.Groups...)
		for gi := range gs {
			gs[gi].OutOfPlace = pick(func(r results.Row) *results.Half { return r.Groups[gi].OutOfPlace })
			gs[gi].InPlace = pick(func(r results.Row) *results.Half { return r.Groups[gi].InPlace })
		}
		out.Groups = gs
	}
	return out
}

func mergeHalves(hs []*results.Half) *results.Half {
	if len(hs) == 0 {
		return nil
	}
	order := make([]int, len(hs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpFloat(hs[a].TimeUS, hs[b].TimeUS) })
	med := *hs[order[(len(order)-1)/2]]
	st := &results.CycleStats{N: len(hs), TimeMinUS: hs[order[0]].TimeUS, TimeMaxUS: hs[order[len(order)-1]].TimeUS,
		BusBWMin: hs[order[len(order)-1]].BusBW, BusBWMax: hs[order[0]].BusBW}
	var wrong *int64
	var bad []results.Mismatch
	for _, h := range hs {
		st.TimesUS = append(st.TimesUS, h.TimeUS)
		if h.Wrong != nil {
			if wrong == nil {
				wrong = new(int64)
			}
			*wrong += *h.Wrong
		}
		if len(bad) < mismatchLimit {
			bad = append(bad, h.Mismatches...)
		}
	}
	med.Wrong, med.Mismatches, med.Cycles = wrong, bad, st
	med.Bitwise = mergeBits(hs)
	return &med
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

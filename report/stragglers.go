package report

import (
	"fmt"

	"collbench/internal/words"
	"collbench/results"
)

// stragglerLine names the rank that was slowest most often, with its host,
// over the rows of at least 1 MiB (all rows when there are none).
func stragglerLine(rows []results.Row, comms []results.CommInfo) string {
	const band = 1 << 20
	var halves []*results.Half
	scope := "at >= 1 MiB"
	for _, big := range []bool{true, false} {
		if !big {
			scope = "over all sizes"
		}
		for _, r := range rows {
			if big && r.SizeBytes < band {
				continue
			}
			for _, h := range r.Halves() {
				if len(h.RankTimeUS) > 1 {
					halves = append(halves, h)
				}
			}
		}
		if len(halves) > 0 {
			break
		}
	}
	if len(halves) == 0 {
		return ""
	}
	wins := map[int]int{}
	excess := map[int]float64{}
	for _, h := range halves {
		slow, sum := 0, 0.0
		for i, t := range h.RankTimeUS {
			sum += t
			if t > h.RankTimeUS[slow] {
				slow = i
			}
		}
		mean := sum / float64(len(h.RankTimeUS))
		wins[slow]++
		if mean > 0 {
			excess[slow] += h.RankTimeUS[slow]/mean - 1
		}
	}
	worst := -1
	for r, n := range wins {
		if worst < 0 || n > wins[worst] || (n == wins[worst] && r < worst) {
			worst = r
		}
	}
	if by := excess[worst] / float64(wins[worst]) * 100; by < 1 {
		return fmt.Sprintf("# slowest rank:      none stands out: every rank within 1%% of the ranks' mean in %d measurements %s", len(halves), scope)
	}
	host := ""
	if worst < len(comms) && comms[worst].Host != "" {
		host = " on " + comms[worst].Host
	}
	return fmt.Sprintf("# slowest rank:      %d%s, slowest in %d of %d measurements %s, by %.1f%% over the ranks' mean",
		worst, host, wins[worst], len(halves), scope, excess[worst]/float64(wins[worst])*100)
}

// movesData reports whether any row moved data between ranks: false only
// when every row ran in groups of one rank.
func movesData(rows []results.Row) bool {
	for _, r := range rows {
		if len(r.Groups) == 0 || !r.OneRank() {
			return true
		}
	}
	return false
}

// lateKernel names the rank whose kernel started last in the recorded
// half and by how much after the earliest, on GPU timers aligned to the
// host's clock ("3 +12.5": rank 3, 12.5 µs late), or, where no rank is
// later than the alignment's error, that error ("±2.1"); "" when nothing
// was recorded or the clocks could not be compared. ranks maps the half's
// rank order to world ranks (nil: the same).
func lateKernel(o, i *results.Half, ranks []int) string {
	l, ok := lateOf(o, i, ranks)
	switch {
	case !ok:
		return ""
	case l.late:
		return fmt.Sprintf("%d +%s", l.rank, trimFloat(l.by))
	}
	return "±" + trimFloat(l.err)
}

// lateness is a recorded half's latest kernel start.
type lateness struct {
	rank    int
	by, err float64 // µs after the earliest; the clocks' error on that
	late    bool    // by exceeds err
	// call is when the latest rank called the operation after the
	// earliest rank's call, on the host's clock alone (µs); -1 unknown.
	call float64
}

// lateOf finds the half's latest kernel start (the first half recorded of
// o and i), where the ranks' clocks were aligned.
func lateOf(o, i *results.Half, ranks []int) (lateness, bool) {
	for _, h := range []*results.Half{o, i} {
		if h == nil || h.Kernels == nil || len(h.Kernels.StartUS) < 2 || len(h.Kernels.ClockErrorUS) != len(h.Kernels.StartUS) {
			continue
		}
		k := h.Kernels
		at, first := -1, -1
		for r, s := range k.StartUS {
			if s < 0 {
				continue
			}
			if at < 0 || s > k.StartUS[at] {
				at = r
			}
			if first < 0 || s < k.StartUS[first] {
				first = r
			}
		}
		if at < 0 {
			continue
		}
		l := lateness{rank: at, by: k.StartUS[at] - k.StartUS[first], err: k.ClockErrorUS[at] + k.ClockErrorUS[first], call: -1}
		l.late = l.by > l.err
		if len(k.EnqueueUS) == len(k.StartUS) {
			l.call = k.EnqueueUS[at]
		}
		if !l.late {
			// No rank stands out: the error of the least certain pair.
			for _, e := range k.ClockErrorUS {
				l.err = max(l.err, e+k.ClockErrorUS[first])
			}
		}
		if at < len(ranks) {
			l.rank = ranks[at]
		}
		return l, true
	}
	return lateness{}, false
}

// ranksOf is the world ranks of the group a table line stands for ("" or
// "sum": nil, the row's own order).
func ranksOf(r results.Row, label string) []int {
	for _, g := range r.Groups {
		if label == fmt.Sprintf("%d %s", g.ID, words.Group(g.Ranks)) {
			return g.Ranks
		}
	}
	return nil
}

// trimFloat writes a time in µs to a tenth, or whole above 100.
func trimFloat(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// lateLine says which rank's kernel started last most often over the
// rows the library recorded, beyond the clocks' alignment error, and by
// how much at most in its own rows; the other ranks' late rows are
// counted, with the latest of them: one line, whatever the ranks.
func lateLine(rows []results.Row) string {
	count := map[int]int{}
	recorded, late := 0, 0
	// errMax is the widest error of every recorded row; most and lateErr
	// are each late rank's latest start and widest error in the rows it
	// was late in: "beyond an error of at most" speaks of those alone.
	errMax := 0.0
	most, lateErr := map[int]float64{}, map[int]float64{}
	// calls is each late rank's latest call of the operation in the rows
	// it was late in, where known (host clock: no GPU timer in it).
	calls := map[int]float64{}
	for _, r := range rows {
		l, ok := lateOf(r.OutOfPlace, r.InPlace, nil)
		if !ok {
			continue
		}
		recorded++
		errMax = max(errMax, l.err)
		if !l.late {
			continue
		}
		late++
		count[l.rank]++
		most[l.rank] = max(most[l.rank], l.by)
		lateErr[l.rank] = max(lateErr[l.rank], l.err)
		if l.call >= 0 {
			calls[l.rank] = max(calls[l.rank], l.call)
		}
	}
	if recorded == 0 {
		return ""
	}
	if late == 0 {
		return fmt.Sprintf("# late kernel:       none in %d recorded rows: every rank's kernel started within the clocks' alignment error (at most ±%s us; GPU timers aligned to the host clock)",
			recorded, trimFloat(errMax))
	}
	top, n := -1, 0
	for r, c := range count {
		if c > n || (c == n && r < top) {
			top, n = r, c
		}
	}
	line := fmt.Sprintf("# late kernel:       rank %d started last in %d of %d recorded rows, at most %s us after the earliest rank (GPU timers aligned to the host clock; beyond an error of at most ±%s us)",
		top, n, recorded, trimFloat(most[top]), trimFloat(lateErr[top]))
	if c, ok := calls[top]; ok {
		// The call needs no GPU timer: late with it, the issuing was;
		// on time, the GPU (or its timer's alignment) was.
		line += fmt.Sprintf("; it called the operation at most %s us after the earliest rank's call", trimFloat(c))
	}
	if others := late - n; others > 0 {
		// The latest of the other ranks' late starts, so a rank late
		// once by far more than the named one is not hidden.
		worst := -1
		for r, by := range most {
			if r != top && (worst < 0 || by > most[worst] || (by == most[worst] && r < worst)) {
				worst = r
			}
		}
		line += fmt.Sprintf("; other ranks started last in %d more (the latest rank %d, %s us after the earliest", others, worst, trimFloat(most[worst]))
		if c, ok := calls[worst]; ok {
			line += fmt.Sprintf(", its call at most %s us after", trimFloat(c))
		}
		line += ")"
	}
	return line
}

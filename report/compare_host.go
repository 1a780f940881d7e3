package report

import (
	"fmt"
	"math"

	"collbench/results"
)

// hostTolerance is how much more of the host (in share of its CPU time)
// others may take in one run than in the other before the two are no
// longer alike: beyond it, a slowdown the difference explains is not
// judged.
const hostTolerance = 0.10

// hostShift is how the two runs' hosts differed: the share of the host's
// CPU time other processes and steal took in each (-1 unknown), and the
// loss in percent that the busier side's share explains (twice a share s
// stretching a run by 1/(1-s): the scheduler's cost on top).
type hostShift struct {
	base, cur float64
	explained float64
}

func hostShare(d *results.Document) float64 {
	l := d.Environment.HostLoad
	if l == nil {
		return -1
	}
	return (l.OthersPct + l.StealPct) / 100
}

// hostDiffers compares what others took of each run's host.
func hostDiffers(base, cur *results.Document) hostShift {
	h := hostShift{base: hostShare(base), cur: hostShare(cur)}
	if h.base < 0 || h.cur < 0 || math.Abs(h.cur-h.base) <= hostTolerance {
		return h
	}
	s := math.Min(math.Max(h.base, h.cur), 0.9)
	h.explained = math.Round(200*(1/(1-s)-1)*10) / 10
	return h
}

func (h hostShift) pct(v float64) string { return trimPct(math.Round(v*1000) / 10) }

// demoteRows makes inconclusive each regressed row whose loss the current
// run's busier host explains, and says so. Where the baseline's host was
// the busier, a slowdown could hide behind its slowness: a note says so,
// and the rows are judged as they are (they can only err towards PASS).
func (h hostShift) demoteRows(c *Comparison) {
	if h.explained == 0 {
		return
	}
	if h.base > h.cur {
		c.Notes = append(c.Notes, fmt.Sprintf("the baseline shared its host (others took %s%% of its CPU time, %s%% during the current run): a slowdown of up to %s%% could hide behind it",
			h.pct(h.base), h.pct(h.cur), trimPct(h.explained)))
		return
	}
	n := 0
	for i, r := range c.Rows {
		if r.Verdict == Regressed && math.Abs(r.DeltaPct) <= h.explained {
			c.Rows[i].Verdict = Inconclusive
			c.Rows[i].AllowedPct = math.Max(r.AllowedPct, h.explained)
			c.Rows[i].Why += fmt.Sprintf("; the current run shared its host (others took %s%% of its CPU time), which explains a loss of up to %s%%", h.pct(h.cur), trimPct(h.explained))
			c.Counts[Regressed]--
			c.Counts[Inconclusive]++
			n++
		}
	}
	if n > 0 {
		c.Unjudged = append(c.Unjudged, fmt.Sprintf("the current run shared its host: others took %s%% of its CPU time against %s%% during the baseline, which explains a loss of up to %s%% (%d regressed row(s) not judged)",
			h.pct(h.cur), h.pct(h.base), trimPct(h.explained), n))
	}
}

// demoteShifts does the same for bands slower as a whole.
func (h hostShift) demoteShifts(c *Comparison) {
	if h.explained == 0 || h.base > h.cur {
		return
	}
	for i, s := range c.Shifts {
		if s.Regressed && -s.MedianPct <= h.explained {
			c.Shifts[i].Regressed, c.Shifts[i].Inconclusive = false, true
			c.Shifts[i].AllowedPct = math.Max(s.AllowedPct, h.explained)
		}
	}
}

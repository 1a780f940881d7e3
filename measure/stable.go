package measure

import (
	"fmt"
	"math"
	"slices"

	"collbench/results"
)

// StableMinCycles and StableTolerance define a stable sweep (Plan.Stable):
// at least StableMinCycles cycles, ended by the second cycle in a row that
// moved no row's median time by more than StableTolerance (relative).
// StableMaxCycles is the bound when the plan sets none.
const (
	StableMinCycles = 3
	StableMaxCycles = 10
	StableTolerance = 0.02
)

// cycleMedian is the median of a half's cycle times (the mean of the two
// middle ones for an even count), or its time before a second cycle.
func cycleMedian(h *results.Half) float64 {
	if h.Cycles == nil || len(h.Cycles.TimesUS) == 0 {
		return h.TimeUS
	}
	ts := slices.Sorted(slices.Values(h.Cycles.TimesUS))
	n := len(ts)
	return (ts[(n-1)/2] + ts[n/2]) / 2
}

// settled records each row's median times after a cycle in prev and says
// whether the sweep is stable, or at its bound. Rank 0 decides (it holds
// every rank's figures); the other processes follow.
func (rn *Runner) settled(rows []results.Row, prev [][]float64, done, bound int) (bool, error) {
	moved := 0.0
	for i, r := range rows {
		var now []float64
		for k, h := range r.Halves() {
			med := cycleMedian(h)
			now = append(now, med)
			if k < len(prev[i]) && prev[i][k] > 0 {
				moved = max(moved, math.Abs(med-prev[i][k])/prev[i][k])
			}
		}
		prev[i] = now
	}
	still := done > 1 && moved <= StableTolerance
	stop := done >= StableMinCycles && still && rn.stillBefore
	rn.stillBefore = still
	if err := Agree(ControlOf(rn.w), &stop); err != nil {
		return false, fmt.Errorf("agreeing whether the sweep is stable: %w", err)
	}
	switch {
	case stop:
		rn.StableNote = fmt.Sprintf("stable after %d cycles: the last two moved no row's median time by more than %.3g%%", done, StableTolerance*100)
	case done >= bound:
		rn.StableNote = fmt.Sprintf("not stable after %d cycles, the bound (--cycles): the last moved a row's median time by %.3g%%", done, moved*100)
	}
	return stop, nil
}

package doctor

import (
	"fmt"

	"collbench/internal/words"
	"collbench/measure"
)

// confirmCross measures the slow pairs across hosts again, only them, in
// rounds of disjoint pairs, up to confirmAttempts times; one attempt that
// is not slow clears a pair. A rank in several slow pairs (its NIC, most
// likely) would need a round per pair, as pairs of a round are disjoint:
// it is measured again with one of them, a different one each attempt,
// and its other pairs stand by that one while it is slow. A fine
// representative clears only itself: a pair is cleared by its own figure,
// never by another pair's (on a loaded host a healthy pair can be a
// suspect beside a slow one), so the pairs it stood for are measured
// themselves, in a later attempt or at the end. The rounds stay few
// however many pairs one bad part slows. It returns the pairs still slow,
// with why and their peers' figure; step counts the rounds for progress.
func (d *search) confirmCross(ids []crossID, why []string, peers []float64, step *int) ([]crossID, []string, []float64, error) {
	self := map[crossID]bool{}   // measured itself again at least once
	backed := map[crossID]bool{} // stood by a slow representative, last time
	for attempt := 0; attempt < confirmAttempts && len(ids) > 0; attempt++ {
		repOf := representatives(ids, attempt, d.crossRank)
		var reps []int
		for i := range ids {
			if repOf[i] == i {
				reps = append(reps, i)
			}
		}
		slow, err := d.measureCross(ids, peers, reps, step)
		if err != nil {
			return nil, nil, nil, err
		}
		keep, measured, stood := confirmStep(repOf, slow)
		for i, c := range ids {
			self[c] = self[c] || measured[i]
			if !measured[i] {
				backed[c] = stood[i]
			}
		}
		if ids, why, peers, err = d.keepCross(ids, why, peers, keep); err != nil {
			return nil, nil, nil, err
		}
	}
	// Pairs never measured themselves whose representative turned out
	// fine are measured themselves, once. Only rank 0 knows which
	// representatives were slow: every process takes its list.
	var alone []int
	if d.rank0 {
		for i, c := range ids {
			if !self[c] && !backed[c] {
				alone = append(alone, i)
			}
		}
	}
	if err := d.agree(&alone); err != nil {
		return nil, nil, nil, err
	}
	if len(alone) == 0 {
		return ids, why, peers, nil
	}
	slow, err := d.measureCross(ids, peers, alone, step)
	if err != nil {
		return nil, nil, nil, err
	}
	keep := make([]bool, len(ids))
	for i := range ids {
		keep[i] = self[ids[i]] || backed[ids[i]] || slow[i]
	}
	return d.keepCross(ids, why, peers, keep)
}

// confirmStep is one attempt of confirmCross: given each pair's
// representative (itself when measured itself) and which representatives
// were slow, it says which pairs stay suspects, which were measured
// themselves, and which stood by a slow representative. A pair goes only
// on its own figure: a fine representative clears itself alone.
func confirmStep(repOf []int, slow map[int]bool) (keep, measured, stood []bool) {
	keep, measured, stood = make([]bool, len(repOf)), make([]bool, len(repOf)), make([]bool, len(repOf))
	for i, r := range repOf {
		measured[i] = r == i
		stood[i] = r != i && slow[r]
		keep[i] = r != i || slow[i]
	}
	return keep, measured, stood
}

// measureCross measures the pairs ids[which] again, in rounds of disjoint
// pairs, and says (on rank 0) which of them are still slow against their
// peers' figure.
func (d *search) measureCross(ids []crossID, peers []float64, which []int, step *int) (map[int]bool, error) {
	var again [][]int // indexes into ids, per round of disjoint pairs
	var placed [][][2]int
	for _, i := range which {
		c := ids[i]
		p := [2]int{d.crossRank(c, 0), d.crossRank(c, 1)}
		k := 0
		for k < len(placed) && touches(placed[k], p) {
			k++
		}
		if k == len(placed) {
			placed, again = append(placed, nil), append(again, nil)
		}
		placed[k], again[k] = append(placed[k], p), append(again[k], i)
	}
	slow := map[int]bool{}
	for k, round := range placed {
		groups := make([][]int, len(round))
		for i, p := range round {
			groups[i] = []int{p[0], p[1]}
		}
		l := d.layout(groups)
		hs, err := d.measureSplit(l, measure.SendRecv, []int64{d.o.BWSize}, "host")
		if err != nil {
			return nil, err
		}
		d.step("host", *step, l, fmt.Sprintf("slow pairs across hosts again: sendrecv both ways at %s", words.Bytes(d.o.BWSize)))
		*step++
		if d.rank0 {
			for gi, i := range again[k] {
				drop := d.o.Thresholds.For(crossClass(ids[i])).Drop
				if h := hs[0][gi]; h != nil && h.BusBW < peers[i]*(1-drop) {
					slow[i] = true
				}
			}
		}
	}
	return slow, nil
}

// keepCross keeps the pairs rank 0 marks, and every process follows.
func (d *search) keepCross(ids []crossID, why []string, peers []float64, keep []bool) ([]crossID, []string, []float64, error) {
	type kept struct {
		IDs   []crossID `json:"c"`
		Why   []string  `json:"w"`
		Peers []float64 `json:"p"`
	}
	var k kept
	if d.rank0 {
		for i := range ids {
			if keep[i] {
				k.IDs, k.Why, k.Peers = append(k.IDs, ids[i]), append(k.Why, why[i]), append(k.Peers, peers[i])
			}
		}
	}
	if err := d.agree(&k); err != nil {
		return nil, nil, nil, err
	}
	return k.IDs, k.Why, k.Peers, nil
}

// representatives maps each slow pair to the pair measured again in its
// stead (itself, for most): the pairs of a rank in several slow pairs all
// map to one of them, the attempt-th (cyclically).
func representatives(ids []crossID, attempt int, rank func(crossID, int) int) []int {
	of := map[int][]int{} // rank -> indexes of its slow pairs
	for i, c := range ids {
		for side := 0; side < 2; side++ {
			r := rank(c, side)
			of[r] = append(of[r], i)
		}
	}
	rep := make([]int, len(ids))
	for i, c := range ids {
		rep[i] = i
		for side := 0; side < 2; side++ {
			if ps := of[rank(c, side)]; len(ps) > 1 {
				rep[i] = ps[attempt%len(ps)]
				break
			}
		}
	}
	// A representative must stand for itself.
	for i := range rep {
		if rep[rep[i]] != rep[i] {
			rep[i] = i
		}
	}
	return rep
}

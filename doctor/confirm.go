package doctor

import (
	"fmt"
	"strings"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/rules"
	"collbench/internal/words"
	"collbench/measure"
)

// confirmCross measures the slow pairs across hosts again until each is
// cleared by a figure that is not slow or has enough slow ones that chance
// cannot explain them (confirmCrossOnce, then the loop below). It returns
// the pairs still slow, with why and their peers' figure; step counts the
// rounds for progress.
func (d *crossRun) confirmCross(ids []crossID, why []string, peers []float64, step *int) ([]crossID, []string, []float64, error) {
	tested := len(ids)
	ids, why, peers, err := d.confirmCrossOnce(ids, why, peers, step)
	if err != nil {
		return nil, nil, nil, err
	}
	// Enough evidence: where healthy pairs beside the suspects fell slow
	// now and then (ranks that share a host's cores), a pair slow in one
	// measurement again is no proof. It is measured itself until chance
	// (the controls' rate of slow figures, to the power of its slow
	// measurements again, times the pairs tested) falls under falseAlarms,
	// and cleared by one that is not slow; at most confirmAttempts more.
	for extra := 0; extra < confirmAttempts && len(ids) > 0; extra++ {
		var more []int
		if d.rank0 {
			need := d.againNeeded(tested)
			for i, c := range ids {
				if len(d.crossAgain[c]) < need {
					more = append(more, i)
				}
			}
		}
		if err := d.agree(&more); err != nil {
			return nil, nil, nil, err
		}
		if len(more) == 0 {
			break
		}
		slow, err := d.measureCross(ids, peers, more, step)
		if err != nil {
			return nil, nil, nil, err
		}
		keep := make([]bool, len(ids))
		for i := range keep {
			keep[i] = true
		}
		for _, i := range more {
			keep[i] = slow[i]
		}
		if ids, why, peers, err = d.keepCross(ids, why, peers, keep); err != nil {
			return nil, nil, nil, err
		}
	}
	return ids, why, peers, nil
}

// againNeeded is how many slow measurements again of its own a pair needs
// among tested suspects: the least m with tested * p^m under falseAlarms,
// where p is the controls' rate of slow figures so far (with one slow and
// one fine figure added, so that a few controls say little). 1 where no
// control was measured.
func (d *crossRun) againNeeded(tested int) int {
	if d.ctlN == 0 {
		return 1
	}
	p := float64(d.ctlSlow+1) / float64(d.ctlN+2)
	m, chance := 1, float64(tested)*p
	for chance >= rules.FalseAlarms && m < confirmAttempts+1 {
		m++
		chance *= p
	}
	return m
}

// confirmCrossOnce measures the slow pairs across hosts again, only them, in
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
func (d *crossRun) confirmCrossOnce(ids []crossID, why []string, peers []float64, step *int) ([]crossID, []string, []float64, error) {
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
// peers' figure. A round gives suspects at most half of the world's ranks;
// the rest measure healthy pairs across hosts beside them (controls): what
// a busy fabric or loaded hosts do to every pair at that moment shows in
// the controls against their own first figures, and a suspect's peers'
// figure is scaled by that (never above 1). So a fabric that turned slow
// mid-run, or cores that every rank shares, make no suspect slow, while a
// part that is slow itself stays slow beside fine controls. A round whose
// controls ran at under busyScale of their first figures is measured
// again, up to busyRetries times, before its suspects are judged: so busy
// a moment hides a slow part as well as a fine one (on 2 loaded cores a
// rank slow with all 4 of its partners on the other host was cleared with
// 2 of them, and named as 2 links instead of its NIC).
func (d *crossRun) measureCross(ids []crossID, peers []float64, which []int, step *int) (map[int]bool, error) {
	room := max(1, d.n/4) // suspect pairs per round: half the ranks
	var again [][]int     // indexes into ids, per round of disjoint pairs
	var placed [][][2]int
	for _, i := range which {
		c := ids[i]
		p := [2]int{d.crossRank(c, 0), d.crossRank(c, 1)}
		k := 0
		for k < len(placed) && (touches(placed[k], p) || len(placed[k]) >= room) {
			k++
		}
		if k == len(placed) {
			placed, again = append(placed, nil), append(again, nil)
		}
		placed[k], again[k] = append(placed[k], p), append(again[k], i)
	}
	suspect := map[crossID]bool{}
	for _, c := range ids {
		suspect[c] = true
	}
	slow := map[int]bool{}
	peak := d.nicPeak()
	lowBar := 1 - d.o.Thresholds.For("rail").Drop // a control below this share of its first figure is slow
	for k, round := range placed {
		controls := d.crossControls(round, suspect, max(len(round), minControls))
		var figs []float64
		var ratios []float64
		scale := 1.0
		for try := 0; ; try++ {
			var err error
			if figs, err = d.crossRound(round, controls, step); err != nil {
				return nil, err
			}
			ratios = ratios[:0]
			for ci, c := range controls {
				if h := figs[len(round)+ci]; h > 0 && c.Both > 0 {
					ratios = append(ratios, h/c.Both)
				}
			}
			scale = 1.0
			if len(ratios) > 0 {
				scale = min(1, facts.Median(ratios))
			}
			busy := d.rank0 && try < busyRetries && scale < busyScale
			if err := d.agree(&busy); err != nil {
				return nil, err
			}
			if !busy {
				break
			}
		}
		if !d.rank0 {
			continue
		}
		// A control is slow as a suspect would be: below its first figure
		// by more than the drop, beyond what moved them all.
		for _, x := range ratios {
			d.ctlN++
			if x < scale*lowBar {
				d.ctlSlow++
			}
		}
		d.crossScale = min(d.crossScale, scale)
		// The fabric is judged on rounds of minControls or more: the
		// median of fewer moves with one control's noise (6 processes on
		// 3 hosts have one control a round; on a loaded 2-core machine two
		// of three such rounds fell to 29%).
		if len(ratios) >= minControls {
			d.ctlRounds++
			if scale < lowBar {
				d.lowRounds++
			}
		}
		for gi, i := range again[k] {
			r := d.o.Thresholds.For(crossClass(ids[i]))
			// Below its peers (as the controls moved), or still below what
			// the NICs should carry: the hardware's bar does not move with
			// the fabric's load.
			h := figs[gi]
			if h <= 0 {
				continue
			}
			if h < peers[i]*scale*(1-r.Drop) || (peak > 0 && h < r.PeakFraction*peak) {
				slow[i] = true
			}
			d.crossAgain[ids[i]] = append(d.crossAgain[ids[i]], againFig{BW: h, Controls: len(ratios), Scale: scale})
		}
	}
	return slow, nil
}

// crossRound measures one round of pairs measured again and its controls
// at once (sendrecv both ways at the bandwidth size), on the world or on
// the model a test gives, and returns each pair's figure then each
// control's (rank 0's; 0 where there is none).
func (d *crossRun) crossRound(round [][2]int, controls []crossFig, step *int) ([]float64, error) {
	groups := make([][]int, 0, len(round)+len(controls))
	for _, p := range round {
		groups = append(groups, []int{p[0], p[1]})
	}
	for _, c := range controls {
		groups = append(groups, []int{c.A, c.B})
	}
	l := d.layout(groups)
	figs := make([]float64, len(groups))
	if d.crossModel != nil {
		copy(figs, d.crossModel(groups))
	} else {
		hs, err := d.measureSplit(l, measure.SendRecv, []int64{d.o.BWSize}, "host")
		if err != nil {
			return nil, err
		}
		for gi := range figs {
			if gi < len(hs[0]) && hs[0][gi] != nil {
				figs[gi] = hs[0][gi].BusBW
			}
		}
	}
	what := fmt.Sprintf("slow pairs across hosts again: sendrecv both ways at %s", words.Bytes(d.o.BWSize))
	if len(controls) > 0 {
		what += fmt.Sprintf(", beside %d healthy pair(s) across hosts", len(controls))
	}
	d.step("host", *step, l, what)
	*step++
	return figs, nil
}

// againFig is one measurement again of a pair across hosts: its figure,
// and how many controls beside it ran at what share (their median) of
// their first figures.
type againFig struct {
	BW       float64
	Controls int
	Scale    float64
}

// againWords says how a pair measured again fared, for its finding.
func againWords(fs []againFig) string {
	if len(fs) == 0 {
		return ""
	}
	var bw []string
	for _, f := range fs {
		bw = append(bw, facts.GB(f.BW))
	}
	last := fs[len(fs)-1]
	s := fmt.Sprintf("; measured again at %s GB/s", strings.Join(bw, ", "))
	if last.Controls > 0 {
		s += fmt.Sprintf(", the last time beside %d healthy pair(s) at %.0f%% of their first figures", last.Controls, last.Scale*100)
	}
	return s
}

// minControls is the fewest controls a round of pairs measured again asks
// for (it takes as many as it has suspects where that is more): the median
// of one or two would move with one control's noise.
const minControls = 4

// crossControls picks up to want healthy pairs across hosts (measured in
// the first rounds and not suspects, with no rank found slow alone), each
// rank in one pair at most and none in a pair of round, taking the pairs
// in the order they were measured, every host pair's in turn, so they
// spread over the hosts. Every process picks the same ones; rank 0's hold
// their first figures (Both).
func (d *crossRun) crossControls(round [][2]int, suspect map[crossID]bool, want int) []crossFig {
	used := map[int]bool{}
	for _, p := range round {
		used[p[0]], used[p[1]] = true, true
	}
	byHosts := map[[2]int][]crossFig{}
	var order [][2]int
	for _, c := range d.crossSeen {
		_, a := d.before.slowRanks[c.A]
		_, b := d.before.slowRanks[c.B]
		if suspect[c.crossID] || a || b {
			continue
		}
		k := [2]int{c.HA, c.HB}
		if byHosts[k] == nil {
			order = append(order, k)
		}
		byHosts[k] = append(byHosts[k], c)
	}
	var out []crossFig
	for more := true; more && len(out) < want; {
		more = false
		for _, k := range order {
			for len(byHosts[k]) > 0 {
				c := byHosts[k][0]
				byHosts[k] = byHosts[k][1:]
				if used[c.A] || used[c.B] {
					continue
				}
				used[c.A], used[c.B] = true, true
				out = append(out, c)
				more = true
				break
			}
			if len(out) == want {
				break
			}
		}
	}
	return out
}

// keepCross keeps the pairs rank 0 marks, and every process follows.
func (d *crossRun) keepCross(ids []crossID, why []string, peers []float64, keep []bool) ([]crossID, []string, []float64, error) {
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

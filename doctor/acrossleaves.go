package doctor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
	"collbench/internal/words"
	"collbench/measure"
)

// LeafRounds pairs n leaves for the rounds between leaves: leaf l with
// l+n/2 first, then, with three leaves or more, l with l+1, so every leaf
// meets two different partners and a slow uplink of one leaf can be told
// from its partner's. Each round lists leaf pairs; a leaf left without a
// partner sits the round out.
func LeafRounds(n int) [][][2]int {
	if n < 2 {
		return nil
	}
	shifts := []int{n / 2}
	if n >= 3 && n/2 != 1 {
		shifts = append(shifts, 1)
	}
	var rounds [][][2]int
	for _, s := range shifts {
		used := make([]bool, n)
		var round [][2]int
		for l := 0; l < n; l++ {
			p := (l + s) % n
			if used[l] || used[p] || p == l {
				continue
			}
			used[l], used[p] = true, true
			round = append(round, [2]int{l, p})
		}
		rounds = append(rounds, round)
	}
	return rounds
}

// leafFig is one rail measured between hosts of two leaves.
type leafFig struct {
	LA, LB int // leaf indexes
	HA, HB int // host indexes
	Rail   int
	A, B   int // world ranks
	Both   float64
}

// acrossLeaves measures rails between hosts of different leaves, all at
// once (every rail of every leaf crosses its spine), in the rounds
// LeafRounds gives, and names a leaf's uplink to a spine when the rail
// traffic of most of its hosts through that spine is slow toward two
// different partner leaves. The rounds do not grow with the hosts.
func (d *crossRun) acrossLeaves(step *int) error {
	fab := d.o.Fabric
	var leafNames []string
	hostsOf := map[string][]int{}
	for h, name := range d.hostList {
		l := fab.Leaf[name]
		if _, ok := hostsOf[l]; !ok {
			leafNames = append(leafNames, l)
		}
		hostsOf[l] = append(hostsOf[l], h)
	}
	rounds := LeafRounds(len(leafNames))
	if len(rounds) == 0 {
		return nil
	}
	if d.o.Quick {
		rounds = rounds[:1]
	}
	var figs []leafFig
	for _, round := range rounds {
		var fs []leafFig
		for _, lp := range round {
			ha, hb := hostsOf[leafNames[lp[0]]], hostsOf[leafNames[lp[1]]]
			for i := 0; i < len(ha) && i < len(hb); i++ {
				ma, mb := d.members[d.hostList[ha[i]]], d.members[d.hostList[hb[i]]]
				for x := 0; x < len(ma) && x < len(mb); x++ {
					fs = append(fs, leafFig{LA: lp[0], LB: lp[1], HA: ha[i], HB: hb[i], Rail: x, A: ma[x], B: mb[x]})
				}
			}
		}
		groups := make([][]int, len(fs))
		for i, f := range fs {
			groups[i] = []int{f.A, f.B}
		}
		l := d.layout(groups)
		hs, err := d.measureSplit(l, measure.SendRecv, []int64{d.o.BWSize}, "host")
		if err != nil {
			return err
		}
		d.step("host", *step, l, fmt.Sprintf("rails between leaves (every leaf with another): sendrecv both ways at %s", words.Bytes(d.o.BWSize)))
		*step++
		for i := range fs {
			if h := hs[0][i]; h != nil {
				fs[i].Both = h.BusBW
			}
		}
		figs = append(figs, fs...)
	}
	if !d.rank0 {
		return nil
	}
	for _, f := range figs {
		d.rep.Leaves = append(d.rep.Leaves, record.CrossFigure{HostA: d.hostList[f.HA], HostB: d.hostList[f.HB], A: f.A, B: f.B, LocalA: f.Rail, LocalB: f.Rail, Both: f.Both})
	}
	d.judgeLeaves(figs, leafNames, hostsOf)
	return nil
}

// judgeLeaves names the slow uplinks from the figures between leaves.
func (d *crossRun) judgeLeaves(figs []leafFig, leafNames []string, hostsOf map[string][]int) {
	fab := d.o.Fabric
	peak := d.nicPeak()
	ss := make([]rules.Sample, len(figs))
	for i, f := range figs {
		ss[i] = rules.Sample{Key: fmt.Sprint(i), Class: "rail between leaves", Value: f.Both, Expected: peak}
	}
	slow := map[int]bool{}
	peers := 0.0
	for _, s := range rules.Judge(ss, d.o.Thresholds) {
		i, _ := strconv.Atoi(s.Key) // keys are the figures' indexes
		slow[i] = true
		peers = s.Peers
	}
	if len(slow) == 0 {
		return
	}
	spineOf := func(rail int) string {
		if rail < len(fab.Spine) {
			return fab.Spine[rail]
		}
		return "?"
	}
	// For every leaf's uplink to a spine: its figures with each partner
	// leaf, and how many were slow.
	type unit struct{ leaf, spine string }
	type tally struct{ n, slow int }
	seen := map[unit]map[int]*tally{}
	note := func(u unit, partner int, isSlow bool) {
		if seen[u] == nil {
			seen[u] = map[int]*tally{}
		}
		t := seen[u][partner]
		if t == nil {
			t = &tally{}
			seen[u][partner] = t
		}
		t.n++
		if isSlow {
			t.slow++
		}
	}
	for i, f := range figs {
		sp := spineOf(f.Rail)
		note(unit{leafNames[f.LA], sp}, f.LB, slow[i])
		note(unit{leafNames[f.LB], sp}, f.LA, slow[i])
	}
	// An uplink is slow toward a partner leaf when most of the figures
	// through it toward that leaf are; it is at fault when it is slow toward
	// two different partners (the partner's own uplink cannot explain both).
	// With two leaves only one partner exists: the pair of uplinks is named.
	var units []unit
	for u := range seen {
		units = append(units, u)
	}
	slices.SortFunc(units, func(a, b unit) int { return strings.Compare(a.leaf+"|"+a.spine, b.leaf+"|"+b.spine) })
	named := map[string]bool{}
	for _, u := range units {
		var toward []int
		n, sl := 0, 0
		for p, t := range seen[u] {
			n += t.n
			sl += t.slow
			if 2*t.slow > t.n {
				toward = append(toward, p)
			}
		}
		slices.Sort(toward)
		if len(toward) == 0 || (len(toward) < 2 && len(leafNames) > 2) {
			continue
		}
		var partners []string
		for _, p := range toward {
			partners = append(partners, leafNames[p])
		}
		part := fmt.Sprintf("uplink %s ↔ %s", u.leaf, u.spine)
		msg := fmt.Sprintf("rail traffic of %d host(s) behind %s through %s was slow toward %s (%d of %d rails between leaves slow, their peers %s GB/s), fine within the leaf",
			len(hostsOf[u.leaf]), u.leaf, u.spine, strings.Join(partners, " and "), sl, n, facts.GB(peers))
		if len(leafNames) == 2 {
			other := partners[0]
			if named[other+"|"+u.spine] {
				continue
			}
			part = fmt.Sprintf("uplinks %s ↔ %s ↔ %s", u.leaf, u.spine, other)
			msg = fmt.Sprintf("rail traffic between the two leaves through %s was slow (%d of %d rails, their peers %s GB/s); with two leaves the slow side cannot be told apart",
				u.spine, sl, n, facts.GB(peers))
		}
		named[u.leaf+"|"+u.spine] = true
		d.found = append(d.found, record.Finding{Severity: "FAIL", Stage: "host", Kind: "slow-uplink", Part: part, Msg: msg, Peers: peers, Unit: "GB/s",
			Cause: "the cable, optics or switch ports between the leaf and the spine"})
	}
}

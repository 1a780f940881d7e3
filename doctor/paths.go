package doctor

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
	"collbench/internal/words"
)

// minPathBytes is the least a path must carry in one stage to be judged:
// below it, a step's fixed cost outweighs the path's rate.
const minPathBytes = 1 << 20

// PathRules judge a path's rate on the wire when the thresholds name no
// "path" class: 40% below the stage's other paths, or 35% of the NICs'
// rate. A path's rate inside one collective wobbles more than a timed
// pair's: on TCP sockets between two processes of one host the two
// directions of the same allreduce differed by up to 2x (docs/doctor.md).
var PathRules = rules.Rules{Drop: 0.4, PeakFraction: 0.35}

// minPathPeers is how many paths a stage needs before a path is judged
// against the others; with fewer only the NICs' rate judges.
const minPathPeers = 4

// maxSlowPaths bounds the slow paths the report lists when most of a
// stage's paths are slow (the network, one finding).
const maxSlowPaths = 64

// pathFindings judges every stage's paths between hosts against the
// stage's other paths and the NIC's rate, on rank 0. A rank at an end of
// two or more slow paths is named by its own network path; the other slow
// paths are named end to end. Paths a finding already covers are left
// out of the findings (and kept in the report's slow paths).
func (d *judging) pathFindings(covered func(from, to int) bool) []record.Finding {
	byStage := map[string][]rules.Sample{}
	keyOf := map[string]pathKey{} // a sample's key -> its path
	var stages []string
	for key, p := range d.paths {
		if p.bytes < minPathBytes || p.wireUS <= 0 {
			continue
		}
		if _, ok := byStage[key.stage]; !ok {
			stages = append(stages, key.stage)
		}
		id := fmt.Sprintf("%s %d>%d", key.stage, key.from, key.to)
		keyOf[id] = key
		byStage[key.stage] = append(byStage[key.stage], rules.Sample{Key: id, Class: "path",
			Value: float64(p.bytes) / (p.wireUS * 1e3), Expected: d.nicPeak()})
	}
	slices.Sort(stages)
	var fs []record.Finding
	d.pathsSeen, d.slowPaths = nil, nil
	for _, stage := range stages {
		ss := byStage[stage]
		slices.SortFunc(ss, func(a, b rules.Sample) int { return strings.Compare(a.Key, b.Key) })
		th := d.o.Thresholds
		if _, ok := th.Class["path"]; !ok {
			th.Class = maps.Clone(th.Class)
			if th.Class == nil {
				th.Class = map[string]rules.Rules{}
			}
			th.Class["path"] = PathRules
		}
		var flagged []rules.Suspect
		if len(ss) >= minPathPeers {
			flagged = rules.Judge(ss, th)
		} else {
			r := th.For("path")
			for _, s := range ss {
				if s.Expected > 0 && r.PeakFraction > 0 && s.Value < r.PeakFraction*s.Expected {
					flagged = append(flagged, rules.Suspect{Sample: s, Peers: s.Value,
						Why: fmt.Sprintf("%.0f%% of the %.0f GB/s its NIC's port runs at (too few paths to compare with each other)", s.Value/s.Expected*100, s.Expected)})
				}
			}
		}
		vals := make([]float64, len(ss))
		for i, s := range ss {
			vals[i] = s.Value
		}
		d.pathsSeen = append(d.pathsSeen, record.PathsSeen{Stage: stage, Paths: len(ss), Median: facts.Median(vals), Slow: len(flagged)})
		// Most paths slow alike is the network, not any one part of it:
		// one finding, never one per path.
		if len(ss) >= 4 && 2*len(flagged) > len(ss) {
			m, peak := facts.Median(vals), d.nicPeak()
			fs = append(fs, record.Finding{Severity: "FAIL", Stage: stage, Kind: "slow-network", Part: fmt.Sprintf("the network between hosts (%d paths)", len(ss)),
				Value: m, Expected: peak, Unit: "GB/s",
				Msg: fmt.Sprintf("NCCL's proxy saw %d of the %d paths between hosts slow inside one collective: median %s GB/s on the wire, %.0f%% of the %s GB/s the NICs' ports run at",
					len(flagged), len(ss), facts.GB(m), m/peak*100, facts.GB(peak)),
				Cause: "every host alike: the NICs' firmware or settings (GPUDirect RDMA off, the wrong transport), or the fabric"})
			for _, s := range flagged[:min(len(flagged), maxSlowPaths)] {
				d.slowPaths = append(d.slowPaths, d.pathFigure(keyOf[s.Key], s))
			}
			continue
		}
		ends := map[int][]record.PathFigure{}
		var figs []record.PathFigure
		for _, s := range flagged {
			f := d.pathFigure(keyOf[s.Key], s)
			d.slowPaths = append(d.slowPaths, f)
			if covered(f.From, f.To) {
				continue
			}
			figs = append(figs, f)
			ends[f.From] = append(ends[f.From], f)
			ends[f.To] = append(ends[f.To], f)
		}
		// Many paths between the same two leaves on one rail, each between
		// ranks of its own, share only the uplinks between those leaves:
		// one finding about them, never one per GPU.
		var upl []record.Finding
		figs, upl = d.uplinkPaths(stage, figs)
		fs = append(fs, upl...)
		ends = map[int][]record.PathFigure{}
		for _, f := range figs {
			ends[f.From] = append(ends[f.From], f)
			ends[f.To] = append(ends[f.To], f)
		}
		nic := map[int]bool{}
		for _, r := range facts.SortedKeys(ends) {
			ps := ends[r]
			// Its NIC only when slow with two partners or more: two paths
			// with one partner (each way) are that pair's path.
			partners := map[int]bool{}
			for _, p := range ps {
				partners[p.From+p.To-r] = true
			}
			if len(partners) < 2 {
				continue
			}
			nic[r] = true
			var others []int
			var vals, peers []float64
			for _, p := range ps {
				other := p.From
				if other == r {
					other = p.To
				}
				others = append(others, other)
				vals, peers = append(vals, p.GBps), append(peers, p.Peers)
			}
			slices.Sort(others)
			v, pm := facts.Median(vals), facts.Median(peers)
			fs = append(fs, record.Finding{Severity: "FAIL", Stage: stage, Kind: "slow-nic", Part: d.o.Who(r) + " network path", Host: d.host(r),
				Ranks: []int{r}, Value: v, Peers: pm, Expected: ps[0].Expected, Unit: "GB/s",
				Msg: fmt.Sprintf("NCCL's proxy saw %d of its paths to other hosts slow inside one collective (with ranks %s): %s GB/s on the wire, the stage's other paths %s GB/s%s",
					len(ps), words.Ints(others), facts.GB(v), facts.GB(pm), facts.Drop(v, pm)),
				Cause: "this GPU's NIC, cable or switch port"})
		}
		for _, f := range figs {
			if nic[f.From] || nic[f.To] {
				continue
			}
			fs = append(fs, record.Finding{Severity: "FAIL", Stage: stage, Kind: "slow-path", Part: fmt.Sprintf("%s → %s", d.o.Who(f.From), d.o.Who(f.To)),
				Host: f.FromHost, Ranks: []int{f.From, f.To}, Value: f.GBps, Peers: f.Peers, Expected: f.Expected, Unit: "GB/s",
				Msg: fmt.Sprintf("NCCL's proxy moved %s over it in %.0f µs on the wire inside one collective: %s GB/s, %s",
					words.Bytes(f.Bytes), f.WireUS, facts.GB(f.GBps), f.Why),
				Cause: "the NIC of either end, or a cable or switch port on the way"})
		}
	}
	return fs
}

// minUplinkPaths is how many slow paths, between distinct ranks, two
// leaves must share on one rail before their uplinks are named instead of
// the paths' ends.
const minUplinkPaths = 3

// uplinkPaths takes out of figs the slow paths that cross between two
// leaves on one rail in numbers (minUplinkPaths, every end a different
// rank) and returns one finding per such pair of leaves: the uplinks
// through that rail's spine. With one round of host pairs the slow side
// cannot be told; the full run's stage across leaves tells it.
func (d *judging) uplinkPaths(stage string, figs []record.PathFigure) ([]record.PathFigure, []record.Finding) {
	fab := d.o.Fabric
	if fab == nil || len(fab.Leaf) == 0 {
		return figs, nil
	}
	type between struct {
		a, b string
		rail int
	}
	groups := map[between][]int{} // indices into figs
	var order []between
	for i, f := range figs {
		la, lb := fab.Leaf[f.FromHost], fab.Leaf[f.ToHost]
		ra, rb := d.localIndex(f.From), d.localIndex(f.To)
		if la == "" || lb == "" || la == lb || ra != rb || ra < 0 {
			continue
		}
		if lb < la {
			la, lb = lb, la
		}
		k := between{la, lb, ra}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	taken := map[int]bool{}
	var out []record.Finding
	for _, k := range order {
		idx := groups[k]
		ranks := map[int]bool{}
		var vals, peers []float64
		for _, i := range idx {
			ranks[figs[i].From], ranks[figs[i].To] = true, true
			vals, peers = append(vals, figs[i].GBps), append(peers, figs[i].Peers)
		}
		// Distinct pairs of ranks: a pair counts once, both ways.
		if pairs := len(ranks) / 2; pairs < minUplinkPaths {
			continue
		}
		spine := fmt.Sprintf("rail %d's spine", k.rail)
		if k.rail < len(fab.Spine) && fab.Spine[k.rail] != "" {
			spine = fab.Spine[k.rail]
		}
		for _, i := range idx {
			taken[i] = true
		}
		v, pm := facts.Median(vals), facts.Median(peers)
		out = append(out, record.Finding{Severity: "FAIL", Stage: stage, Kind: "slow-uplink", Part: fmt.Sprintf("uplinks %s ↔ %s ↔ %s", k.a, spine, k.b),
			Value: v, Peers: pm, Unit: "GB/s",
			Msg: fmt.Sprintf("NCCL's proxy saw %d paths between %d ranks behind %s and %s on rail %d slow inside one collective: %s GB/s on the wire, the stage's other paths %s GB/s%s; one round of host pairs cannot tell which leaf's uplink is slow",
				len(idx), len(ranks), k.a, k.b, k.rail, facts.GB(v), facts.GB(pm), facts.Drop(v, pm)),
			Cause: "the cable, optics or switch ports between either leaf and " + spine + ": doctor without --quick measures the uplinks leaf by leaf"})
	}
	var rest []record.PathFigure
	for i, f := range figs {
		if !taken[i] {
			rest = append(rest, f)
		}
	}
	return rest, out
}

// pathFigure is the report's figure of a path judged slow.
func (d *judging) pathFigure(k pathKey, s rules.Suspect) record.PathFigure {
	p := d.paths[k]
	return record.PathFigure{Stage: k.stage, From: k.from, To: k.to, FromHost: d.host(k.from), ToHost: d.host(k.to), Bytes: p.bytes,
		WireUS: p.wireUS, GBps: s.Value, Peers: s.Peers, Expected: s.Expected, Why: s.Why}
}

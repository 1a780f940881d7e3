package doctor

import (
	"fmt"
	"strings"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
	"collbench/internal/words"
	"collbench/measure"
)

// worldStage runs collectives over the whole world, and halves of it.
type worldStage struct{}

func (worldStage) Name(*site) string { return "the whole world" }
func (worldStage) Skip(d *site) string {
	if d.n < 2 {
		return "one " + facts.Unit(d.o.Backend)
	}
	return ""
}
func (worldStage) Run(m *meter, before outcome) (outcome, error) {
	d := &worldRun{meter: m, before: before}
	err := d.world()
	return d.outcome, err
}

// worldRun is one run of the stage: what it names, knowing what the
// stages before it found.
type worldRun struct {
	*meter
	before outcome
	outcome
}

// world runs an allreduce over every rank at a large size and compares it
// with the topology's expectation; when it falls short and no stage named
// anything, it bisects the world down to the smallest group that still
// falls short.
func (d *worldRun) world() error {
	if d.n < 2 {
		return nil
	}
	expected := d.worldPeak()
	measureGroups := func(groups [][]int, round int) ([]float64, error) {
		l := d.layout(groups)
		hs, err := d.measureSplit(l, measure.AllReduce, []int64{d.o.WorldSize}, "world")
		if err != nil {
			return nil, err
		}
		d.step("world", round, l, fmt.Sprintf("allreduce at %s", words.Bytes(d.o.WorldSize)))
		out := make([]float64, len(groups))
		for i := range groups {
			if h := hs[0][i]; h != nil {
				out[i] = h.BusBW
			}
		}
		return out, nil
	}
	all := make([]int, d.n)
	for i := range all {
		all[i] = i
	}
	bw, err := measureGroups([][]int{all}, 0)
	if err != nil {
		return err
	}
	r := d.o.Thresholds.For("world")
	short := func(v float64) bool { return expected > 0 && r.PeakFraction > 0 && v < r.PeakFraction*expected }
	if d.rank0 {
		d.rep.World = &record.WorldFigure{Ranks: d.n, Bytes: d.o.WorldSize, BusBW: bw[0], Expected: expected}
	}
	type decision struct {
		Bisect bool `json:"bisect"`
	}
	dec := decision{}
	if d.rank0 {
		dec.Bisect = short(bw[0]) && !d.o.Quick && len(d.before.slowRanks) == 0 && len(d.before.slowPairs) == 0 && len(d.before.found) == 0 && len(d.seen.wrong) == 0
	}
	if err := d.agree(&dec); err != nil {
		return err
	}
	if !dec.Bisect {
		if d.rank0 && short(bw[0]) {
			d.found = append(d.found, record.Finding{Severity: "FAIL", Stage: "world", Kind: "slow-world", Part: fmt.Sprintf("the world of %d ranks", d.n),
				Value: bw[0], Expected: expected, Unit: "GB/s", Msg: fmt.Sprintf("allreduce busbw %s GB/s, %.0f%% of the %s GB/s expected", facts.GB(bw[0]), bw[0]/expected*100, facts.GB(expected)),
				Cause: "see the findings above"})
		}
		return nil
	}
	group := all
	for round := 1; len(group) > 2; round++ {
		a, b := rules.Halves(group)
		bws, err := measureGroups([][]int{a, b}, round)
		if err != nil {
			return err
		}
		type next struct {
			Group []int  `json:"group"`
			Stop  bool   `json:"stop"`
			Note  string `json:"note"`
		}
		var nx next
		if d.rank0 {
			sa, sb := short(bws[0]), short(bws[1])
			switch {
			case sa && !sb:
				nx = next{Group: a, Note: fmt.Sprintf("%s short (%s GB/s), %s fine (%s GB/s)", d.groupWord(a), facts.GB(bws[0]), d.groupWord(b), facts.GB(bws[1]))}
			case sb && !sa:
				nx = next{Group: b, Note: fmt.Sprintf("%s short (%s GB/s), %s fine (%s GB/s)", d.groupWord(b), facts.GB(bws[1]), d.groupWord(a), facts.GB(bws[0]))}
			default:
				nx = next{Group: group, Stop: true, Note: fmt.Sprintf("halves %s (%s GB/s) and %s (%s GB/s): the shortfall needs the whole group", d.groupWord(a), facts.GB(bws[0]), d.groupWord(b), facts.GB(bws[1]))}
			}
			d.rep.World.Bisect = append(d.rep.World.Bisect, nx.Note)
		}
		if err := d.agree(&nx); err != nil {
			return err
		}
		group = nx.Group
		if nx.Stop {
			break
		}
	}
	if d.rank0 {
		d.found = append(d.found, record.Finding{Severity: "FAIL", Stage: "world", Kind: "slow-world", Part: d.groupWord(group), Ranks: group,
			Value: bw[0], Expected: expected, Unit: "GB/s",
			Msg:   fmt.Sprintf("the whole world's allreduce reached %s GB/s of %s expected; this is the smallest group that still falls short", facts.GB(bw[0]), facts.GB(expected)),
			Cause: "no single GPU, pair or host stood out: a shared path (a switch, a PCIe root complex)"})
	}
	return nil
}

// worldPeak is what the world's allreduce busbw should approach: the
// NVLink peak on one host, the NIC peak across hosts; 0 when unknown.
func (d *worldRun) worldPeak() float64 {
	if len(d.hostList) > 1 {
		return d.nicPeak()
	}
	f := d.facts[d.hostList[0]]
	if f == nil || len(f.GPUs) == 0 {
		return 0
	}
	peak := 0.0
	for i, g := range f.GPUs {
		if i >= len(f.LinkGBps) || f.LinkGBps[i] <= 0 || g.NVLinksActive == 0 {
			return 0
		}
		p := float64(g.NVLinksActive) * f.LinkGBps[i]
		if peak == 0 || p < peak {
			peak = p
		}
	}
	return peak
}

// groupWord names a group of ranks in one short phrase: each rank with its
// host and GPU up to four, else the ranks as ranges and the hosts they span.
func (d *worldRun) groupWord(group []int) string {
	if len(group) <= 4 {
		names := make([]string, len(group))
		for i, r := range group {
			names[i] = d.o.Who(r)
		}
		return strings.Join(names, ", ")
	}
	hosts := map[string]bool{}
	for _, r := range group {
		hosts[d.host(r)] = true
	}
	if len(group) == d.n {
		return fmt.Sprintf("the world of %d ranks on %d host(s)", d.n, len(hosts))
	}
	return fmt.Sprintf("ranks %s (%d ranks on %d host(s))", words.Ints(group), len(group), len(hosts))
}

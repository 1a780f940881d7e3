package doctor

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
	"collbench/internal/words"
	"collbench/measure"
)

// hostResult is what rank 0 decides about the hosts after a round.
type hostResult struct {
	Suspects []int     `json:"suspects"`
	Healthy  []int     `json:"healthy"`
	Slow     [][2]int  `json:"slow"`  // host pairs that were slow
	Cross    []crossID `json:"cross"` // slow GPU pairs across hosts
	CrossWhy []string  `json:"cross_why"`
	Peers    []float64 `json:"cross_peer"`
}

// crossID names a pair of ranks on two hosts: host indexes and local ranks.
type crossID struct {
	HA int `json:"ha"`
	HB int `json:"hb"`
	LA int `json:"la"`
	LB int `json:"lb"`
}

// CrossRounds schedules every pair of ka local ranks on one host with kb on
// another into rounds of disjoint pairs, max(ka, kb) rounds in all. Round s
// pairs local rank l of the smaller side with l+s (mod the larger side's
// count) of the other; round 0 holds the rails (the same local rank on
// both hosts). Every pair [la, lb] appears exactly once.
func CrossRounds(ka, kb int) [][][2]int {
	if ka < 1 || kb < 1 {
		return nil
	}
	small, big := ka, kb
	if ka > kb {
		small, big = kb, ka
	}
	rounds := make([][][2]int, big)
	for s := 0; s < big; s++ {
		for l := 0; l < small; l++ {
			p := [2]int{l, (l + s) % big}
			if ka > kb {
				p = [2]int{p[1], p[0]}
			}
			rounds[s] = append(rounds[s], p)
		}
	}
	return rounds
}

// acrossHostsStage measures hosts against each other, and then across
// leaf switches (acrossleaves.go).
type acrossHostsStage struct{}

func (acrossHostsStage) Name(*site) string { return "across hosts" }
func (acrossHostsStage) Skip(d *site) string {
	if len(d.hostList) < 2 {
		return "one host"
	}
	return ""
}
func (acrossHostsStage) Run(m *meter, before outcome) (outcome, error) {
	d := &crossRun{meter: m, before: before, crossScale: 1, crossAgain: map[crossID][]againFig{}}
	err := d.acrossHosts()
	return d.outcome, err
}

// crossRun is one run of the stage: what it names, knowing the GPUs and
// pairs within hosts found slow before it, and what it measured on the way.
type crossRun struct {
	*meter
	before outcome
	outcome
	// crossSeen is every pair across hosts as first measured (the figures
	// on rank 0), from which pairs measured again take their controls.
	crossSeen []crossFig
	// crossScale is the least median, over the rounds of pairs measured
	// again, of their controls' figures over their first ones (1 when
	// none fell).
	crossScale float64
	// ctlRounds counts the rounds of pairs measured again that had
	// minControls controls or more, and lowRounds those whose controls'
	// median fell below their first figures by more than the drop.
	ctlRounds, lowRounds int
	// crossAgain is, on rank 0, every measurement again of a pair across
	// hosts, for its finding's evidence.
	crossAgain map[crossID][]againFig
	// ctlN and ctlSlow count, on rank 0, the controls measured beside pairs
	// measured again, and those that were slow.
	ctlN, ctlSlow int
	// crossModel, set by tests, measures a round of pairs across hosts
	// (each group's figure, both ways) on a model of the machine instead
	// of the world.
	crossModel func(groups [][]int) []float64
}

// acrossHosts pairs hosts once (every host measured with a partner), then
// pairs only the suspects with hosts already seen healthy: a host slow with
// two different partners is the culprit; a pair slow only together is the
// link between them. Within each pair of hosts every GPU of one is measured
// with every GPU of the other (the rails and every other cross pair, as
// alltoall uses them), so a bad cable or switch port seen by only some GPU
// pairs is found. The rounds are bounded by the GPUs per host, whatever the
// number of hosts.
func (d *crossRun) acrossHosts() error {
	nh := len(d.hostList)
	if nh < 2 {
		return nil
	}
	rounds := rules.HostRounds(nh)
	if d.o.Quick {
		rounds = rounds[:1]
	}
	// Each host pair's round is a round per local rank of the larger host
	// (every GPU pair across them) and the pair's allreduce.
	most := 0
	for _, h := range d.hostList {
		most = max(most, len(d.members[h]))
	}
	d.plan = len(rounds) * (most + 1)
	ran := map[[2]int]bool{}
	var seenPairs []record.HostPairFigure
	var cross []crossFig
	step := 0
	for _, round := range rounds {
		hp, cf, err := d.measureHostPairs(round, &step)
		if err != nil {
			return err
		}
		seenPairs, cross = append(seenPairs, hp...), append(cross, cf...)
		for _, p := range round {
			ran[pairKey(p[0], p[1])] = true
		}
	}
	// Rank 0 triages; the others follow its list of hosts to pair again.
	var res hostResult
	var slowWith map[int]map[int]bool
	var fine map[int]bool
	// Host pairs whose slowness a slow GPU pair across them explains (known
	// once those are confirmed): the more specific part is named, and the
	// two hosts count as fine with each other.
	explained := map[[2]int]bool{}
	triage := func() {
		res = d.judgeHosts(seenPairs, cross)
		slowWith, fine = map[int]map[int]bool{}, map[int]bool{}
		res.Slow = slices.DeleteFunc(res.Slow, func(p [2]int) bool {
			if explained[pairKey(p[0], p[1])] {
				fine[p[0]], fine[p[1]] = true, true
				return true
			}
			return false
		})
		for _, p := range res.Slow {
			for _, x := range [][2]int{{p[0], p[1]}, {p[1], p[0]}} {
				if slowWith[x[0]] == nil {
					slowWith[x[0]] = map[int]bool{}
				}
				slowWith[x[0]][x[1]] = true
			}
		}
		for _, h := range res.Healthy {
			fine[h] = true
		}
		_, res.Suspects = rules.Triage(nh, slowWith, fine)
	}
	if d.rank0 {
		triage()
	}
	if err := d.agree(&res); err != nil {
		return err
	}
	if !d.o.Quick && len(res.Suspects) > 0 && len(res.Healthy) > 0 {
		for _, round := range rules.Repair(res.Suspects, res.Healthy, func(a, b int) bool { return ran[pairKey(a, b)] }) {
			hp, cf, err := d.measureHostPairs(round, &step)
			if err != nil {
				return err
			}
			seenPairs, cross = append(seenPairs, hp...), append(cross, cf...)
		}
		if d.rank0 {
			triage()
		}
		if err := d.agree(&res); err != nil {
			return err
		}
	}
	// Measure slow cross pairs again, only them, in rounds of disjoint
	// pairs; one attempt that is not slow clears a pair. A pair with a rank
	// already found slow alone is explained by it.
	var ids []crossID
	var why []string
	var peers []float64
	for i, c := range res.Cross {
		_, a := d.before.slowRanks[d.crossRank(c, 0)]
		_, b := d.before.slowRanks[d.crossRank(c, 1)]
		if !a && !b {
			ids, why, peers = append(ids, c), append(why, res.CrossWhy[i]), append(peers, res.Peers[i])
		}
	}
	d.crossSeen = cross
	ids, why, peers, err := d.confirmCross(ids, why, peers, &step)
	if err != nil {
		return err
	}
	leaves := len(d.found) // the uplinks acrossLeaves names start here
	if d.o.Fabric != nil {
		if err := d.acrossLeaves(&step); err != nil {
			return err
		}
	}
	if !d.rank0 {
		return nil
	}
	for _, c := range ids {
		explained[pairKey(c.HA, c.HB)] = true
	}
	triage()
	named := d.nameHosts(res, slowWith, fine)
	d.nameBusyFabric()
	if d.nameSlowFabric(ids, cross) {
		// The uplinks between leaves, slow with everything else, are part
		// of the fabric named.
		d.found = append(d.found[:leaves], slices.DeleteFunc(d.found[leaves:], func(f record.Finding) bool { return f.Kind == "slow-uplink" })...)
		return nil
	}
	nic := d.nameCross(ids, why, peers, cross, named)
	d.nameFlapping(cross, nic)
	return nil
}

// nameBusyFabric warns when the healthy pairs measured beside the suspects
// ran well below their own first figures in two rounds or more (in the one
// round, where there was one), of the rounds with minControls controls or
// more: the fabric between hosts slowed during the
// run (another job's traffic, most likely), and the suspects were judged
// as it moved. One round of several is a moment's noise, not the fabric:
// its suspects were still judged against it, and their findings say so.
func (d *crossRun) nameBusyFabric() {
	if d.lowRounds == 0 || d.lowRounds < min(2, d.ctlRounds) {
		return
	}
	d.found = append(d.found, record.Finding{Severity: "WARN", Stage: "host", Kind: "busy-fabric", Part: "the fabric between hosts",
		Value: d.crossScale,
		Msg: fmt.Sprintf("healthy pairs across hosts measured again ran at as little as %.0f%% of their first figures, in %d of %d rounds: the fabric slowed during the run, "+
			"and pairs measured again were judged against that", d.crossScale*100, d.lowRounds, d.ctlRounds),
		Cause: "traffic of another job on the same switches, or a fabric-wide change mid-run: run doctor again on a quiet fabric"})
}

// nameSlowFabric names the fabric as a whole, and no part of it, when more
// than half of the pairs across hosts measured are slow after their
// measurements again, on more than half of the hosts: no one NIC, cable or
// host explains that. It says whether it named it.
func (d *crossRun) nameSlowFabric(ids []crossID, all []crossFig) bool {
	hosts, slow := map[int]bool{}, map[crossID]bool{}
	for _, c := range ids {
		hosts[c.HA], hosts[c.HB] = true, true
		slow[c] = true
	}
	if len(all) < 4 || 2*len(ids) <= len(all) || 2*len(hosts) <= len(d.hostList) {
		return false
	}
	var bad, good []float64
	for _, c := range all {
		if slow[c.crossID] {
			bad = append(bad, c.Both)
		} else {
			good = append(good, c.Both)
		}
	}
	msg := fmt.Sprintf("%d of the %d GPU pairs across hosts measured were slow, on %d of %d hosts (median %s GB/s both ways",
		len(ids), len(all), len(hosts), len(d.hostList), facts.GB(facts.Median(bad)))
	if len(good) > 0 {
		msg += fmt.Sprintf(", the rest %s", facts.GB(facts.Median(good)))
	}
	f := record.Finding{Severity: "FAIL", Stage: "host", Kind: "slow-fabric", Part: "the fabric between hosts", Value: facts.Median(bad), Unit: "GB/s",
		Cause: "the fabric as a whole, not one part: another job's traffic, or a setting on every host or switch (MTU, adaptive routing, PFC, the NICs' link rate)"}
	if peak := d.nicPeak(); peak > 0 {
		f.Expected = peak
		msg += fmt.Sprintf("; the NICs carry %s", facts.GB(peak))
	}
	f.Msg = msg + ")"
	d.found = append(d.found, f)
	return true
}

// nameHosts names the hosts slow with two different partners, otherwise
// the link between two hosts; a host with slow GPUs or pairs inside it is
// slow with every partner for that reason, which the earlier stages name.
// It returns the hosts named.
func (d *crossRun) nameHosts(res hostResult, slowWith map[int]map[int]bool, fine map[int]bool) map[int]bool {
	nh := len(d.hostList)
	inside := d.hostsSlowInside()
	culprits, _ := rules.Triage(nh, slowWith, fine)
	named := map[int]bool{}
	for _, h := range culprits {
		named[h] = true
		if inside[h] {
			continue
		}
		ps := facts.SortedKeys(slowWith[h])
		var names []string
		for _, p := range ps {
			names = append(names, d.hostList[p])
		}
		d.found = append(d.found, record.Finding{Severity: "FAIL", Stage: "host", Kind: "slow-host", Part: "host " + d.hostList[h],
			Host: d.hostList[h], Msg: fmt.Sprintf("slow with %d different partner hosts (%s)", len(ps), strings.Join(names, ", ")),
			Cause: "this host's network path (NICs, cables, switch ports) or its GPUs"})
	}
	for _, p := range res.Slow {
		if named[p[0]] || named[p[1]] || inside[p[0]] || inside[p[1]] {
			continue
		}
		a, b := d.hostList[p[0]], d.hostList[p[1]]
		msg := "slow together, each fine with another partner"
		if !fine[p[0]] || !fine[p[1]] {
			msg = "slow together; no other partner was left to tell the host from the link"
		}
		d.found = append(d.found, record.Finding{Severity: "FAIL", Stage: "host", Kind: "slow-host-link", Part: "hosts " + a + " ↔ " + b,
			Msg: msg, Cause: "the network path between these hosts"})
	}
	return named
}

// tailRatio is how much slower than its best an iteration must be to count
// as a slow one: well past what noise spreads, well short of a stall.
const tailRatio = 1.5

// nameFlapping names ranks whose measurements across hosts had slow
// iterations far more often than chance allows: a NIC or cable that
// flaps is slow some of the time, so the best iteration hides it, but
// its measurements keep having slow ones. The rate of such measurements
// over all ranks is the chance; a rank is named when the binomial chance
// of its count, times the number of ranks judged, is below falseAlarms.
func (d *crossRun) nameFlapping(all []crossFig, named map[int]bool) {
	type count struct{ slow, n int }
	per := map[int]*count{}
	total, tails := 0, 0
	for _, c := range all {
		if c.Tail == 0 {
			continue
		}
		t := c.Tail > tailRatio
		total++
		if t {
			tails++
		}
		for _, r := range []int{c.A, c.B} {
			if per[r] == nil {
				per[r] = &count{}
			}
			per[r].n++
			if t {
				per[r].slow++
			}
		}
	}
	// Where most measurements have slow iterations (ranks sharing a
	// host's cores), a slow iteration says nothing about one part.
	if total == 0 || float64(tails) > 0.2*float64(total) {
		return
	}
	p := max(float64(tails)/float64(total), 1e-3)
	for _, r := range facts.SortedKeys(per) {
		c := per[r]
		if named[r] || c.slow < 3 || !(binomialTail(c.n, c.slow, p)*float64(len(per)) < rules.FalseAlarms) {
			continue
		}
		d.found = append(d.found, record.Finding{Severity: "FAIL", Stage: "host", Kind: "flapping-nic", Part: d.o.Who(r) + " network path",
			Host: d.host(r), Ranks: []int{r},
			Msg: fmt.Sprintf("%d of its %d measurements across hosts had iterations over %.1fx slower than its best (%.1f%% of all measurements did), while its best was as fast as its peers'",
				c.slow, c.n, tailRatio, p*100),
			Cause: "a NIC, cable or switch port that flaps: read the port's error and retransmit counters"})
	}
}

// binomialTail is the chance of k or more successes in n tries of chance p.
func binomialTail(n, k int, p float64) float64 {
	sum := 0.0
	for i := k; i <= n; i++ {
		lc, _ := math.Lgamma(float64(n + 1))
		a, _ := math.Lgamma(float64(i + 1))
		b, _ := math.Lgamma(float64(n - i + 1))
		sum += math.Exp(lc - a - b + float64(i)*math.Log(p) + float64(n-i)*math.Log1p(-p))
	}
	return sum
}

// hostsSlowInside are the hosts (by index) with a GPU found slow alone or
// a slow pair of GPUs within them.
func (d *crossRun) hostsSlowInside() map[int]bool {
	idx := map[string]int{}
	for i, h := range d.hostList {
		idx[h] = i
	}
	out := map[int]bool{}
	for r := range d.before.slowRanks {
		out[idx[d.host(r)]] = true
	}
	for key := range d.before.slowPairs {
		var a, b int
		if _, err := fmt.Sscanf(key, "%d-%d", &a, &b); err == nil {
			out[idx[d.host(a)]] = true
		}
	}
	return out
}

// crossRank is the world rank of one side (0 or 1) of a cross pair.
func (d *crossRun) crossRank(c crossID, side int) int {
	if side == 0 {
		return d.members[d.hostList[c.HA]][c.LA]
	}
	return d.members[d.hostList[c.HB]][c.LB]
}

// nameCross turns the confirmed slow pairs across hosts into findings. A
// rank slow with more than half of the partners it met on other hosts (two
// at least) is named by its own network path (its NIC, cable, switch port);
// the rest are named as the path between the two GPUs: a rail, or a cross
// pair of different local ranks.
func (d *crossRun) nameCross(ids []crossID, why []string, peers []float64, all []crossFig, namedHosts map[int]bool) map[int]bool {
	met, slowWith := map[int]map[int]bool{}, map[int]map[int]bool{}
	add := func(m map[int]map[int]bool, a, b int) {
		if m[a] == nil {
			m[a] = map[int]bool{}
		}
		m[a][b] = true
	}
	for _, c := range all {
		add(met, c.A, c.B)
		add(met, c.B, c.A)
	}
	for _, c := range ids {
		a, b := d.crossRank(c, 0), d.crossRank(c, 1)
		add(slowWith, a, b)
		add(slowWith, b, a)
	}
	nic := map[int]bool{}
	for _, r := range facts.SortedKeys(slowWith) {
		if n := len(slowWith[r]); n >= 2 && 2*n > len(met[r]) {
			nic[r] = true
			partners := facts.SortedKeys(slowWith[r])
			var names []string
			for _, p := range partners {
				names = append(names, fmt.Sprint(p))
			}
			d.found = append(d.found, record.Finding{Severity: "FAIL", Stage: "host", Kind: "slow-nic", Part: d.o.Who(r) + " network path",
				Host: d.host(r), Ranks: []int{r},
				Msg:   fmt.Sprintf("slow with %d of the %d ranks it met on other hosts (ranks %s), fine alone and within its host", n, len(met[r]), strings.Join(names, ", ")),
				Cause: "this GPU's NIC, cable or switch port"})
		}
	}
	for i, c := range ids {
		if namedHosts[c.HA] || namedHosts[c.HB] {
			continue
		}
		a, b := d.crossRank(c, 0), d.crossRank(c, 1)
		if nic[a] || nic[b] {
			continue
		}
		f := record.Finding{Severity: "FAIL", Stage: "host", Ranks: []int{a, b}, Msg: why[i] + againWords(d.crossAgain[c]), Peers: peers[i], Unit: "GB/s"}
		if c.LA == c.LB {
			f.Kind, f.Part, f.Cause = "slow-rail", fmt.Sprintf("rail %d: %s ↔ %s", c.LA, d.o.Who(a), d.o.Who(b)), "the NIC, cable or switch port of this rail"
		} else {
			f.Kind, f.Part = "slow-cross-link", fmt.Sprintf("%s ↔ %s", d.o.Who(a), d.o.Who(b))
			f.Cause = fmt.Sprintf("the path between local rank %d of %s and local rank %d of %s (a cable or switch port that only their traffic crosses)",
				c.LA, d.hostList[c.HA], c.LB, d.hostList[c.HB])
		}
		d.found = append(d.found, f)
	}
	return nic
}

// crossFig is one pair across hosts as measured (every process has the
// ranks; rank 0 the figure).
type crossFig struct {
	crossID
	A, B int // world ranks
	Both float64
	// Tail is the slowest iteration's time over the fastest one's.
	Tail float64
}

// measureHostPairs measures, for each host pair of round, every pair of
// ranks across the two hosts, in rounds of disjoint pairs (CrossRounds: the
// rails first), all host pairs at once, and an allreduce over both hosts'
// ranks. step numbers the plan's rounds and advances.
func (d *crossRun) measureHostPairs(round [][2]int, step *int) ([]record.HostPairFigure, []crossFig, error) {
	var shifts [][]crossFig
	var unions [][]int
	for _, p := range round {
		ma, mb := d.members[d.hostList[p[0]]], d.members[d.hostList[p[1]]]
		for s, pairs := range CrossRounds(len(ma), len(mb)) {
			for len(shifts) <= s {
				shifts = append(shifts, nil)
			}
			for _, l := range pairs {
				shifts[s] = append(shifts[s], crossFig{crossID: crossID{HA: p[0], HB: p[1], LA: l[0], LB: l[1]}, A: ma[l[0]], B: mb[l[1]]})
			}
		}
		unions = append(unions, append(append([]int(nil), ma...), mb...))
	}
	var cross []crossFig
	for s, figs := range shifts {
		groups := make([][]int, len(figs))
		for i, f := range figs {
			groups[i] = []int{f.A, f.B}
		}
		l := d.layout(groups)
		hs, err := d.measureSplit(l, measure.SendRecv, []int64{d.o.BWSize}, "host")
		if err != nil {
			return nil, nil, err
		}
		what := "rails"
		if s > 0 {
			what = fmt.Sprintf("local rank l with l+%d on the other host", s)
		}
		d.step("host", *step, l, fmt.Sprintf("%s: sendrecv both ways at %s", what, words.Bytes(d.o.BWSize)))
		*step++
		for i := range figs {
			if h := hs[0][i]; h != nil {
				figs[i].Both = h.BusBW
				if h.Iter != nil && h.Iter.MinUS > 0 {
					figs[i].Tail = h.Iter.MaxUS / h.Iter.MinUS
				}
			}
		}
		cross = append(cross, figs...)
	}
	lu := d.layout(unions)
	hu, err := d.measureSplit(lu, measure.AllReduce, []int64{d.o.BWSize}, "host")
	if err != nil {
		return nil, nil, err
	}
	d.step("host", *step, lu, fmt.Sprintf("host pairs: allreduce at %s", words.Bytes(d.o.BWSize)))
	*step++
	var out []record.HostPairFigure
	if d.rank0 {
		for _, c := range cross {
			d.rep.Cross = append(d.rep.Cross, record.CrossFigure{HostA: d.hostList[c.HA], HostB: d.hostList[c.HB], A: c.A, B: c.B, LocalA: c.LA, LocalB: c.LB, Both: c.Both})
		}
		for i, p := range round {
			f := record.HostPairFigure{A: d.hostList[p[0]], B: d.hostList[p[1]], Round: *step - 1}
			if h := hu[0][i]; h != nil {
				f.BusBW = h.BusBW
			}
			d.rep.HostPair = append(d.rep.HostPair, f)
			out = append(out, f)
		}
	}
	return out, cross, nil
}

// crossClass is the link class of a pair across hosts: "rail" for the same
// local rank on both hosts, "cross-rail" for the rest (in a rail-optimised
// fabric those cross a spine or another GPU's NIC, and are their own peers).
func crossClass(c crossID) string {
	if c.LA == c.LB {
		return "rail"
	}
	return "cross-rail"
}

// judgeHosts finds slow host pairs and slow GPU pairs across hosts among
// everything measured.
func (d *crossRun) judgeHosts(pairs []record.HostPairFigure, cross []crossFig) hostResult {
	idx := map[string]int{}
	for i, h := range d.hostList {
		idx[h] = i
	}
	peak := d.nicPeak()
	var ss []rules.Sample
	for _, p := range pairs {
		ss = append(ss, rules.Sample{Key: p.A + "|" + p.B, Class: "host-pair", Value: p.BusBW, Expected: peak})
	}
	var res hostResult
	slow, fine := map[int]bool{}, map[int]bool{}
	flagged := map[string]bool{}
	for _, s := range rules.Judge(ss, d.o.Thresholds) {
		a, b, _ := strings.Cut(s.Key, "|")
		res.Slow = append(res.Slow, [2]int{idx[a], idx[b]})
		slow[idx[a]], slow[idx[b]] = true, true
		flagged[s.Key] = true
	}
	for _, p := range pairs {
		if !flagged[p.A+"|"+p.B] {
			fine[idx[p.A]], fine[idx[p.B]] = true, true
		}
	}
	var cs []rules.Sample
	byKey := map[string]crossID{}
	for _, c := range cross {
		key := fmt.Sprintf("%d|%d|%d|%d", c.HA, c.HB, c.LA, c.LB)
		byKey[key] = c.crossID
		cs = append(cs, rules.Sample{Key: key, Class: crossClass(c.crossID), Value: c.Both, Expected: peak})
	}
	for _, s := range rules.Suspects(cs, d.o.Thresholds) {
		res.Cross = append(res.Cross, byKey[s.Key])
		others := "the other rails"
		if s.Class != "rail" {
			others = "the other pairs of different local ranks across hosts"
		}
		res.CrossWhy = append(res.CrossWhy, fmt.Sprintf("%s GB/s both ways, %s %s GB/s%s", facts.GB(s.Value), others, facts.GB(s.Peers), facts.Drop(s.Value, s.Peers)))
		res.Peers = append(res.Peers, s.Peers)
	}
	// A host seen fine with one partner is cleared; one only seen slow is a
	// suspect, paired next with a host already seen fine.
	for h := range d.hostList {
		switch {
		case fine[h]:
			res.Healthy = append(res.Healthy, h)
		case slow[h]:
			res.Suspects = append(res.Suspects, h)
		}
	}
	return res
}

package doctor

import (
	"fmt"
	"slices"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
	"collbench/internal/words"
	"collbench/measure"
	"collbench/results"
)

// pairStage measures every pair of GPUs within each host.
type pairStage struct{}

func (pairStage) Name(s *site) string {
	return "every " + facts.Unit(s.o.Backend) + " pair within a host"
}
func (pairStage) Skip(d *site) string {
	for _, h := range d.hostList {
		if len(d.members[h]) > 1 {
			return ""
		}
	}
	return "no host has two " + facts.Unit(d.o.Backend) + "s"
}
func (pairStage) Run(m *meter, before outcome) (outcome, error) {
	d := &pairRun{meter: m, before: before, outcome: outcome{slowPairs: map[string]rules.Suspect{}}}
	err := d.pairs()
	return d.outcome, err
}

// pairRun is one run of the stage: the pairs it finds slow, knowing the
// ranks found slow alone before it.
type pairRun struct {
	*meter
	before outcome
	outcome
	// model, set by tests, measures a round of pairs within hosts on a
	// model of the machine instead of the world.
	model func(pairs [][2]int, round int) map[[2]int]record.PairFigure
}

// pairs measures every pair of GPUs within each host, in rounds of
// disjoint pairs (all hosts at once): one way each direction, both ways at
// once, at the bandwidth size and the latency size.
func (d *pairRun) pairs() error {
	var rounds [][][2]int
	for _, h := range d.hostList {
		m := d.members[h]
		for k, round := range rules.PairRounds(len(m)) {
			for len(rounds) <= k {
				rounds = append(rounds, nil)
			}
			for _, p := range round {
				rounds[k] = append(rounds[k], [2]int{m[p[0]], m[p[1]]})
			}
		}
	}
	if len(rounds) == 0 {
		return nil
	}
	// Quick mode too measures every pair: one round would leave most of a
	// host's NVLink pairs unseen, and node admission is there to see them.
	d.plan = len(rounds)
	figs := map[[2]int]record.PairFigure{}
	for k, pairs := range rounds {
		got, err := d.pairRound(pairs, k)
		if err != nil {
			return err
		}
		for key, f := range got {
			figs[key] = f
		}
	}
	var sus []rules.Suspect
	if d.rank0 {
		for _, f := range figs {
			d.rep.Pairs = append(d.rep.Pairs, f)
		}
		slices.SortFunc(d.rep.Pairs, func(a, b record.PairFigure) int {
			if a.A != b.A {
				return a.A - b.A
			}
			return a.B - b.B
		})
		sus = d.judgePairs(figs)
	}
	if err := d.agree(&sus); err != nil {
		return err
	}
	if len(sus) == 0 {
		return nil
	}
	// A pair with a rank already found slow alone is explained by it.
	sus = slices.DeleteFunc(sus, func(s rules.Suspect) bool {
		p := parsePair(s.Key)
		_, a := d.before.slowRanks[p[0]]
		_, b := d.before.slowRanks[p[1]]
		return a || b
	})
	// Measure the suspects again, only them, in rounds of disjoint pairs;
	// one attempt that is not slow clears a suspect. Host-memory ranks
	// share their machine's cores, so there one suspect of a machine is
	// measured at a time: two pairs measured at once on a 2-core host each
	// ran at a fraction of their speed, and a healthy pair was named
	// (-79%, once in 8 runs). Machines apart (other boot ids) share no
	// cores and measure theirs at once, so 1,024 hosts take as many rounds
	// as one. There each suspect is followed by a healthy pair of its host,
	// which shares those cores (a control): a suspect's peers' figure moves
	// by the control's figure against its first one (never up), so cores
	// taken by another workload for a second clear the suspect measured in
	// it. A drill beside another one on 2 cores named a healthy pair slow
	// in four measurements in a row, its peers unmeasured meanwhile.
	alone := facts.HostMemory(d.o.Backend)
	var machineOf func(int) int
	if alone {
		m, err := d.machines()
		if err != nil {
			return err
		}
		machineOf = func(r int) int { return m[d.host(r)] }
	}
	round := len(rounds)
	// A suspect is named after confirmAttempts measurements again that
	// are slow, and cleared by one that is not, except one whose control
	// ran at under busyScale of its first figure: so busy a moment hides a
	// slow pair (a throttled link runs no slower beside busy cores), so
	// that one is measured again instead, busyRetries times at most.
	tally := againTally{slow: map[string]int{}, busy: map[string]int{}}
	var confirmed []rules.Suspect
	for attempt := 0; attempt < confirmAttempts+busyRetries && len(sus) > 0; attempt++ {
		var keys [][2]int
		for _, s := range sus {
			keys = append(keys, parsePair(s.Key))
		}
		again := suspectRounds(keys, machineOf)
		isSuspect := map[[2]int]bool{}
		for _, k := range keys {
			isSuspect[k] = true
		}
		re := map[[2]int]record.PairFigure{}
		ctlNow := map[[2]int]record.PairFigure{} // by suspect: its control measured after it
		for _, pairs := range again {
			got, err := d.pairRound(pairs, round)
			if err != nil {
				return err
			}
			round++
			for key, f := range got {
				re[key] = f
			}
			if !alone {
				continue
			}
			if err := d.pairControls(pairs, rounds, isSuspect, machineOf, attempt, &round, ctlNow); err != nil {
				return err
			}
		}
		var v againVerdict
		if d.rank0 {
			v = d.judgeAgain(sus, re, ctlNow, figs, tally)
		}
		if err := d.agree(&v); err != nil {
			return err
		}
		confirmed = append(confirmed, v.Done...)
		sus = v.Still
	}
	sus = append(confirmed, sus...)
	for _, s := range sus {
		d.slowPairs[s.Key] = s
	}
	return nil
}

// againTally counts, on rank 0, each suspect's measurements again that
// were slow, and those judged at a busy moment and measured again.
type againTally struct{ slow, busy map[string]int }

// againVerdict is one attempt's outcome: the suspects named (slow in
// confirmAttempts measurements again) and those measured again next.
type againVerdict struct{ Done, Still []rules.Suspect }

// judgeAgain judges each suspect's figure measured again (re) against its
// peers, scaled by its control's figure now against its first one (figs);
// a suspect without a figure is cleared.
func (d *pairRun) judgeAgain(sus []rules.Suspect, re, ctlNow, figs map[[2]int]record.PairFigure, t againTally) againVerdict {
	var v againVerdict
	for _, s := range sus {
		p := parsePair(s.Key)
		f, ok := re[p]
		if !ok {
			continue
		}
		r := d.o.Thresholds.For(f.Class)
		x := metric(f, s.Metric)
		scale := 1.0
		if c, ok := ctlNow[p]; ok {
			if first, now := metric(figs[pairKey(c.A, c.B)], s.Metric), metric(c, s.Metric); first > 0 && now > 0 {
				scale = min(1, now/first)
			}
		}
		switch {
		case x < s.Peers*scale*(1-r.Drop) || (f.Expected > 0 && r.PeakFraction > 0 && x < r.PeakFraction*f.Expected):
			if t.slow[s.Key]++; t.slow[s.Key] >= confirmAttempts {
				v.Done = append(v.Done, s)
			} else {
				v.Still = append(v.Still, s)
			}
		case scale < busyScale && t.busy[s.Key] < busyRetries:
			t.busy[s.Key]++
			v.Still = append(v.Still, s)
		}
	}
	return v
}

// pairControls measures the control of each suspect of one round of
// pairs measured again (pairControl), right after that round and in as
// few rounds as they fit, one pair of a machine at a time, and puts each
// suspect's control figure in now.
func (d *pairRun) pairControls(pairs [][2]int, rounds [][][2]int, isSuspect map[[2]int]bool, machineOf func(int) int, attempt int, round *int, now map[[2]int]record.PairFigure) error {
	ctlOf := map[[2]int][2]int{}
	var ctls [][2]int
	picked := map[[2]int]bool{}
	for _, p := range pairs {
		if c, ok := pairControl(rounds, isSuspect, d.before.slowRanks, d.host, machineOf, p, attempt); ok {
			ctlOf[p] = c
			if !picked[c] {
				picked[c] = true
				ctls = append(ctls, c)
			}
		}
	}
	fig := map[[2]int]record.PairFigure{}
	for _, cs := range suspectRounds(ctls, machineOf) {
		got, err := d.pairRound(cs, *round)
		if err != nil {
			return err
		}
		*round++
		for key, f := range got {
			fig[key] = f
		}
	}
	for p, c := range ctlOf {
		if f, ok := fig[c]; ok {
			now[p] = f
		}
	}
	return nil
}

// pairControl is the healthy pair measured after suspect p on a backend
// whose ranks share the host's cores: a pair from the first rounds that is
// no suspect and has no rank found slow alone, of p's host and apart from
// p's ranks where there is one, else of p's host with one of p's ranks,
// else of another host on p's machine (simulated hosts); the attempt-th
// such (in turn), or none. Every process picks the same one. A pair of
// p's host shares the cores another workload takes from p; another
// host's only where it runs on the same machine (on a model of two hosts
// of four ranks, a workload that took one host's cores from the last
// round of the first pass named both of that round's pairs, whose one
// disjoint pair was the other suspect, when their control came from the
// other host, TestPairsBusyHostWindow); a pair on another machine would
// move a suspect's bar by that machine's load.
func pairControl(rounds [][][2]int, isSuspect map[[2]int]bool, slowRanks map[int]rules.Suspect, hostOf func(int) string, machineOf func(int) int, p [2]int, attempt int) ([2]int, bool) {
	healthy := func(c [2]int) bool {
		_, a := slowRanks[c[0]]
		_, b := slowRanks[c[1]]
		return !a && !b && !isSuspect[c]
	}
	var apart, touching, elsewhere [][2]int
	for _, round := range rounds {
		for _, c := range round {
			if c = pairKey(c[0], c[1]); hostOf(c[0]) != hostOf(p[0]) || !healthy(c) {
				continue
			}
			if touches([][2]int{p}, c) {
				touching = append(touching, c)
			} else {
				apart = append(apart, c)
			}
		}
	}
	if len(apart) == 0 && len(touching) == 0 {
		for _, round := range rounds {
			for _, c := range round {
				if c = pairKey(c[0], c[1]); hostOf(c[0]) != hostOf(p[0]) && machineOf(c[0]) == machineOf(p[0]) && healthy(c) {
					elsewhere = append(elsewhere, c)
				}
			}
		}
	}
	for _, list := range [][][2]int{apart, touching, elsewhere} {
		if len(list) > 0 {
			return list[attempt%len(list)], true
		}
	}
	return [2]int{}, false
}

// suspectRounds places pairs in rounds measured one after the other:
// disjoint pairs together, and where machineOf is given (ranks that share
// their machine's cores) at most one pair of a machine in a round.
func suspectRounds(pairs [][2]int, machineOf func(int) int) [][][2]int {
	var out [][][2]int
	for _, p := range pairs {
		placed := false
		for i := range out {
			if touches(out[i], p) || (machineOf != nil && slices.ContainsFunc(out[i], func(q [2]int) bool { return machineOf(q[0]) == machineOf(p[0]) })) {
				continue
			}
			out[i] = append(out[i], p)
			placed = true
			break
		}
		if !placed {
			out = append(out, [][2]int{p})
		}
	}
	return out
}

// machineID names the machine host h runs on: its boot id where
// machines gives one, else the host itself.
func machineID(machines map[string]string, h string) string {
	if m := machines[h]; m != "" {
		return "machine " + m
	}
	return "host " + h
}

// machines numbers the machines the world's hosts run on, by host: hosts
// of one boot id (Options.Machines: simulated hosts on one machine, launch
// --nodes) share its cores; a host without one is a machine of its own.
// Rank 0's view decides, and every process holds it.
func (d *pairRun) machines() (map[string]int, error) {
	var num []int // by index in hostList, which every process has alike
	if d.rank0 {
		ids := map[string]int{}
		for _, h := range d.hostList {
			id := machineID(d.o.Machines, h)
			if _, ok := ids[id]; !ok {
				ids[id] = len(ids)
			}
			num = append(num, ids[id])
		}
	}
	if err := d.agree(&num); err != nil {
		return nil, err
	}
	out := map[string]int{}
	for i, h := range d.hostList {
		if i < len(num) {
			out[h] = num[i]
		}
	}
	return out, nil
}

// pairRound measures one round of disjoint pairs within hosts: on the
// world (measurePairs), or on the model of a machine a test gives.
func (d *pairRun) pairRound(pairs [][2]int, round int) (map[[2]int]record.PairFigure, error) {
	if d.model != nil {
		return d.model(pairs, round), nil
	}
	return d.measurePairs(pairs, "pair", round)
}

// measurePairs runs one round of disjoint pairs.
func (d *pairRun) measurePairs(pairs [][2]int, stage string, round int) (map[[2]int]record.PairFigure, error) {
	groups := make([][]int, len(pairs))
	rev := make([][]int, len(pairs))
	for i, p := range pairs {
		groups[i] = []int{p[0], p[1]}
		rev[i] = []int{p[1], p[0]}
	}
	l := d.layout(groups)
	gw, done, err := d.split(l)
	if err != nil {
		return nil, err
	}
	both, err := d.measure(l, gw, measure.SendRecv, []int64{d.o.BWSize, d.o.LatSize}, stage)
	if err == nil {
		var ab [][]*results.Half
		if ab, err = d.measure(l, gw, measure.Broadcast, []int64{d.o.BWSize}, stage); err == nil {
			done()
			done = func() {}
			lr := d.layout(rev)
			var gr measure.World
			var closeR func()
			if gr, closeR, err = d.split(lr); err == nil {
				var ba [][]*results.Half
				ba, err = d.measure(lr, gr, measure.Broadcast, []int64{d.o.BWSize}, stage)
				closeR()
				if err == nil {
					d.step(stage, round, l, fmt.Sprintf("sendrecv both ways at %s and %s; broadcast each way at %s",
						words.Bytes(d.o.BWSize), words.Bytes(d.o.LatSize), words.Bytes(d.o.BWSize)))
					out := map[[2]int]record.PairFigure{}
					for i, p := range pairs {
						class, expected := d.linkClass(p[0], p[1])
						f := record.PairFigure{A: p[0], B: p[1], Host: d.host(p[0]), Class: class, Expected: expected}
						if h := both[0][i]; h != nil {
							f.Both = h.BusBW
						}
						if h := both[1][i]; h != nil {
							f.LatencyUS = h.TimeUS
						}
						if h := ab[0][i]; h != nil {
							f.AB = h.BusBW
						}
						if h := ba[0][i]; h != nil {
							f.BA = h.BusBW
						}
						out[pairKey(p[0], p[1])] = f
					}
					return out, nil
				}
			}
		}
	}
	done()
	return nil, err
}

// linkClass is the link label between two ranks of a host and the
// bandwidth per direction it should carry (0 when unknown).
func (d *pairRun) linkClass(a, b int) (string, float64) {
	f := d.facts[d.host(a)]
	ia, oka := d.devIndex[a]
	ib, okb := d.devIndex[b]
	if f == nil || !oka || !okb || ia >= len(f.Matrix) || ib >= len(f.Matrix[ia]) {
		return "same host", 0
	}
	label := f.Matrix[ia][ib]
	var n int
	if _, err := fmt.Sscanf(label, "NV%d", &n); err == nil && n > 0 && ia < len(f.LinkGBps) {
		return label, float64(n) * f.LinkGBps[ia]
	}
	// PCIe: the slower end's generation and width.
	var rate float64
	for _, i := range []int{ia, ib} {
		for _, g := range f.GPUs {
			if g.Index == i {
				r := pcieGBps(g.PCIeGenMax, g.PCIeWidthMax)
				if rate == 0 || (r > 0 && r < rate) {
					rate = r
				}
			}
		}
	}
	return label, rate
}

// pcieGBps is a PCIe link's bandwidth per direction in GB/s.
func pcieGBps(gen, width int) float64 {
	perLane := map[int]float64{1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}[gen]
	return perLane * float64(width)
}

func (d *pairRun) judgePairs(figs map[[2]int]record.PairFigure) []rules.Suspect {
	var oneway, both []rules.Sample
	keys := make([][2]int, 0, len(figs))
	for k := range figs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	})
	for _, k := range keys {
		f := figs[k]
		key := fmt.Sprintf("%d-%d", k[0], k[1])
		oneway = append(oneway, rules.Sample{Key: key, Class: f.Class, Value: f.OneWay(), Expected: f.Expected})
		both = append(both, rules.Sample{Key: key, Class: f.Class, Value: f.Both, Expected: f.Expected})
	}
	var out []rules.Suspect
	seen := map[string]bool{}
	for i, list := range [][]rules.Suspect{rules.Suspects(oneway, d.o.Thresholds), rules.Suspects(both, d.o.Thresholds)} {
		for _, s := range list {
			if !seen[s.Key] {
				seen[s.Key] = true
				s.Metric = []string{"one-way", "both-ways"}[i]
				out = append(out, s)
			}
		}
	}
	return out
}

// metric is a pair's figure by name.
func metric(f record.PairFigure, name string) float64 {
	if name == "both-ways" {
		return f.Both
	}
	return f.OneWay()
}

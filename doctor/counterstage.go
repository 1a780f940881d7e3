package doctor

import (
	"fmt"
	"slices"
	"strings"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
)

// counterFindings judges the counters that grew, summed over the stages
// per part: growth past its class's rule is abnormal. What a person reads
// is one line per host and counter kind, naming how many parts grew past
// their rule and the worst of them with its rate; every part's growth stays
// in the JSON (counter_growth). A counter that means lost data or a lost
// link (counterFails) is a FAIL per part. Abnormal growth on a part that a
// bandwidth FAIL already names joins that FAIL as its evidence, one clause
// per counter kind. fs are the findings so far; the result is fs with the
// counters' findings added.
func (d *judging) counterFindings(fs []record.Finding) []record.Finding {
	type key struct {
		host    string
		part    facts.CounterPart
		counter string
	}
	// Each part's growth: the stages' growth summed.
	sum := map[key]*facts.CounterGrowth{}
	var order []key
	details := map[key][]string{}
	for i := range d.counters {
		d.counters[i].Moved = d.movedOver(d.counters[i])
	}
	for _, g := range d.counters {
		k := key{g.Host, g.Part, g.Counter}
		s := sum[k]
		if s == nil {
			s = &facts.CounterGrowth{Host: g.Host, Part: g.Part, Counter: g.Counter}
			sum[k] = s
			order = append(order, k)
		}
		s.After += g.Growth()
		s.Bytes += g.Bytes
		s.Moved += g.Moved
		s.Seconds += g.Seconds
		if g.Detail != "" && !slices.Contains(details[k], g.Detail) {
			details[k] = append(details[k], g.Detail)
		}
	}
	// rollup gathers the abnormal parts of one counter kind, on one host
	// or inside one FAIL.
	type rollup struct {
		host, counter string
		class         string
		rule          rules.CounterRule
		parts         []facts.CounterGrowth
		ranks         []int
		fail          int // the FAIL it joins, -1 none
	}
	var groups []*rollup
	find := func(host, counter string, fail int) *rollup {
		for _, g := range groups {
			if g.host == host && g.counter == counter && g.fail == fail {
				return g
			}
		}
		g := &rollup{host: host, counter: counter, fail: fail}
		groups = append(groups, g)
		return g
	}
	for _, k := range order {
		g := *sum[k]
		if g.Bytes == 0 {
			// A count that grew in a stage that sent nothing over the part
			// is judged against the whole run's traffic over it.
			g.Moved = max(g.Moved, d.movedInRun(g))
		}
		class := d.counterClass(g)
		rule := d.o.Counters.For(class, g.Counter)
		if float64(g.Growth()) <= rule.Allowed(g.GB(), g.Seconds/60) {
			continue
		}
		ranks := d.ranksOfPart(g)
		if c, ok := rules.CounterFails[g.Counter]; ok {
			msg := fmt.Sprintf("%s grew by %d during the run", g.Counter, g.Growth())
			if g.Counter == facts.CtrXID {
				msg = fmt.Sprintf("%d critical XID event(s) during the run (XID %s)", g.Growth(), strings.Join(details[k], ", "))
			}
			fs = append(fs, record.Finding{Severity: "FAIL", Stage: "health", Kind: "counter-growth", Part: g.Host + " " + g.Part.Name(), Host: g.Host, Ranks: ranks,
				Value: float64(g.Growth()), Unit: g.Counter, Msg: msg, Cause: c})
			continue
		}
		r := find(g.Host, g.Counter, failNaming(fs, g.Host, ranks, g.Part.NIC != ""))
		r.class, r.rule = class, rule
		r.parts = append(r.parts, g)
		for _, x := range ranks {
			if !slices.Contains(r.ranks, x) {
				r.ranks = append(r.ranks, x)
			}
		}
	}
	for _, r := range groups {
		worst := r.parts[0]
		for _, p := range r.parts[1:] {
			if facts.Rate(p) > facts.Rate(worst) {
				worst = p
			}
		}
		what := rules.PartWord(worst.Part)
		msg := fmt.Sprintf("%s grew past its normal rate on %d %s during the run; the worst, %s, by %d (%s)",
			r.counter, len(r.parts), facts.Plural(len(r.parts), what), worst.Part.Name(), worst.Growth(), rules.RateWords(worst))
		if r.rule.PerGB > 0 || r.rule.PerMinute > 0 {
			msg += fmt.Sprintf("; normal for %s: up to %s", r.class, rules.RuleWords(r.rule))
		} else {
			msg += "; normal: none"
		}
		if r.fail >= 0 {
			fs[r.fail].Msg += "; " + msg
			continue
		}
		slices.Sort(r.ranks)
		fs = append(fs, record.Finding{Severity: "WARN", Stage: "health", Kind: "counter-growth", Part: "host " + r.host, Host: r.host, Ranks: r.ranks,
			Value: float64(worst.Growth()), Unit: r.counter, Msg: msg, Cause: rules.CounterCauses[r.counter]})
	}
	return fs
}

// counterClass is the hardware class whose rules judge g.
func (d *judging) counterClass(g facts.CounterGrowth) string {
	if g.Part.NIC != "" {
		dev, _, _ := strings.Cut(g.Part.NIC, " ")
		return "nic:" + dev
	}
	for r := 0; r < d.n; r++ {
		if d.host(r) == g.Host && r < len(d.o.Devices) && strings.EqualFold(d.o.Devices[r].BusID, g.Part.BusID) {
			return "gpu:" + d.deviceName(r)
		}
	}
	if f := d.facts[g.Host]; f != nil {
		for _, x := range f.GPUs {
			if x.Index == g.Part.GPU {
				return "gpu:" + x.Name
			}
		}
	}
	return "gpu:device"
}

// ranksOfPart are the world ranks whose traffic crossed the part: the rank
// driving the GPU, or every rank of the host for a NIC port.
func (d *judging) ranksOfPart(g facts.CounterGrowth) []int {
	var out []int
	for r := 0; r < d.n; r++ {
		if d.host(r) != g.Host {
			continue
		}
		if g.Part.NIC != "" || (r < len(d.o.Devices) && strings.EqualFold(d.o.Devices[r].BusID, g.Part.BusID)) {
			out = append(out, r)
		}
	}
	return out
}

// movedInRun is doctor's tally of the traffic over g's part in every stage.
func (d *judging) movedInRun(g facts.CounterGrowth) float64 {
	total := 0.0
	for stage := range d.moved {
		x := g
		x.Stage = stage
		total += d.movedOver(x)
	}
	return total
}

// movedOver is doctor's tally of the traffic over g's part in g's stage:
// a GPU's links (spread evenly over its NVLinks for one link), its memory
// for its own counters, or every rank of the host's traffic across hosts
// for a NIC port.
func (d *judging) movedOver(g facts.CounterGrowth) float64 {
	m := d.moved[g.Stage]
	total := 0.0
	for _, r := range d.ranksOfPart(g) {
		t := m[r]
		if t == nil {
			continue
		}
		switch {
		case g.Part.NIC != "":
			total += t.Net
		case g.Part.Link >= 0:
			links := 1
			if h, ok := d.health(r); ok && h.NVLinksActive > 0 {
				links = h.NVLinksActive
			}
			total += t.Link / float64(links)
		default:
			total += t.Link + t.Net + t.Local
		}
	}
	if g.Part.NIC != "" {
		// The host's InfiniBand/RoCE ports share its traffic across hosts.
		ports := 0
		if f := d.facts[g.Host]; f != nil {
			for _, n := range f.NICs {
				if n.Kind != "ethernet" {
					ports++
				}
			}
		}
		if ports > 1 {
			total /= float64(ports)
		}
	}
	return total
}

// failNaming is the index of a bandwidth FAIL in fs on host that names one
// of ranks (-1: none). A NIC's growth joins only a FAIL of traffic between
// hosts, the only traffic that crossed it: a slow GPU or NVLink on the same
// host is another part's fault.
func failNaming(fs []record.Finding, host string, ranks []int, nic bool) int {
	for i, f := range fs {
		if f.Severity != "FAIL" || f.Stage == "health" || f.Stage == "data" || f.Stage == "run" {
			continue
		}
		if nic && f.Stage != "host" {
			continue
		}
		if f.Host == host && f.Kind == "slow-host" {
			return i
		}
		for _, r := range ranks {
			if slices.Contains(f.Ranks, r) {
				return i
			}
		}
	}
	return -1
}

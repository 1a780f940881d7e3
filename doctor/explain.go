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
)

// evidence is everything the verdict reads: where the ranks run, what the
// stages decided, what measuring observed, and the record's figures that
// findings cite (pairs, NVML's samples, the counters that grew), as rank
// 0 holds them.
type evidence struct {
	*site
	outcome
	observed
	pairFigs []record.PairFigure
	samples  []facts.StageSample
	counters []facts.CounterGrowth
}

// judged is the verdict: its findings, whether the run is healthy, and the
// record's figures as the verdict completes them (the transport beside
// each pair, the bytes moved beside each counter, the paths judged).
type judged struct {
	findings  []record.Finding
	healthy   bool
	pairs     []record.PairFigure
	counters  []facts.CounterGrowth
	pathsSeen []record.PathsSeen
	slowPaths []record.PathFigure
}

// applyVerdict puts a verdict in the report.
func applyVerdict(rep *record.Report, j judged) {
	rep.Findings, rep.Healthy, rep.Pairs, rep.Counters = j.findings, j.healthy, j.pairs, j.counters
	rep.PathsSeen, rep.SlowPaths = j.pathsSeen, j.slowPaths
}

// judging is one verdict being reached: the evidence, and what the rules
// decided so far besides their findings.
type judging struct {
	evidence
	// slowHosts are the hosts whose every rank is slow alone (the rule
	// over ranks slow alone decides it; those after it read it).
	slowHosts map[string]bool
	pathsSeen []record.PathsSeen
	slowPaths []record.PathFigure
}

// verdictRules turn the evidence into findings, in order, naming the most
// specific part that explains each observation: the health facts, wrong
// data by the rank that sent it, ranks and hosts slow alone, slow pairs
// within hosts by a slow rank or host, a rank slow on every link by
// itself, what the stages across hosts and over the world named where
// nothing above explains it, NCCL's slow paths, GPUs another workload
// shared, and the error counters that grew. Each rule adds its findings
// to those before it, which it may read.
var verdictRules = []func(v *judging, fs []record.Finding) []record.Finding{
	(*judging).healthRule,
	(*judging).dataRule,
	(*judging).aloneRule,
	(*judging).pairRule,
	(*judging).stagesRule,
	(*judging).pathRule,
	(*judging).sharedRule,
	(*judging).counterFindings,
}

// reachVerdict judges the evidence: a pure function of it (the evidence's
// figures are copied before the verdict completes them).
func reachVerdict(e evidence) judged {
	e.pairFigs = slices.Clone(e.pairFigs)
	e.counters = slices.Clone(e.counters)
	v := &judging{evidence: e, slowHosts: map[string]bool{}}
	var fs []record.Finding
	for _, rule := range verdictRules {
		fs = rule(v, fs)
	}
	// Transports beside every pair figure.
	for i := range v.pairFigs {
		if tr := v.transport(v.pairFigs[i].A, v.pairFigs[i].B); tr != "" {
			v.pairFigs[i].Transport = tr
		}
	}
	record.SortFindings(fs)
	if fs == nil {
		fs = []record.Finding{}
	}
	out := judged{findings: fs, healthy: true, pairs: v.pairFigs, counters: v.counters, pathsSeen: v.pathsSeen, slowPaths: v.slowPaths}
	for _, f := range fs {
		if f.Severity == "FAIL" {
			out.healthy = false
		}
	}
	return out
}

// healthRule: what the health facts alone say.
func (d *judging) healthRule(fs []record.Finding) []record.Finding {
	return append(fs, rules.HealthFindings(d.o.Facts)...)
}

// dataRule: who sent wrong values.
func (d *judging) dataRule(fs []record.Finding) []record.Finding {
	return append(fs, d.dataFindings()...)
}

// aloneRule: the ranks slow alone, and the hosts whose every rank is.
func (d *judging) aloneRule(fs []record.Finding) []record.Finding {
	alone, slowHosts := d.aloneFindings()
	d.slowHosts = slowHosts
	return append(fs, alone...)
}

// explained says whether a rank slow alone, or its host, explains what
// the ranks rs took part in.
func (d *judging) explained(rs ...int) bool {
	for _, r := range rs {
		if _, ok := d.slowRanks[r]; ok || d.slowHosts[d.host(r)] {
			return true
		}
	}
	return false
}

// pairRule: the slow pairs within hosts that no rank slow alone explains;
// a rank slow with two or more partners is named itself, a host whose
// every pair is slow as the host.
func (d *judging) pairRule(fs []record.Finding) []record.Finding {
	var pairs [][2]int
	for key := range d.slowPairs {
		if p := parsePair(key); !d.explained(p[0], p[1]) {
			pairs = append(pairs, p)
		}
	}
	slices.SortFunc(pairs, func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	})
	// A host whose every GPU pair is slow (three or more ranks) is one
	// finding about the host's peer-to-peer path, not one per rank.
	pairs, fs = d.hostWidePairs(pairs, fs)
	partners := map[int][]int{}
	for _, p := range pairs {
		partners[p[0]] = append(partners[p[0]], p[1])
		partners[p[1]] = append(partners[p[1]], p[0])
	}
	linkRank := map[int]bool{}
	for r, ps := range partners {
		if len(ps) >= 2 {
			linkRank[r] = true
		}
	}
	for _, r := range facts.SortedKeys(linkRank) {
		ps := partners[r]
		slices.Sort(ps)
		fs = append(fs, record.Finding{Severity: "FAIL", Stage: "pair", Kind: "slow-rank-links", Part: d.o.Who(r), Host: d.host(r), Ranks: []int{r},
			Msg:   fmt.Sprintf("fine alone but slow with %d partners (ranks %s)", len(ps), words.Ints(ps)),
			Cause: "its own link: PCIe or NVLink of this GPU, or its NIC"})
	}
	for _, p := range pairs {
		if linkRank[p[0]] || linkRank[p[1]] {
			continue
		}
		fs = append(fs, d.slowPairFinding(p))
	}
	return fs
}

// stagesRule: what the stages across hosts and over the world named
// themselves, where the slow ranks or hosts above do not explain it; the
// world is named only when nothing else is.
func (d *judging) stagesRule(fs []record.Finding) []record.Finding {
	for _, f := range d.found {
		if f.Stage == "host" && (d.slowHosts[f.Host] || (len(f.Ranks) > 0 && d.explained(f.Ranks...))) {
			continue
		}
		if f.Stage == "host" && f.Kind == "slow-host-link" && len(d.slowHosts) > 0 {
			continue
		}
		if f.Stage == "world" && len(fs) > 0 {
			continue
		}
		fs = append(fs, f)
	}
	return fs
}

// pathRule: paths NCCL's proxy showed slow inside doctor's collectives,
// where nothing above names their ends already. A path is covered by a
// finding that names either end's rank, or both its hosts (a slow link
// between two hosts), by the fabric named as a whole, or, between
// leaves, by a slow uplink.
func (d *judging) pathRule(fs []record.Finding) []record.Finding {
	named := map[int]bool{}
	var hostParts []string
	uplink, fabric := false, false
	for _, f := range fs {
		for _, r := range f.Ranks {
			named[r] = true
		}
		if f.Stage == "host" {
			hostParts = append(hostParts, f.Part)
		}
		uplink = uplink || f.Kind == "slow-uplink"
		fabric = fabric || f.Kind == "slow-fabric"
	}
	covered := func(from, to int) bool {
		if named[from] || named[to] || d.explained(from, to) {
			return true
		}
		if fabric && d.host(from) != d.host(to) {
			return true
		}
		if fab := d.o.Fabric; uplink && fab != nil && fab.Leaf[d.host(from)] != fab.Leaf[d.host(to)] {
			return true
		}
		for _, p := range hostParts {
			words := strings.Fields(p)
			if slices.Contains(words, d.host(from)) && slices.Contains(words, d.host(to)) {
				return true
			}
		}
		return false
	}
	return append(fs, d.pathFindings(covered)...)
}

// sharedRule: a GPU another workload shared is always in the verdict: a
// FAIL above names the workload as its cause; one whose figures held is a
// WARN.
func (d *judging) sharedRule(fs []record.Finding) []record.Finding {
	failed := map[int]bool{}
	for _, f := range fs {
		if f.Severity == "FAIL" {
			for _, r := range f.Ranks {
				failed[r] = true
			}
		}
	}
	return append(fs, d.sharedFindings(func(r int) bool { return failed[r] })...)
}

// aloneFindings names the ranks slow alone, and as the host a host whose
// every rank is slow alike; it says which hosts those are.
func (d *judging) aloneFindings() ([]record.Finding, map[string]bool) {
	var fs []record.Finding
	slowHosts := map[string]bool{}
	byHost := map[string][]int{}
	for r := range d.slowRanks {
		byHost[d.host(r)] = append(byHost[d.host(r)], r)
	}
	for _, h := range d.hostList {
		rs := byHost[h]
		// Every GPU of a host slow alike is the host: against the other
		// hosts, or, on one host, against what its GPUs should do.
		// GPUs that lost their time to another workload are each named
		// with theirs, never folded into the host.
		belowExpectation, timeShared := true, false
		for _, r := range rs {
			belowExpectation = belowExpectation && d.slowRanks[r].Metric == "expectation"
			timeShared = timeShared || d.slowRanks[r].Metric == "time share"
		}
		if (len(d.hostList) > 1 || belowExpectation) && !timeShared && len(rs) == len(d.members[h]) && len(rs) > 1 {
			slowHosts[h] = true
			slices.Sort(rs)
			var vals, peers []float64
			for _, r := range rs {
				vals = append(vals, d.slowRanks[r].Value)
				peers = append(peers, d.slowRanks[r].Peers)
			}
			v, p := facts.Median(vals), facts.Median(peers)
			than := "the other hosts'"
			if belowExpectation {
				than = "a healthy one of their model"
			}
			fs = append(fs, record.Finding{Severity: "FAIL", Stage: "host", Kind: "slow-host", Part: "host " + h, Host: h, Ranks: rs,
				Value: v, Peers: p, Msg: fmt.Sprintf("every one of its %d ranks is slow alone: %s, %s %s%s", len(rs), facts.GB(v), than, facts.GB(p), facts.Drop(v, p)),
				Cause: d.causeOf(rs, "the whole host: its power or thermal state, clocks, CPU or memory, or a shared bus")})
		}
	}
	ranks := make([]int, 0, len(d.slowRanks))
	for r := range d.slowRanks {
		if !slowHosts[d.host(r)] {
			ranks = append(ranks, r)
		}
	}
	slices.Sort(ranks)
	for _, r := range ranks {
		s := d.slowRanks[r]
		fs = append(fs, record.Finding{Severity: "FAIL", Stage: "gpu", Kind: "slow-gpu", Part: d.o.Who(r), Host: d.host(r), Ranks: []int{r},
			Value: s.Value, Peers: s.Peers, Expected: s.Expected, Msg: fmt.Sprintf("slow alone: %s%s", s.Why, facts.Drop(s.Value, s.Peers)),
			Cause: d.causeOf([]int{r}, "another workload on this GPU, clocks held down, a failing GPU, or its host issuing the work late (a busy CPU)")})
	}
	return fs, slowHosts
}

// slowPairFinding names one slow pair of GPUs with its figures and the
// transport NCCL used over it.
func (d *judging) slowPairFinding(p [2]int) record.Finding {
	s := d.slowPairs[fmt.Sprintf("%d-%d", p[0], p[1])]
	f := d.pairFigure(p)
	part := d.pairName(p[0], p[1])
	msg := fmt.Sprintf("%s GB/s one way and %s GB/s both ways", facts.GB(f.OneWay()), facts.GB(f.Both))
	// A pair with no peers of its class is its own median: only the
	// expectation says anything then.
	if s.Peers > 0 && math.Abs(s.Value-s.Peers) > 0.01*s.Peers {
		msg += fmt.Sprintf(", peers %s GB/s%s", facts.GB(s.Peers), facts.Drop(s.Value, s.Peers))
	}
	if f.Expected > 0 {
		msg += fmt.Sprintf(", expected %s GB/s over %s", facts.GB(f.Expected), f.Class)
	}
	cause := "the link between these two: NVLink, PCIe switch or the path through the CPU"
	if tr := d.transport(p[0], p[1]); tr != "" {
		f.Transport = tr
		cause = fmt.Sprintf("NCCL used %s over this pair", tr)
		if strings.HasPrefix(f.Class, "NV") && !strings.HasPrefix(tr, "P2P") {
			cause += fmt.Sprintf(" although it has %s (peer-to-peer disabled or unavailable)", f.Class)
		}
	}
	return record.Finding{Severity: "FAIL", Stage: "pair", Kind: "slow-pair", Part: part, Host: d.host(p[0]), Ranks: []int{p[0], p[1]},
		Value: s.Value, Peers: s.Peers, Expected: f.Expected, Unit: "GB/s", Msg: msg, Cause: cause}
}

// hostWidePairs takes out of pairs every host on which all pairs of its
// three or more ranks are slow, and adds one finding for each such host:
// what is common to every pair (peer-to-peer disabled, an IOMMU or ACS
// setting, a degraded switch) rather than any one GPU.
func (d *judging) hostWidePairs(pairs [][2]int, fs []record.Finding) ([][2]int, []record.Finding) {
	slow := map[[2]int]bool{}
	for _, p := range pairs {
		slow[p] = true
	}
	whole := map[string]bool{}
	for _, h := range d.hostList {
		m := append([]int(nil), d.members[h]...)
		if len(m) < 3 {
			continue
		}
		slices.Sort(m)
		// The pairs measured on the host: every pair in the full run, one
		// round of disjoint pairs in quick mode. All slow, covering every
		// rank of the host, is the host's peer-to-peer path.
		measured := map[[2]int]bool{}
		covered := map[int]bool{}
		for _, pf := range d.pairFigs {
			if pf.Host == h {
				measured[[2]int{min(pf.A, pf.B), max(pf.A, pf.B)}] = true
				covered[pf.A], covered[pf.B] = true, true
			}
		}
		all := len(measured) >= 2 && len(covered) == len(m)
		var oneWay, peers, expected []float64
		transports := map[string]int{}
		class := ""
		for i := 0; i < len(m) && all; i++ {
			for j := i + 1; j < len(m); j++ {
				p := [2]int{m[i], m[j]}
				if !measured[p] {
					continue
				}
				if !slow[p] {
					all = false
					break
				}
				f := d.pairFigure(p)
				s := d.slowPairs[fmt.Sprintf("%d-%d", p[0], p[1])]
				oneWay = append(oneWay, f.OneWay())
				peers = append(peers, s.Peers)
				if f.Expected > 0 {
					expected = append(expected, f.Expected)
				}
				if class == "" {
					class = f.Class
				}
				if tr := d.transport(p[0], p[1]); tr != "" {
					transports[tr]++
				}
			}
		}
		if !all {
			continue
		}
		whole[h] = true
		n := len(measured)
		v := facts.Median(oneWay)
		what := "rank"
		if _, ok := d.devIndex[m[0]]; ok && m[0] < len(d.o.Devices) {
			what = "GPU"
		}
		msg := fmt.Sprintf("every one of its %d %s pairs is slow: %s GB/s one way (median)", n, what, facts.GB(v))
		if n < len(m)*(len(m)-1)/2 {
			msg = fmt.Sprintf("every %s pair measured is slow (%d disjoint pairs covering its %d %ss): %s GB/s one way (median)", what, n, len(m), what, facts.GB(v))
		}
		if p := facts.Median(peers); p > 0 && len(d.hostList) > 1 {
			msg += fmt.Sprintf(", pairs on other hosts %s GB/s", facts.GB(p))
		}
		var e float64
		if len(expected) > 0 {
			e = facts.Median(expected)
			msg += fmt.Sprintf(", expected %s GB/s over %s%s", facts.GB(e), class, facts.Drop(v, e))
		}
		cause := "a path every pair shares: peer-to-peer disabled (NCCL_P2P_DISABLE, IOMMU or ACS), or a degraded switch"
		if tr, c := mostUsed(transports); tr != "" {
			cause = fmt.Sprintf("NCCL used %s over %d of the %d pairs", tr, c, n)
			if strings.HasPrefix(class, "NV") && !strings.HasPrefix(tr, "P2P") {
				cause += fmt.Sprintf(" although they have %s (peer-to-peer disabled or unavailable)", class)
			}
		}
		fs = append(fs, record.Finding{Severity: "FAIL", Stage: "pair", Kind: "slow-host-pairs", Part: "host " + h, Host: h, Ranks: m,
			Value: v, Peers: facts.Median(peers), Expected: e, Unit: "GB/s", Msg: msg, Cause: cause})
	}
	if len(whole) == 0 {
		return pairs, fs
	}
	var rest [][2]int
	for _, p := range pairs {
		if !whole[d.host(p[0])] || d.host(p[0]) != d.host(p[1]) {
			rest = append(rest, p)
		}
	}
	return rest, fs
}

// mostUsed returns the most frequent key (the smallest on a tie) and its count.
func mostUsed(m map[string]int) (string, int) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	best, n := "", 0
	for _, k := range keys {
		if m[k] > n {
			best, n = k, m[k]
		}
	}
	return best, n
}

func (d *judging) transport(a, b int) string {
	if d.o.Transport == nil {
		return ""
	}
	return d.o.Transport(a, b)
}

func (d *judging) pairFigure(p [2]int) record.PairFigure {
	for _, f := range d.pairFigs {
		if f.A == p[0] && f.B == p[1] {
			return f
		}
	}
	return record.PairFigure{A: p[0], B: p[1]}
}

// pairName names a pair as "node GPU a (bus) ↔ GPU b (bus)" on GPUs.
func (d *judging) pairName(a, b int) string {
	ia, oka := d.devIndex[a]
	ib, okb := d.devIndex[b]
	if oka && okb && a < len(d.o.Devices) && b < len(d.o.Devices) {
		return fmt.Sprintf("%s GPU %d (%s) ↔ GPU %d (%s)", d.host(a), ia, d.o.Devices[a].BusID, ib, d.o.Devices[b].BusID)
	}
	return fmt.Sprintf("%s ↔ %s", d.o.Who(a), d.o.Who(b))
}

// dataFindings names who sent wrong values. In a pair only the other
// member can have corrupted what a rank received: a rank named by two or
// more receivers is the culprit; a rank wrong on its own (a group of one)
// corrupts its own data.
func (d *judging) dataFindings() []record.Finding {
	var out []record.Finding
	blame := map[int][]wrongObs{}
	alone := map[int]wrongObs{}
	var rest []wrongObs
	for _, o := range d.wrong {
		switch len(o.Group) {
		case 1:
			alone[o.Group[0]] = o
		case 2:
			// In a pair, the rank that received the first wrong element
			// names the other as its sender.
			if len(o.Bad) > 0 {
				sender := o.Group[0]
				if o.Bad[0].Rank == sender {
					sender = o.Group[1]
				}
				blame[sender] = append(blame[sender], o)
			}
		default:
			rest = append(rest, o)
		}
	}
	named := map[int]bool{}
	for _, r := range facts.SortedKeys(alone) {
		o := alone[r]
		named[r] = true
		out = append(out, record.Finding{Severity: "FAIL", Stage: "data", Kind: "wrong-data", Part: d.o.Who(r), Host: d.host(r), Ranks: []int{r},
			Msg: fmt.Sprintf("wrong values even alone, in %s: %d wrong elements; %s", o.Coll, o.Count, firstWrong(o, d.o.Who)), Cause: "its memory or compute: run the GPU's diagnostics"})
	}
	for _, r := range facts.SortedKeys(blame) {
		obs := blame[r]
		receivers := map[int]bool{}
		for _, o := range obs {
			for _, m := range o.Bad {
				receivers[m.Rank] = true
			}
		}
		if named[r] {
			continue
		}
		if len(receivers) >= 2 {
			named[r] = true
			out = append(out, record.Finding{Severity: "FAIL", Stage: "data", Kind: "corrupt-sender", Part: d.o.Who(r), Host: d.host(r), Ranks: []int{r},
				Msg:   fmt.Sprintf("sends corrupted data: wrong values at every peer that received from it (ranks %s); %s", words.Ints(facts.SortedKeys(receivers)), firstWrong(obs[0], d.o.Who)),
				Cause: "its GPU, NIC or the link out of it corrupts data"})
		}
	}
	for _, r := range facts.SortedKeys(blame) {
		if named[r] {
			continue
		}
		for _, o := range blame[r] {
			a, b := o.Group[0], o.Group[1]
			if named[a] || named[b] {
				continue
			}
			out = append(out, record.Finding{Severity: "FAIL", Stage: "data", Kind: "corrupt-link", Part: d.pairName(a, b), Ranks: []int{a, b},
				Msg: fmt.Sprintf("wrong values over this pair in %s: %s", o.Coll, firstWrong(o, d.o.Who)), Cause: "the link between them corrupts data"})
			named[a], named[b] = true, true
		}
	}
	if len(out) == 0 {
		for _, o := range rest {
			out = append(out, record.Finding{Severity: "FAIL", Stage: "data", Kind: "wrong-data", Part: "ranks " + words.Ints(o.Group), Ranks: o.Group,
				Msg: fmt.Sprintf("wrong values in %s: %d wrong elements; %s", o.Coll, o.Count, firstWrong(o, d.o.Who))})
			break
		}
	}
	return out
}

func firstWrong(o wrongObs, who func(int) string) string {
	if len(o.Bad) == 0 {
		return "no element listed"
	}
	m := o.Bad[0]
	return fmt.Sprintf("first: %s element %d: want %s, got %s", who(m.Rank), m.Index, m.Want, m.Got)
}

// causeOf names what NVML saw on the ranks' GPUs that explains a slow
// figure (another process on a GPU, a clock slowdown, a power or thermal
// throttle or clocks held low while measured), or else generic. GPUs with
// one cause are named together.
func (d *judging) causeOf(rs []int, generic string) string {
	type group struct {
		cause, detail string
		gpus          []string
	}
	var groups []*group
	add := func(gpu int, cause, detail string) {
		for _, g := range groups {
			if g.cause == cause {
				g.gpus = append(g.gpus, fmt.Sprint(gpu))
				return
			}
		}
		groups = append(groups, &group{cause: cause, detail: detail, gpus: []string{fmt.Sprint(gpu)}})
	}
	for _, r := range rs {
		g, ok := d.health(r)
		if !ok {
			continue
		}
		if sh := d.shared(r); sh.any() {
			add(g.Index, sh.words(), "")
		}
		if len(g.Throttle) > 0 {
			add(g.Index, "clocks held down ("+strings.Join(g.Throttle, ", ")+")", "")
		}
		var mine []facts.StageSample
		for _, s := range d.samples {
			if s.Host == d.host(r) && s.GPU == g.Index {
				mine = append(mine, s)
			}
		}
		if cause, detail := facts.SeenWhileMeasured(mine, g.SMClockMaxMHz); cause != "" {
			add(g.Index, cause, "while measured: "+detail)
		}
	}
	if len(groups) == 0 {
		return generic
	}
	var out []string
	for _, g := range groups {
		s := "GPU " + g.gpus[0] + ": " + g.cause
		if len(g.gpus) > 1 {
			s = "GPUs " + strings.Join(g.gpus, ", ") + ": " + g.cause
		}
		if g.detail != "" {
			s += " (GPU " + g.gpus[0] + " " + g.detail + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

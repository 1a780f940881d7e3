package doctor

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// CounterRule is how much an error counter may grow during one stage
// before it is a finding: PerGB for each GB of traffic over its part, plus
// PerMinute for each minute the stage ran. Zero for both: any growth.
type CounterRule struct {
	PerGB     float64 `json:"per_gb" yaml:"per_gb"`
	PerMinute float64 `json:"per_minute" yaml:"per_minute"`
}

// Allowed is the growth the rule lets pass for traffic gb over minutes.
func (r CounterRule) Allowed(gb, minutes float64) float64 {
	return r.PerGB*gb + r.PerMinute*minutes
}

// DefaultCounterRules are the growth each counter may show during a stage
// without a finding (docs/doctor.md, "Error counters", says where each
// comes from):
//   - NVLink CRC counters (data and flit): 50 per GB over the link. The
//     link's data layer replays a flit that fails its CRC, and healthy
//     links do count some: on the lent 4x H200 hosts (NV18), 512 link-runs
//     of clean doctor runs grew at 2.85 per GB (median), 11.6 (p99) and
//     21.4 at most, by the hardware's own byte count. 50 is over twice that
//     highest healthy rate; NVIDIA's driver team calls CRC errors harmful
//     from 100 per second, about 4 per GB at a link's full rate, so a
//     config may set it lower where links are cleaner.
//   - NVLink replay and recovery counters: none. A replay that failed or
//     a link that retrained is not seen on a healthy link.
//   - PCIe replays: 8 per minute, the most NVIDIA's driver recommends
//     (DCGM's PCIe replay rate limit).
//   - ECC: none corrected, none uncorrected; remapped rows: none. DCGM's
//     corrected-error rate limit is a placeholder, and a GPU that corrects
//     errors under a few seconds of doctor's traffic is worth a look.
//   - XIDs: none (a critical XID during doctor's run is a fault).
//   - InfiniBand/RoCE port errors: none, as ibqueryerrors' default
//     threshold of zero.
var DefaultCounterRules = map[string]CounterRule{
	CtrNVLinkReplay: {}, CtrNVLinkRecovery: {}, CtrNVLinkCRCFlit: {PerGB: NVLinkCRCPerGB}, CtrNVLinkCRCData: {PerGB: NVLinkCRCPerGB},
	CtrECCCorrected: {}, CtrECCUncorrected: {}, CtrRemappedRows: {},
	CtrPCIeReplay:  {PerMinute: 8},
	CtrXID:         {},
	CtrSymbolError: {}, CtrLinkRecovery: {}, CtrLinkDowned: {}, CtrPortRcvErrors: {}, CtrXmitDiscards: {},
}

// NVLinkCRCPerGB is the CRC errors per GB a healthy NVLink may count (see
// DefaultCounterRules), during a run and since the driver loaded.
const NVLinkCRCPerGB = 50

// counterFails are the counters whose growth past the rule is a FAIL on
// its own: data lost or a link gone, not a link working harder.
var counterFails = map[string]string{
	CtrECCUncorrected: "uncorrectable memory errors under load: drain the node and reset the GPU; replace it if they return",
	CtrXID:            "the driver reported a critical error on this GPU during the run: see the XID in the kernel log",
	CtrLinkDowned:     "the port went down during the run: cable, transceiver or switch port",
}

// counterCauses say what a counter's growth on a healthy-looking part
// points at.
var counterCauses = map[string]string{
	CtrNVLinkReplay:   "a marginal NVLink: retries cost bandwidth before they cost data; check the link's NVSwitch tray and cables, and watch the rate",
	CtrNVLinkRecovery: "an NVLink that retrained during the run: a marginal link or NVSwitch port",
	CtrNVLinkCRCFlit:  "a marginal NVLink: errors the link corrected by replaying; check the link's NVSwitch tray and cables, and watch the rate",
	CtrNVLinkCRCData:  "a marginal NVLink: errors the link corrected by replaying; check the link's NVSwitch tray and cables, and watch the rate",
	CtrECCCorrected:   "memory errors the GPU corrected: watch for remapped rows and uncorrectable errors",
	CtrRemappedRows:   "the GPU remapped memory rows during the run: reset it to apply them, and watch whether more follow",
	CtrPCIeReplay:     "a marginal PCIe link: reseat the GPU, check its riser and slot",
	CtrSymbolError:    "bit errors on the port's link: cable or transceiver",
	CtrLinkRecovery:   "the port's link retrained: cable, transceiver or switch port",
	CtrPortRcvErrors:  "malformed packets received: a bad link or a bad sender",
	CtrXmitDiscards:   "packets the port dropped: congestion or a link that stalls",
}

// CounterThresholds are the counter rules by hardware class ("gpu:<model>"
// for a GPU and its NVLinks, "nic:<device>" for a port, e.g. nic:mlx5_0),
// over Default, over DefaultCounterRules.
type CounterThresholds struct {
	Default map[string]CounterRule            `json:"default,omitempty" yaml:"default"`
	Class   map[string]map[string]CounterRule `json:"classes,omitempty" yaml:"classes"`
}

// For returns the rule of one counter in a class.
func (t CounterThresholds) For(class, counter string) CounterRule {
	if r, ok := t.Class[class][counter]; ok {
		return r
	}
	if r, ok := t.Default[counter]; ok {
		return r
	}
	return DefaultCounterRules[counter]
}

// Validate checks every counter name and rule.
func (t CounterThresholds) Validate() error {
	check := func(where string, rules map[string]CounterRule) error {
		for name, r := range rules {
			if _, ok := DefaultCounterRules[name]; !ok {
				known := make([]string, 0, len(DefaultCounterRules))
				for k := range DefaultCounterRules {
					known = append(known, k)
				}
				slices.Sort(known)
				return fmt.Errorf("counters %s: unknown counter %q (known: %s)", where, name, strings.Join(known, ", "))
			}
			for _, v := range []float64{r.PerGB, r.PerMinute} {
				if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
					return fmt.Errorf("counters %s: %s: per_gb and per_minute must be 0 or more, e.g. per_gb: 0.5", where, name)
				}
			}
		}
		return nil
	}
	if err := check("default", t.Default); err != nil {
		return err
	}
	for c, rules := range t.Class {
		if err := check(c, rules); err != nil {
			return err
		}
	}
	return nil
}

// counterFindings judges the counters that grew, summed over the stages
// per part: growth past its class's rule is abnormal. What a person reads
// is one line per host and counter kind, naming how many parts grew past
// their rule and the worst of them with its rate; every part's growth stays
// in the JSON (counter_growth). A counter that means lost data or a lost
// link (counterFails) is a FAIL per part. Abnormal growth on a part that a
// bandwidth FAIL already names joins that FAIL as its evidence, one clause
// per counter kind. fs are the findings so far; the result is fs with the
// counters' findings added.
func (d *search) counterFindings(fs []Finding) []Finding {
	type key struct {
		host    string
		part    CounterPart
		counter string
	}
	// Each part's growth: the stages' growth summed.
	sum := map[key]*CounterGrowth{}
	var order []key
	details := map[key][]string{}
	for i := range d.rep.Counters {
		d.rep.Counters[i].Moved = d.movedOver(d.rep.Counters[i])
	}
	for _, g := range d.rep.Counters {
		k := key{g.Host, g.Part, g.Counter}
		s := sum[k]
		if s == nil {
			s = &CounterGrowth{Host: g.Host, Part: g.Part, Counter: g.Counter}
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
		rule          CounterRule
		parts         []CounterGrowth
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
		if c, ok := counterFails[g.Counter]; ok {
			msg := fmt.Sprintf("%s grew by %d during the run", g.Counter, g.Growth())
			if g.Counter == CtrXID {
				msg = fmt.Sprintf("%d critical XID event(s) during the run (XID %s)", g.Growth(), strings.Join(details[k], ", "))
			}
			fs = append(fs, Finding{Severity: "FAIL", Stage: "health", Kind: "counter-growth", Part: g.Host + " " + g.Part.Name(), Host: g.Host, Ranks: ranks,
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
			if rate(p) > rate(worst) {
				worst = p
			}
		}
		what := partWord(worst.Part)
		msg := fmt.Sprintf("%s grew past its normal rate on %d %s during the run; the worst, %s, by %d (%s)",
			r.counter, len(r.parts), plural(len(r.parts), what), worst.Part.Name(), worst.Growth(), rateWords(worst))
		if r.rule.PerGB > 0 || r.rule.PerMinute > 0 {
			msg += fmt.Sprintf("; normal for %s: up to %s", r.class, ruleWords(r.rule))
		} else {
			msg += "; normal: none"
		}
		if r.fail >= 0 {
			fs[r.fail].Msg += "; " + msg
			continue
		}
		slices.Sort(r.ranks)
		fs = append(fs, Finding{Severity: "WARN", Stage: "health", Kind: "counter-growth", Part: "host " + r.host, Host: r.host, Ranks: r.ranks,
			Value: float64(worst.Growth()), Unit: r.counter, Msg: msg, Cause: counterCauses[r.counter]})
	}
	return fs
}

// rate is a part's growth per GB where traffic was counted, else per minute.
func rate(g CounterGrowth) float64 {
	if gb := g.GB(); gb > 0 {
		return g.PerGB()
	}
	if g.Seconds > 0 {
		return float64(g.Growth()) / (g.Seconds / 60)
	}
	return float64(g.Growth())
}

// rateWords says a part's rate and where its traffic figure comes from.
func rateWords(g CounterGrowth) string {
	if gb := g.GB(); gb > 0 {
		how := "counted by the hardware"
		if g.Bytes == 0 {
			how = "by doctor's tally"
		}
		return fmt.Sprintf("%.3g per GB over %.3g GB, %s", g.PerGB(), gb, how)
	}
	return fmt.Sprintf("in %.3g s", g.Seconds)
}

// ruleWords says what a rule allows.
func ruleWords(r CounterRule) string {
	var parts []string
	if r.PerGB > 0 {
		parts = append(parts, fmt.Sprintf("%g per GB", r.PerGB))
	}
	if r.PerMinute > 0 {
		parts = append(parts, fmt.Sprintf("%g per minute", r.PerMinute))
	}
	return strings.Join(parts, " plus ")
}

// partWord is what kind of part p is, for counting them.
func partWord(p CounterPart) string {
	switch {
	case p.NIC != "":
		return "port"
	case p.Link >= 0:
		return "NVLink"
	}
	return "GPU"
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// counterClass is the hardware class whose rules judge g.
func (d *search) counterClass(g CounterGrowth) string {
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
func (d *search) ranksOfPart(g CounterGrowth) []int {
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
func (d *search) movedInRun(g CounterGrowth) float64 {
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
func (d *search) movedOver(g CounterGrowth) float64 {
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
func failNaming(fs []Finding, host string, ranks []int, nic bool) int {
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

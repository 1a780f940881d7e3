package rules

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"collbench/doctor/internal/facts"
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
	facts.CtrNVLinkReplay: {}, facts.CtrNVLinkRecovery: {}, facts.CtrNVLinkCRCFlit: {PerGB: NVLinkCRCPerGB}, facts.CtrNVLinkCRCData: {PerGB: NVLinkCRCPerGB},
	facts.CtrECCCorrected: {}, facts.CtrECCUncorrected: {}, facts.CtrRemappedRows: {},
	facts.CtrPCIeReplay:  {PerMinute: 8},
	facts.CtrXID:         {},
	facts.CtrSymbolError: {}, facts.CtrLinkRecovery: {}, facts.CtrLinkDowned: {}, facts.CtrPortRcvErrors: {}, facts.CtrXmitDiscards: {},
}

// NVLinkCRCPerGB is the CRC errors per GB a healthy NVLink may count (see
// DefaultCounterRules), during a run and since the driver loaded.
const NVLinkCRCPerGB = 50

// CounterFails are the counters whose growth past the rule is a FAIL on
// its own: data lost or a link gone, not a link working harder.
var CounterFails = map[string]string{
	facts.CtrECCUncorrected: "uncorrectable memory errors under load: drain the node and reset the GPU; replace it if they return",
	facts.CtrXID:            "the driver reported a critical error on this GPU during the run: see the XID in the kernel log",
	facts.CtrLinkDowned:     "the port went down during the run: cable, transceiver or switch port",
}

// CounterCauses say what a counter's growth on a healthy-looking part
// points at.
var CounterCauses = map[string]string{
	facts.CtrNVLinkReplay:   "a marginal NVLink: retries cost bandwidth before they cost data; check the link's NVSwitch tray and cables, and watch the rate",
	facts.CtrNVLinkRecovery: "an NVLink that retrained during the run: a marginal link or NVSwitch port",
	facts.CtrNVLinkCRCFlit:  "a marginal NVLink: errors the link corrected by replaying; check the link's NVSwitch tray and cables, and watch the rate",
	facts.CtrNVLinkCRCData:  "a marginal NVLink: errors the link corrected by replaying; check the link's NVSwitch tray and cables, and watch the rate",
	facts.CtrECCCorrected:   "memory errors the GPU corrected: watch for remapped rows and uncorrectable errors",
	facts.CtrRemappedRows:   "the GPU remapped memory rows during the run: reset it to apply them, and watch whether more follow",
	facts.CtrPCIeReplay:     "a marginal PCIe link: reseat the GPU, check its riser and slot",
	facts.CtrSymbolError:    "bit errors on the port's link: cable or transceiver",
	facts.CtrLinkRecovery:   "the port's link retrained: cable, transceiver or switch port",
	facts.CtrPortRcvErrors:  "malformed packets received: a bad link or a bad sender",
	facts.CtrXmitDiscards:   "packets the port dropped: congestion or a link that stalls",
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

// RateWords says a part's rate and where its traffic figure comes from.
func RateWords(g facts.CounterGrowth) string {
	if gb := g.GB(); gb > 0 {
		how := "counted by the hardware"
		if g.Bytes == 0 {
			how = "by doctor's tally"
		}
		return fmt.Sprintf("%.3g per GB over %.3g GB, %s", g.PerGB(), gb, how)
	}
	return fmt.Sprintf("in %.3g s", g.Seconds)
}

// RuleWords says what a rule allows.
func RuleWords(r CounterRule) string {
	var parts []string
	if r.PerGB > 0 {
		parts = append(parts, fmt.Sprintf("%g per GB", r.PerGB))
	}
	if r.PerMinute > 0 {
		parts = append(parts, fmt.Sprintf("%g per minute", r.PerMinute))
	}
	return strings.Join(parts, " plus ")
}

// PartWord is what kind of part p is, for counting them.
func PartWord(p facts.CounterPart) string {
	switch {
	case p.NIC != "":
		return "port"
	case p.Link >= 0:
		return "NVLink"
	}
	return "GPU"
}

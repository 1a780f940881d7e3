package rules

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
)

// The health rules judge the facts NVML and sysfs give before any traffic.
// Each rule is one small unit in a registry, the way a metrics exporter
// registers collectors: a GPU rule judges one GPU against its peers'
// typical figures (gpuRules), a host rule one host alone (hostRules), and
// the fleet rules the hosts together (settingsRules for what hosts of one
// job must share, then nicFindings). HealthFindings runs them in that
// order; a new check is one more entry.

// typicalGPU is what the GPUs of every host usually show, to compare each
// GPU with: the median PCIe generation and active NVLink count.
type typicalGPU struct{ pcieGen, nvlinks int }

// verdict is what one rule says of one part: nothing (Severity ""), or a
// finding's severity, message and likely cause.
type verdict struct{ Severity, Msg, Cause string }

// A gpuRule judges one GPU's health facts; Kind names its findings.
type gpuRule struct {
	Kind  string
	Judge func(g facts.GPUHealth, typ typicalGPU) verdict
}

// A hostRule judges one host's facts alone.
type hostRule struct {
	Kind  string
	Judge func(h facts.HostFacts) verdict
}

// GPURules is the registry of the per-GPU health rules, in report order.
var GPURules = []gpuRule{
	{"pcie-width", func(g facts.GPUHealth, _ typicalGPU) verdict {
		if g.PCIeWidthMax > 0 && g.PCIeWidth > 0 && g.PCIeWidth < g.PCIeWidthMax {
			return verdict{"FAIL", fmt.Sprintf("PCIe link at x%d of x%d", g.PCIeWidth, g.PCIeWidthMax),
				"a lane fault: reseat the GPU or check its riser and slot"}
		}
		return verdict{}
	}},
	// GPUs lower their PCIe generation when idle: only a GPU below its
	// peers' current generation, and below its own maximum, counts.
	{"pcie-gen", func(g facts.GPUHealth, typ typicalGPU) verdict {
		if g.PCIeGen > 0 && g.PCIeGen < typ.pcieGen && g.PCIeGen < g.PCIeGenMax {
			return verdict{"FAIL", fmt.Sprintf("PCIe link at generation %d while its peers run at %d (maximum %d)", g.PCIeGen, typ.pcieGen, g.PCIeGenMax),
				"the link trained at a lower speed: check the slot, riser or BIOS settings"}
		}
		return verdict{}
	}},
	{"nvlink-down", func(g facts.GPUHealth, typ typicalGPU) verdict {
		if g.NVLinks > 0 && g.NVLinksActive < typ.nvlinks {
			return verdict{"FAIL", fmt.Sprintf("%d of %d NVLinks active, its peers have %d", g.NVLinksActive, g.NVLinks, typ.nvlinks),
				"an NVLink is down: check the fabric manager and the NVSwitch trays"}
		}
		return verdict{}
	}},
	{"ecc", func(g facts.GPUHealth, _ typicalGPU) verdict {
		if g.ECCUncorrected > 0 {
			return verdict{"FAIL", fmt.Sprintf("%d uncorrectable ECC errors since the driver loaded", g.ECCUncorrected),
				"memory errors: drain the node and reset the GPU"}
		}
		return verdict{}
	}},
	{"row-remap", func(g facts.GPUHealth, _ typicalGPU) verdict {
		switch {
		case g.RemapFailed:
			return verdict{"FAIL", "row remapping failed", "the GPU's memory cannot be repaired: replace the GPU"}
		case g.RemapPending || g.RetiredPending:
			return verdict{"WARN", "a memory repair is pending (row remap or page retirement)", "reset the GPU to apply it"}
		}
		return verdict{}
	}},
	{"throttle", func(g facts.GPUHealth, _ typicalGPU) verdict {
		if len(g.Throttle) > 0 {
			return verdict{"FAIL", "clocks held down: " + strings.Join(g.Throttle, ", "),
				"check cooling, power supplies and the GPU's thermal state"}
		}
		return verdict{}
	}},
}

// HostRules is the registry of the per-host health rules, in report order.
var HostRules = []hostRule{
	{"nvlink-errors", func(h facts.HostFacts) verdict {
		if msg := sinceBoot(h); msg != "" {
			return verdict{"WARN", msg,
				"a marginal NVLink: the error counters of this run (counter_growth in the JSON) say whether it still counts"}
		}
		return verdict{}
	}},
	{"acs", func(h facts.HostFacts) verdict {
		if len(h.PCI.ACSRedirect) > 0 {
			return verdict{"WARN", "PCIe ACS redirects peer-to-peer traffic at " + strings.Join(h.PCI.ACSRedirect, ", ") + " on its GPUs' and NICs' paths",
				"GPU-to-GPU and GPU-to-NIC traffic through those bridges detours through the root complex: disable ACS redirection there (BIOS, or setpci) for GPUDirect"}
		}
		return verdict{}
	}},
}

// A settingRule is one setting the hosts of a job must share; EmptyCounts
// says whether an empty value is a value of its own (none set) rather than
// "not said", which is not a difference.
type settingRule struct {
	What        string
	Get         func(facts.HostFacts) string
	EmptyCounts bool
}

// SettingsRules is the registry of what hosts of one job must share.
var SettingsRules = []settingRule{
	{"GPU count", func(h facts.HostFacts) string { return fmt.Sprint(len(h.GPUs)) }, false},
	{"driver", func(h facts.HostFacts) string { return h.Driver }, true},
	{"NCCL", func(h facts.HostFacts) string { return h.NCCL }, true},
	{"GPU model", gpuSetting(func(g facts.GPUHealth) string { return g.Name }), false},
	{"ECC mode", gpuSetting(func(g facts.GPUHealth) string { return g.ECCMode }), false},
	{"MIG mode", gpuSetting(func(g facts.GPUHealth) string { return g.MIGMode }), false},
	{"persistence mode", gpuSetting(func(g facts.GPUHealth) string { return g.Persistence }), false},
	{"application clocks", gpuSetting(func(g facts.GPUHealth) string { return g.AppClocks }), false},
	{"power limit", gpuSetting(func(g facts.GPUHealth) string {
		if g.PowerLimitW == 0 {
			return ""
		}
		return fmt.Sprintf("%d W", g.PowerLimitW)
	}), false},
	{"NCCL environment", func(h facts.HostFacts) string { return envWords(h.NCCLEnv) }, true},
	{"IOMMU", func(h facts.HostFacts) string { iommu, _, _ := h.PCI.Words(); return iommu }, false},
	{"PCIe ACS on the GPUs' and NICs' paths", func(h facts.HostFacts) string { _, acs, _ := h.PCI.Words(); return acs }, false},
	{"GPUDirect RDMA module", func(h facts.HostFacts) string { _, _, rdma := h.PCI.Words(); return rdma }, false},
}

// HealthFindings runs the health rules over every host's facts: each GPU
// against its peers, each host alone, and the hosts with each other.
func HealthFindings(hosts []facts.HostFacts) []record.Finding {
	var out []record.Finding
	add := func(kind, part string, v verdict) {
		if v.Severity != "" {
			out = append(out, record.Finding{Severity: v.Severity, Stage: "health", Kind: kind, Part: part, Msg: v.Msg, Cause: v.Cause})
		}
	}
	var gens, links []int
	for _, h := range hosts {
		for _, g := range h.GPUs {
			gens = append(gens, g.PCIeGen)
			links = append(links, g.NVLinksActive)
		}
	}
	typ := typicalGPU{pcieGen: facts.MedianInt(gens), nvlinks: facts.MedianInt(links)}
	for _, h := range hosts {
		for _, g := range h.GPUs {
			part := fmt.Sprintf("%s GPU %d (%s)", h.Host, g.Index, g.BusID)
			for _, r := range GPURules {
				add(r.Kind, part, r.Judge(g, typ))
			}
		}
	}
	for _, r := range HostRules {
		for _, h := range hosts {
			add(r.Kind, "host "+h.Host, r.Judge(h))
		}
	}
	if len(hosts) > 1 {
		for _, r := range SettingsRules {
			for _, host := range r.odd(hosts) {
				add("mismatch", "host "+host.Host, verdict{"FAIL", fmt.Sprintf("%s %s where the other hosts have %s", r.What, orNone(host.value), orNone(host.common)),
					"hosts of one job should match: update or exclude this host"})
			}
		}
	}
	return append(out, nicFindings(hosts)...)
}

// oddHost is a host whose setting differs from most hosts'.
type oddHost struct{ Host, value, common string }

// odd lists the hosts whose value of the setting differs from the one most
// hosts share (ties to the lowest value), by value and then in the hosts'
// order; none when all that say agree.
func (r settingRule) odd(hosts []facts.HostFacts) []oddHost {
	count := map[string][]string{}
	for _, h := range hosts {
		v := r.Get(h)
		if v == "" && !r.EmptyCounts {
			continue // NVML did not say: unknown is not different
		}
		count[v] = append(count[v], h.Host)
	}
	if len(count) <= 1 {
		return nil
	}
	// The most common value; "" may be it (no NCCL variables set on most
	// hosts), so the first value seen starts the count, not "".
	common, most := "", 0
	for _, v := range facts.SortedKeys(count) {
		if n := len(count[v]); n > most {
			common, most = v, n
		}
	}
	var out []oddHost
	for _, v := range facts.SortedKeys(count) {
		if v != common {
			for _, h := range count[v] {
				out = append(out, oddHost{h, v, common})
			}
		}
	}
	return out
}

// gpuSetting words one setting of a host's GPUs: the value they share, or
// each value with how many GPUs have it ("on x7, off x1").
func gpuSetting(get func(facts.GPUHealth) string) func(facts.HostFacts) string {
	return func(h facts.HostFacts) string {
		n := map[string]int{}
		var order []string
		for _, g := range h.GPUs {
			v := get(g)
			if v == "" {
				continue
			}
			if n[v] == 0 {
				order = append(order, v)
			}
			n[v]++
		}
		if len(order) <= 1 {
			return strings.Join(order, "")
		}
		slices.Sort(order)
		parts := make([]string, len(order))
		for i, v := range order {
			parts[i] = fmt.Sprintf("%s x%d", v, n[v])
		}
		return strings.Join(parts, ", ")
	}
}

// envWords writes NCCL's variables as NAME=value, sorted, "" for none.
func envWords(env map[string]string) string {
	var kv []string
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, " ")
}

// nicFindings flags InfiniBand/RoCE ports that are down or slower than
// their peers, and GPUs whose nearest NIC breaks their host's pattern.
func nicFindings(hosts []facts.HostFacts) []record.Finding {
	var out []record.Finding
	var rates []float64
	for _, h := range hosts {
		for _, n := range h.NICs {
			if n.Kind != "ethernet" && n.RateGbps > 0 && strings.EqualFold(n.State, "ACTIVE") {
				rates = append(rates, n.RateGbps)
			}
		}
	}
	top := 0.0
	for _, r := range rates {
		top = max(top, r)
	}
	for _, h := range hosts {
		for _, n := range h.NICs {
			if n.Kind == "ethernet" {
				continue
			}
			part := fmt.Sprintf("host %s NIC %s", h.Host, n.Name)
			switch {
			case !strings.EqualFold(n.State, "ACTIVE"):
				out = append(out, record.Finding{Severity: "FAIL", Stage: "health", Kind: "nic-down", Part: part,
					Msg: fmt.Sprintf("port %s (physical state %s)", n.State, orNone(n.PhysState)), Cause: "cable, transceiver or switch port: check the link"})
			case n.RateGbps > 0 && n.RateGbps < top:
				out = append(out, record.Finding{Severity: "FAIL", Stage: "health", Kind: "nic-rate", Part: part, Value: n.RateGbps, Peers: top, Unit: "Gb/s",
					Msg: fmt.Sprintf("port at %.0f Gb/s, its peers at %.0f Gb/s", n.RateGbps, top), Cause: "the link trained at a lower rate: check the cable and switch port"})
			}
		}
		// Each GPU's nearest NIC class (PIX, PXB, ...): the host's usual one is the pattern.
		var best []string
		for gi := range h.GPUs {
			b := "SYS"
			for _, n := range h.NICs {
				if n.Kind != "ethernet" && gi < len(n.Locality) && localityRank(n.Locality[gi]) < localityRank(b) {
					b = n.Locality[gi]
				}
			}
			best = append(best, b)
		}
		if usual := facts.Mode(best); usual != "" {
			for gi, b := range best {
				if localityRank(b) > localityRank(usual) {
					g := h.GPUs[gi]
					out = append(out, record.Finding{Severity: "WARN", Stage: "health", Kind: "nic-locality",
						Part: fmt.Sprintf("%s GPU %d (%s)", h.Host, g.Index, g.BusID),
						Msg:  fmt.Sprintf("nearest NIC is %s away, its peers have one at %s", b, usual), Cause: "a NIC missing or in another slot: traffic crosses the CPU"})
				}
			}
		}
	}
	return out
}

// localityRank orders PCI relations from nearest (PIX) to farthest (SYS).
func localityRank(l string) int {
	if r, ok := map[string]int{"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}[l]; ok {
		return r
	}
	return 5
}

// sinceBoot says, in one line for the host, which GPUs' NVLinks counted
// errors since the driver loaded beyond what healthy links count for the
// data they carried (NVLinkCRCPerGB for CRC errors; none for replays and
// recoveries), the worst first; "" when none did or none can be judged
// (no byte count).
func sinceBoot(h facts.HostFacts) string {
	type bad struct {
		gpu  facts.GPUHealth
		rate float64
	}
	var over []bad
	for _, g := range h.GPUs {
		e := g.NVLinkErrors
		if len(e) == 0 || g.NVLinkGB <= 0 {
			continue
		}
		crc := float64(e["crc_data"] + e["crc_flit"])
		if r := crc / g.NVLinkGB; r > NVLinkCRCPerGB || e["replay"] > 0 || e["recovery"] > 0 {
			over = append(over, bad{g, r})
		}
	}
	if len(over) == 0 {
		return ""
	}
	slices.SortFunc(over, func(a, b bad) int { return cmp.Compare(b.rate, a.rate) })
	w := over[0].gpu
	return fmt.Sprintf("NVLink errors since the driver loaded beyond the healthy rate on %d %s; the worst, GPU %d (%s): %s over %.3g GB carried, %.3g CRC errors per GB (healthy: up to %d per GB, no replays or recoveries)",
		len(over), facts.Plural(len(over), "GPU"), w.Index, w.BusID, counters(w.NVLinkErrors), w.NVLinkGB, over[0].rate, NVLinkCRCPerGB)
}

func counters(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

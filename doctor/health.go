package doctor

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/topology"
)

// GPUHealth is what NVML says about one GPU's health, without traffic.
type GPUHealth struct {
	Index        int    `json:"index"`
	Name         string `json:"name"`
	BusID        string `json:"bus_id"`
	PCIeGen      int    `json:"pcie_gen,omitempty"`
	PCIeGenMax   int    `json:"pcie_gen_max,omitempty"`
	PCIeWidth    int    `json:"pcie_width,omitempty"`
	PCIeWidthMax int    `json:"pcie_width_max,omitempty"`
	// NVLinks counts the links NVML knows and those active.
	NVLinks       int `json:"nvlinks,omitempty"`
	NVLinksActive int `json:"nvlinks_active,omitempty"`
	// NVLinkErrors sums each error counter over the links since the driver
	// loaded; NVLinkGB is the data its links carried meanwhile (both ways,
	// NVML's throughput counters; 0 where they cannot be read).
	NVLinkErrors map[string]uint64 `json:"nvlink_errors,omitempty"`
	NVLinkGB     float64           `json:"nvlink_gb,omitempty"`
	// ECC and memory repair.
	ECCUncorrected uint64 `json:"ecc_uncorrected,omitempty"`
	RetiredPending bool   `json:"retired_pages_pending,omitempty"`
	RemapPending   bool   `json:"row_remap_pending,omitempty"`
	RemapFailed    bool   `json:"row_remap_failed,omitempty"`
	// Throttle lists the active clock slowdown reasons that indicate a fault.
	Throttle []string `json:"throttle,omitempty"`
	// MemBusWidth (bits) and MemClockMaxMHz are the memory's width and
	// highest clock, from which what the GPU should copy follows.
	MemBusWidth    int `json:"mem_bus_width,omitempty"`
	MemClockMaxMHz int `json:"mem_clock_max_mhz,omitempty"`
	// Cores and SMClockMaxMHz are the GPU's CUDA cores and highest SM
	// clock, from which what its fill kernel should do follows.
	Cores         int `json:"cores,omitempty"`
	SMClockMaxMHz int `json:"sm_clock_max_mhz,omitempty"`
	// Processes are the compute processes NVML lists on the GPU.
	Processes []GPUProcess `json:"processes,omitempty"`
	// The settings hosts of one job should share: ECC, MIG and persistence
	// mode ("on", "off"; "" where NVML does not say), the application
	// clocks and the power limit.
	ECCMode     string `json:"ecc_mode,omitempty"`
	MIGMode     string `json:"mig_mode,omitempty"`
	Persistence string `json:"persistence_mode,omitempty"`
	AppClocks   string `json:"application_clocks,omitempty"`
	PowerLimitW int    `json:"power_limit_w,omitempty"`
}

// onOff words an NVML enable state.
func onOff(s nvml.EnableState) string {
	if s == nvml.FEATURE_ENABLED {
		return "on"
	}
	return "off"
}

// HostFacts are one host's health facts.
type HostFacts struct {
	Host string `json:"host"`
	// Ours are the process ids of this world's collbench processes on the
	// host: NVML's processes on a GPU other than these are another workload.
	Ours []uint32 `json:"collbench_pids,omitempty"`
	// NCCLEnv are the NCCL_* variables collbench ran with there (those
	// that name the host or a log file left out).
	NCCLEnv map[string]string `json:"nccl_env,omitempty"`
	Driver  string            `json:"driver,omitempty"`
	NCCL    string            `json:"nccl,omitempty"`
	GPUs    []GPUHealth       `json:"gpus,omitempty"`
	NICs    []topology.NIC    `json:"nics,omitempty"`
	// Matrix is the link label between each pair of GPUs (NV18, PIX,
	// SYS...) and LinkGBps each GPU's bandwidth per NVLink per direction,
	// from which a pair's expected bandwidth follows.
	Matrix   [][]string `json:"matrix,omitempty"`
	LinkGBps []float64  `json:"nvlink_gbps,omitempty"`
	// PCI is what the IOMMU and the bridges do to peer-to-peer traffic on
	// the GPUs' and NICs' paths, and whether GPUDirect RDMA is loaded.
	PCI topology.PCIPolicy `json:"pci,omitempty"`
	// Unavailable says what could not be read, and why.
	Unavailable []string `json:"unavailable,omitempty"`
}

// ReadGPUHealth asks NVML (initialised by the caller) about every GPU.
func ReadGPUHealth(lib nvml.Interface) ([]GPUHealth, string, []string) {
	var missing []string
	note := func(what string, ret nvml.Return) {
		if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED && !slices.Contains(missing, what) {
			missing = append(missing, fmt.Sprintf("%s: %v", what, ret))
		}
	}
	driver, _ := lib.SystemGetDriverVersion()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, driver, []string{fmt.Sprintf("GPU count: %v", ret)}
	}
	var out []GPUHealth
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			note(fmt.Sprintf("GPU %d", i), ret)
			continue
		}
		g := GPUHealth{Index: i}
		g.Name, _ = d.GetName()
		if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			g.BusID = normBus(string(trimNul(pci.BusId[:])))
		}
		g.PCIeGen, ret = d.GetCurrPcieLinkGeneration()
		note("PCIe link generation", ret)
		g.PCIeGenMax, _ = d.GetMaxPcieLinkGeneration()
		g.PCIeWidth, ret = d.GetCurrPcieLinkWidth()
		note("PCIe link width", ret)
		g.PCIeWidthMax, _ = d.GetMaxPcieLinkWidth()
		for l := 0; l < 32; l++ {
			st, ret := d.GetNvLinkState(l)
			if ret != nvml.SUCCESS {
				break
			}
			g.NVLinks++
			if st == nvml.FEATURE_ENABLED {
				g.NVLinksActive++
			}
			fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: uint32(l)}, {FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: uint32(l)}} //nolint:gosec // G115: a link index below 32
			if d.GetFieldValues(fv) == nvml.SUCCESS {
				for _, f := range fv {
					if f.NvmlReturn == uint32(nvml.SUCCESS) {
						g.NVLinkGB += float64(binary.NativeEndian.Uint64(f.Value[:])) * 1024 / 1e9
					}
				}
			}
			for c, name := range []string{"replay", "recovery", "crc_flit", "crc_data"} {
				if v, ret := d.GetNvLinkErrorCounter(l, nvml.NvLinkErrorCounter(c)); ret == nvml.SUCCESS && v > 0 { //nolint:gosec // G115: NVML's counter index, 0 to 4
					if g.NVLinkErrors == nil {
						g.NVLinkErrors = map[string]uint64{}
					}
					g.NVLinkErrors[name] += v
				}
			}
		}
		if v, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
			g.ECCUncorrected = v
		}
		if st, ret := d.GetRetiredPagesPendingStatus(); ret == nvml.SUCCESS {
			g.RetiredPending = st == nvml.FEATURE_ENABLED
		}
		if _, _, pending, failed, ret := d.GetRemappedRows(); ret == nvml.SUCCESS {
			g.RemapPending, g.RemapFailed = pending, failed
		}
		if w, ret := d.GetMemoryBusWidth(); ret == nvml.SUCCESS {
			g.MemBusWidth = int(w)
		}
		if c, ret := d.GetMaxClockInfo(nvml.CLOCK_MEM); ret == nvml.SUCCESS {
			g.MemClockMaxMHz = int(c)
		}
		if c, ret := d.GetMaxClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
			g.SMClockMaxMHz = int(c)
		}
		if n, ret := d.GetNumGpuCores(); ret == nvml.SUCCESS {
			g.Cores = n
		}
		if cur, _, ret := d.GetEccMode(); ret == nvml.SUCCESS {
			g.ECCMode = onOff(cur)
		}
		if cur, _, ret := d.GetMigMode(); ret == nvml.SUCCESS {
			g.MIGMode = map[bool]string{true: "on", false: "off"}[cur == nvml.DEVICE_MIG_ENABLE]
		}
		if p, ret := d.GetPersistenceMode(); ret == nvml.SUCCESS {
			g.Persistence = onOff(p)
		}
		sm, ret1 := d.GetApplicationsClock(nvml.CLOCK_SM)
		mem, ret2 := d.GetApplicationsClock(nvml.CLOCK_MEM)
		if ret1 == nvml.SUCCESS && ret2 == nvml.SUCCESS {
			g.AppClocks = fmt.Sprintf("SM %d MHz, memory %d MHz", sm, mem)
		}
		if mw, ret := d.GetPowerManagementLimit(); ret == nvml.SUCCESS {
			g.PowerLimitW = int(mw / 1000)
		}
		if ps, ret := d.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
			for _, p := range ps {
				g.Processes = append(g.Processes, GPUProcess{PID: p.Pid, Name: processName(p.Pid), MemBytes: p.UsedGpuMemory})
			}
		}
		if reasons, ret := d.GetCurrentClocksEventReasons(); ret == nvml.SUCCESS {
			for _, t := range clockReasons {
				if t.fault && reasons&t.bit != 0 {
					g.Throttle = append(g.Throttle, t.name)
				}
			}
		}
		out = append(out, g)
	}
	return out, driver, missing
}

func trimNul(b []uint8) []byte {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	out := make([]byte, n)
	for i := range out {
		out[i] = b[i]
	}
	return out
}

// normBus turns NVML's 0000XXXX:bb:dd.f into the sysfs form XXXX:bb:dd.f.
func normBus(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if parts := strings.SplitN(s, ":", 3); len(parts) == 3 && len(parts[0]) == 8 {
		return parts[0][4:] + ":" + parts[1] + ":" + parts[2]
	}
	return s
}

// HealthFindings compares every host's facts with its peers': GPUs of a
// host with each other, hosts with each other.
func HealthFindings(hosts []HostFacts) []Finding {
	var out []Finding
	gpu := func(h HostFacts, g GPUHealth) string {
		return fmt.Sprintf("%s GPU %d (%s)", h.Host, g.Index, g.BusID)
	}
	add := func(sev, kind, part, msg, cause string) {
		out = append(out, Finding{Severity: sev, Stage: "health", Kind: kind, Part: part, Msg: msg, Cause: cause})
	}
	// The typical GPU of every host, to compare each GPU with.
	var gens, links []int
	for _, h := range hosts {
		for _, g := range h.GPUs {
			gens = append(gens, g.PCIeGen)
			links = append(links, g.NVLinksActive)
		}
	}
	typGen, typLinks := medianInt(gens), medianInt(links)
	for _, h := range hosts {
		for _, g := range h.GPUs {
			p := gpu(h, g)
			if g.PCIeWidthMax > 0 && g.PCIeWidth > 0 && g.PCIeWidth < g.PCIeWidthMax {
				add("FAIL", "pcie-width", p, fmt.Sprintf("PCIe link at x%d of x%d", g.PCIeWidth, g.PCIeWidthMax),
					"a lane fault: reseat the GPU or check its riser and slot")
			}
			// GPUs lower their PCIe generation when idle: only a GPU below
			// its peers' current generation, and below its own maximum, counts.
			if g.PCIeGen > 0 && g.PCIeGen < typGen && g.PCIeGen < g.PCIeGenMax {
				add("FAIL", "pcie-gen", p, fmt.Sprintf("PCIe link at generation %d while its peers run at %d (maximum %d)", g.PCIeGen, typGen, g.PCIeGenMax),
					"the link trained at a lower speed: check the slot, riser or BIOS settings")
			}
			if g.NVLinks > 0 && g.NVLinksActive < typLinks {
				add("FAIL", "nvlink-down", p, fmt.Sprintf("%d of %d NVLinks active, its peers have %d", g.NVLinksActive, g.NVLinks, typLinks),
					"an NVLink is down: check the fabric manager and the NVSwitch trays")
			}
			if g.ECCUncorrected > 0 {
				add("FAIL", "ecc", p, fmt.Sprintf("%d uncorrectable ECC errors since the driver loaded", g.ECCUncorrected),
					"memory errors: drain the node and reset the GPU")
			}
			if g.RemapFailed {
				add("FAIL", "row-remap", p, "row remapping failed", "the GPU's memory cannot be repaired: replace the GPU")
			} else if g.RemapPending || g.RetiredPending {
				add("WARN", "row-remap", p, "a memory repair is pending (row remap or page retirement)", "reset the GPU to apply it")
			}
			if len(g.Throttle) > 0 {
				add("FAIL", "throttle", p, "clocks held down: "+strings.Join(g.Throttle, ", "),
					"check cooling, power supplies and the GPU's thermal state")
			}
		}
	}
	for _, h := range hosts {
		if msg := sinceBoot(h); msg != "" {
			add("WARN", "nvlink-errors", "host "+h.Host, msg,
				"a marginal NVLink: the error counters of this run (counter_growth in the JSON) say whether it still counts")
		}
	}
	for _, h := range hosts {
		if len(h.PCI.ACSRedirect) > 0 {
			add("WARN", "acs", "host "+h.Host, "PCIe ACS redirects peer-to-peer traffic at "+strings.Join(h.PCI.ACSRedirect, ", ")+" on its GPUs' and NICs' paths",
				"GPU-to-GPU and GPU-to-NIC traffic through those bridges detours through the root complex: disable ACS redirection there (BIOS, or setpci) for GPUDirect")
		}
	}
	// Hosts with each other: GPU count, driver, NCCL.
	if len(hosts) > 1 {
		for _, f := range []struct {
			what string
			get  func(HostFacts) string
		}{
			{"GPU count", func(h HostFacts) string { return fmt.Sprint(len(h.GPUs)) }},
			{"driver", func(h HostFacts) string { return h.Driver }},
			{"NCCL", func(h HostFacts) string { return h.NCCL }},
			{"GPU model", gpuSetting(func(g GPUHealth) string { return g.Name })},
			{"ECC mode", gpuSetting(func(g GPUHealth) string { return g.ECCMode })},
			{"MIG mode", gpuSetting(func(g GPUHealth) string { return g.MIGMode })},
			{"persistence mode", gpuSetting(func(g GPUHealth) string { return g.Persistence })},
			{"application clocks", gpuSetting(func(g GPUHealth) string { return g.AppClocks })},
			{"power limit", gpuSetting(func(g GPUHealth) string {
				if g.PowerLimitW == 0 {
					return ""
				}
				return fmt.Sprintf("%d W", g.PowerLimitW)
			})},
			{"NCCL environment", func(h HostFacts) string { return envWords(h.NCCLEnv) }},
			{"IOMMU", func(h HostFacts) string { iommu, _, _ := h.PCI.Words(); return iommu }},
			{"PCIe ACS on the GPUs' and NICs' paths", func(h HostFacts) string { _, acs, _ := h.PCI.Words(); return acs }},
			{"GPUDirect RDMA module", func(h HostFacts) string { _, _, rdma := h.PCI.Words(); return rdma }},
		} {
			count := map[string][]string{}
			for _, h := range hosts {
				v := f.get(h)
				if v == "" && f.what != "driver" && f.what != "NCCL" && f.what != "NCCL environment" {
					continue // NVML did not say: unknown is not different
				}
				count[v] = append(count[v], h.Host)
			}
			if len(count) > 1 {
				common := ""
				for v, hs := range count {
					if common == "" || len(hs) > len(count[common]) || (len(hs) == len(count[common]) && v < common) {
						common = v
					}
				}
				for v, hs := range count {
					if v != common {
						for _, h := range hs {
							add("FAIL", "mismatch", "host "+h, fmt.Sprintf("%s %s where the other hosts have %s", f.what, orNone(v), orNone(common)),
								"hosts of one job should match: update or exclude this host")
						}
					}
				}
			}
		}
	}
	out = append(out, nicFindings(hosts)...)
	return out
}

// gpuSetting words one setting of a host's GPUs: the value they share, or
// each value with how many GPUs have it ("on x7, off x1").
func gpuSetting(get func(GPUHealth) string) func(HostFacts) string {
	return func(h HostFacts) string {
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
func nicFindings(hosts []HostFacts) []Finding {
	var out []Finding
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
				out = append(out, Finding{Severity: "FAIL", Stage: "health", Kind: "nic-down", Part: part,
					Msg: fmt.Sprintf("port %s (physical state %s)", n.State, orNone(n.PhysState)), Cause: "cable, transceiver or switch port: check the link"})
			case n.RateGbps > 0 && n.RateGbps < top:
				out = append(out, Finding{Severity: "FAIL", Stage: "health", Kind: "nic-rate", Part: part, Value: n.RateGbps, Peers: top, Unit: "Gb/s",
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
		if usual := mode(best); usual != "" {
			for gi, b := range best {
				if localityRank(b) > localityRank(usual) {
					g := h.GPUs[gi]
					out = append(out, Finding{Severity: "WARN", Stage: "health", Kind: "nic-locality",
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

func mode(xs []string) string {
	count := map[string]int{}
	best := ""
	for _, x := range xs {
		count[x]++
		if best == "" || count[x] > count[best] {
			best = x
		}
	}
	return best
}

func medianInt(xs []int) int {
	f := make([]float64, 0, len(xs))
	for _, x := range xs {
		if x > 0 {
			f = append(f, float64(x))
		}
	}
	return int(median(f) + 0.5)
}

// sinceBoot says, in one line for the host, which GPUs' NVLinks counted
// errors since the driver loaded beyond what healthy links count for the
// data they carried (NVLinkCRCPerGB for CRC errors; none for replays and
// recoveries), the worst first; "" when none did or none can be judged
// (no byte count).
func sinceBoot(h HostFacts) string {
	type bad struct {
		gpu  GPUHealth
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
		len(over), plural(len(over), "GPU"), w.Index, w.BusID, counters(w.NVLinkErrors), w.NVLinkGB, over[0].rate, NVLinkCRCPerGB)
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

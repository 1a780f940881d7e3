// Package facts is the doctor's lowest floors: the words and figures every
// floor uses (words.go: medians, sizes, plurals), NVML's health of each GPU
// and a host's facts (facts.go), the error counters (counters.go), the
// sampler beside each stage (sample.go) and a run's knobs (knobs.go).
package facts

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
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

// HostMemory reports whether a backend's ranks run on host memory (the cpu
// and mpi backends), with no GPU of their own.
func HostMemory(backend string) bool { return backend == "cpu" || backend == "mpi" }

// Unit is what one rank drives on a backend, for the report's words: a GPU,
// or on a host-memory backend a rank (its memory and its thread).
func Unit(backend string) string {
	if HostMemory(backend) {
		return "rank"
	}
	return "GPU"
}

// MemoryGBps is the memory bandwidth g's limits give, 0 when NVML did not
// report them.
func (g GPUHealth) MemoryGBps() float64 {
	if g.MemBusWidth <= 0 || g.MemClockMaxMHz <= 0 {
		return 0
	}
	return float64(g.MemBusWidth) / 8 * float64(g.MemClockMaxMHz) * 1e6 * 2 / 1e9
}

// GPUProcess is a compute process NVML lists on a GPU.
type GPUProcess struct {
	PID      uint32 `json:"pid"`
	Name     string `json:"name,omitempty"` // from /proc, where the process is visible
	MemBytes uint64 `json:"mem_bytes,omitempty"`
}

// processName is the command name of pid, "" where this process cannot see
// it (another container's PID namespace).
func processName(pid uint32) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Fingerprint is a host's topology fingerprint: its GPUs (model, bus id,
// NVLinks), the link matrix between them and its NICs; the same node after
// a GPU, NIC or board swap has a new one and a new history.
func (h HostFacts) Fingerprint() string {
	var b strings.Builder
	for _, g := range h.GPUs {
		fmt.Fprintf(&b, "gpu %s %s %d;", g.Name, strings.ToLower(g.BusID), g.NVLinks)
	}
	for _, row := range h.Matrix {
		b.WriteString(strings.Join(row, ",") + ";")
	}
	for _, n := range h.NICs {
		fmt.Fprintf(&b, "nic %s %s;", n.Name, n.Kind)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:6])
}

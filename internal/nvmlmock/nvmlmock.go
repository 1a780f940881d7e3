// Package nvmlmock builds go-nvml mocks of whole machines, so topology,
// doctor and their tests read the same GPUs, links and counters without
// hardware. A Machine is plain data: change a GPU's fields, then ask for
// its NVML.
package nvmlmock

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// GPU is one mock GPU: what it is, where it sits, its links, and its
// health counters.
type GPU struct {
	Name        string
	UUID        string
	Bus         string // the PCI bus id without its domain, e.g. "18:00.0"
	MemoryBytes uint64
	CCMajor     int // compute capability
	CCMinor     int
	NUMA        int
	// NVLinks is how many links NVML lists; ActiveLinks of them are up,
	// each of NVLinkVersion (NVML's numbering: 6 is NVLink 4.0), to an
	// NVSwitch.
	NVLinks, ActiveLinks int
	NVLinkVersion        uint32
	// PCIe generation and width in use, and the most the link can do.
	PCIeGen, PCIeGenMax, PCIeWidth, PCIeWidthMax int
	// CRCErrors is link 0's data CRC error count; ECCErrors every total
	// ECC count; RemapPending a row remap waiting for a reset;
	// ClockReasons NVML's clock event reasons bitmask.
	CRCErrors uint64
	// CarriedKiB is what each NVLink carried each way since the driver
	// loaded, for the throughput counters (without Live; 0: not supported).
	CarriedKiB   uint64
	ECCErrors    uint64
	RemapPending bool
	ClockReasons uint64
	// MemBusWidth (bits) and MemClockMaxMHz are the memory's width and
	// highest clock; Processes the compute processes running on the GPU.
	MemBusWidth    uint32
	MemClockMaxMHz uint32
	// Cores and SMClockMaxMHz are the CUDA cores and highest SM clock;
	// SMClockMHz the SM clock now (the highest when 0).
	Cores         int
	SMClockMaxMHz uint32
	SMClockMHz    uint32
	// PowerW is the power drawn now; TempC the temperature.
	PowerW, TempC uint32
	Processes     []nvml.ProcessInfo
	// UtilPct is NVML's utilisation: the share of time a kernel ran.
	UtilPct uint32
	// ECC, MIG and persistence mode, application clocks (MHz) and the power
	// limit (W): the settings hosts of one job share.
	ECC, MIG, Persistence bool
	AppSMMHz, AppMemMHz   uint32
	PowerLimitW           uint32
	// Live, if set, holds counters a test grows between reads; they
	// replace CRCErrors and ECCErrors.
	Live *Counters
}

// Counters are a mock GPU's error counters that grow while a test runs,
// and the data its NVLinks carried. Safe for concurrent use.
type Counters struct {
	mu            sync.Mutex
	nvlink        map[[2]int]uint64 // (link, NVML counter) -> count
	drift         map[[2]int]uint64 // grown by this much at every read
	kib           map[int]uint64    // link -> KiB carried each way
	eccCorrected  uint64
	eccUncorr     uint64
	remapped      int
	pcieReplay    int
	unsupportedFV bool
}

// NewCounters returns counters at zero.
func NewCounters() *Counters {
	return &Counters{nvlink: map[[2]int]uint64{}, drift: map[[2]int]uint64{}, kib: map[int]uint64{}}
}

// DriftNVLink makes counter c of link l grow by n at every read, as a
// marginal link's does under traffic.
func (c *Counters) DriftNVLink(l int, ctr nvml.NvLinkErrorCounter, n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drift[[2]int{l, int(ctr)}] = n
}

// AddNVLink grows counter c of link l by n.
func (c *Counters) AddNVLink(l int, ctr nvml.NvLinkErrorCounter, n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nvlink[[2]int{l, int(ctr)}] += n
}

// Carry adds bytes carried by link l (each way).
func (c *Counters) Carry(l int, bytes uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kib[l] += bytes >> 10
}

// NoThroughput makes NVML's NVLink throughput fields unsupported, as on
// GPUs and drivers without them.
func (c *Counters) NoThroughput() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unsupportedFV = true
}

// AddECC grows the volatile corrected and uncorrected ECC counts.
func (c *Counters) AddECC(corrected, uncorrected uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eccCorrected += corrected
	c.eccUncorr += uncorrected
}

// AddRemaps grows the remapped rows; AddPCIeReplays the PCIe replays.
func (c *Counters) AddRemaps(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remapped += n
}

// AddPCIeReplays grows the PCIe replay counter.
func (c *Counters) AddPCIeReplays(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pcieReplay += n
}

// XID is one critical XID event on a GPU of the machine.
type XID struct {
	GPU  int
	Code uint64
}

// Machine is one host's GPUs and driver.
type Machine struct {
	GPUs   []GPU
	Driver string // e.g. "580.159.04"
	CUDA   int    // the CUDA driver version, e.g. 12040 for 12.4
	// XIDs, if set, delivers XID events to whoever waits on an event set
	// of the machine.
	XIDs chan XID
	// Running, if set, adds the processes that hold a context on GPU i now
	// to what it lists (a fake driver lists its own process, as NVML does).
	Running func(i int) []nvml.ProcessInfo
}

// HGX is an 8-GPU HGX board of model "H100" or "H200": 18 NVLink 4.0
// links per GPU to NVSwitches, PCIe gen 5 x16, GPUs 0-3 on NUMA node 0
// and 4-7 on node 1, every counter clean.
func HGX(model string) Machine {
	name, mem, width, clock := "NVIDIA H100 80GB HBM3", uint64(80<<30), uint32(5120), uint32(2619)
	if model == "H200" {
		name, mem, width, clock = "NVIDIA H200", 141<<30, 6016, 3201
	}
	buses := []string{"18:00.0", "2a:00.0", "3a:00.0", "5d:00.0", "9a:00.0", "ab:00.0", "ba:00.0", "db:00.0"}
	m := Machine{Driver: "580.159.04", CUDA: 13000}
	for i, bus := range buses {
		m.GPUs = append(m.GPUs, GPU{Name: name, UUID: fmt.Sprintf("GPU-%s-%d", model, i), Bus: bus, MemoryBytes: mem,
			CCMajor: 9, NUMA: i / 4, NVLinks: 18, ActiveLinks: 18, NVLinkVersion: 6,
			PCIeGen: 5, PCIeGenMax: 5, PCIeWidth: 16, PCIeWidthMax: 16, MemBusWidth: width, MemClockMaxMHz: clock, Cores: 16896, SMClockMaxMHz: 1980,
			ECC: true, Persistence: true, AppSMMHz: 1980, AppMemMHz: clock, PowerLimitW: 700, PowerW: 420, TempC: 52})
	}
	return m
}

// PCIInfo is NVML's PCI info for bus (its 8-hex-digit domain form).
func PCIInfo(bus string) nvml.PciInfo {
	var p nvml.PciInfo
	copy(p.BusId[:], "00000000:"+bus)
	return p
}

// SwitchLinks gives d links of its NVLinks up, of version ver, to
// NVSwitches (NVML lists 18); the others are down.
func SwitchLinks(d *mock.Device, links int, ver uint32) { switchLinks(d, 18, links, ver) }

func switchLinks(d *mock.Device, listed, up int, ver uint32) {
	d.GetNvLinkStateFunc = func(n int) (nvml.EnableState, nvml.Return) {
		switch {
		case n >= listed:
			return 0, nvml.ERROR_INVALID_ARGUMENT
		case n < up:
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	d.GetNvLinkVersionFunc = func(n int) (uint32, nvml.Return) { return ver, nvml.SUCCESS }
	d.GetNvLinkRemotePciInfoFunc = func(n int) (nvml.PciInfo, nvml.Return) {
		return PCIInfo(fmt.Sprintf("%02x:00.0", 0xc0+n%4)), nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(n int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
	}
}

// NVML returns the machine as go-nvml's mock interface. GPUs on one NUMA
// node share a host bridge (NODE), others meet at the system (SYS); every
// pair can reach the other peer to peer.
func (m Machine) NVML() nvml.Interface {
	devs := make([]*mock.Device, len(m.GPUs))
	for i := range m.GPUs {
		devs[i] = m.device(i)
	}
	for i, d := range devs {
		d.GetTopologyCommonAncestorFunc = func(o nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			if j := indexOf(devs, o); j >= 0 && m.GPUs[i].NUMA == m.GPUs[j].NUMA {
				return nvml.TOPOLOGY_NODE, nvml.SUCCESS
			}
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
		d.GetP2PStatusFunc = func(nvml.Device, nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			return nvml.P2P_STATUS_OK, nvml.SUCCESS
		}
	}
	events := func() (nvml.EventSet, nvml.Return) {
		set := &mock.EventSet{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}
		set.WaitFunc = func(ms uint32) (nvml.EventData, nvml.Return) {
			if m.XIDs == nil {
				time.Sleep(time.Duration(ms) * time.Millisecond)
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			select {
			case x := <-m.XIDs:
				return nvml.EventData{Device: devs[x.GPU], EventType: nvml.EventTypeXidCriticalError, EventData: x.Code}, nvml.SUCCESS
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		}
		return set, nvml.SUCCESS
	}
	return &mock.Interface{
		EventSetCreateFunc:             events,
		InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:                   func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc:     func(n int) (nvml.Device, nvml.Return) { return devs[n], nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return m.Driver, nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return m.CUDA, nvml.SUCCESS },
	}
}

// device is the mock of GPU i: what NVML says of it, its counters, and
// the processes running on it.
func (m Machine) device(i int) *mock.Device {
	g := m.GPUs[i]
	d := &mock.Device{}
	d.GetNameFunc = func() (string, nvml.Return) { return g.Name, nvml.SUCCESS }
	d.GetUUIDFunc = func() (string, nvml.Return) { return g.UUID, nvml.SUCCESS }
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return PCIInfo(g.Bus), nvml.SUCCESS }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: g.MemoryBytes}, nvml.SUCCESS }
	d.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) { return g.CCMajor, g.CCMinor, nvml.SUCCESS }
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return g.NUMA, nvml.SUCCESS }
	switchLinks(d, g.NVLinks, g.ActiveLinks, g.NVLinkVersion)
	d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return g.PCIeGen, nvml.SUCCESS }
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return g.PCIeGenMax, nvml.SUCCESS }
	d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return g.PCIeWidth, nvml.SUCCESS }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return g.PCIeWidthMax, nvml.SUCCESS }
	counters(d, g)
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) {
		return nvml.FEATURE_DISABLED, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return g.ClockReasons, nvml.SUCCESS }
	d.GetMemoryBusWidthFunc = func() (uint32, nvml.Return) { return g.MemBusWidth, nvml.SUCCESS }
	d.GetMaxClockInfoFunc = func(t nvml.ClockType) (uint32, nvml.Return) {
		switch t {
		case nvml.CLOCK_MEM:
			return g.MemClockMaxMHz, nvml.SUCCESS
		case nvml.CLOCK_SM:
			return g.SMClockMaxMHz, nvml.SUCCESS
		}
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetNumGpuCoresFunc = func() (int, nvml.Return) { return g.Cores, nvml.SUCCESS }
	state := func(on bool) nvml.EnableState {
		if on {
			return nvml.FEATURE_ENABLED
		}
		return nvml.FEATURE_DISABLED
	}
	d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
		return state(g.ECC), state(g.ECC), nvml.SUCCESS
	}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		if g.MIG {
			return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
		}
		return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
	}
	d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return state(g.Persistence), nvml.SUCCESS }
	d.GetApplicationsClockFunc = func(t nvml.ClockType) (uint32, nvml.Return) {
		if t == nvml.CLOCK_SM {
			return g.AppSMMHz, nvml.SUCCESS
		}
		return g.AppMemMHz, nvml.SUCCESS
	}
	d.GetPowerManagementLimitFunc = func() (uint32, nvml.Return) { return g.PowerLimitW * 1000, nvml.SUCCESS }
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return g.PowerLimitW * 1000, nvml.SUCCESS }
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return g.PowerW * 1000, nvml.SUCCESS }
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return g.TempC, nvml.SUCCESS }
	d.GetClockInfoFunc = func(t nvml.ClockType) (uint32, nvml.Return) {
		switch {
		case t == nvml.CLOCK_SM && g.SMClockMHz > 0:
			return g.SMClockMHz, nvml.SUCCESS
		case t == nvml.CLOCK_SM:
			return g.SMClockMaxMHz, nvml.SUCCESS
		case t == nvml.CLOCK_MEM:
			return g.MemClockMaxMHz, nvml.SUCCESS
		}
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		ps := append([]nvml.ProcessInfo(nil), g.Processes...)
		if m.Running != nil {
			ps = append(ps, m.Running(i)...)
		}
		return ps, nvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: g.UtilPct}, nvml.SUCCESS }
	return d
}

// counters gives d the error counters, NVLink traffic and remapped rows of
// g: fixed, or moving with g.Live.
func counters(d *mock.Device, g GPU) {
	live := g.Live
	d.GetNvLinkErrorCounterFunc = func(l int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
		if live != nil {
			live.mu.Lock()
			defer live.mu.Unlock()
			k := [2]int{l, int(c)}
			live.nvlink[k] += live.drift[k]
			return live.nvlink[k], nvml.SUCCESS
		}
		if c == nvml.NVLINK_ERROR_DL_CRC_DATA && l == 0 {
			return g.CRCErrors, nvml.SUCCESS
		}
		return 0, nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
		if live != nil {
			live.mu.Lock()
			defer live.mu.Unlock()
			if t == nvml.MEMORY_ERROR_TYPE_CORRECTED {
				return live.eccCorrected, nvml.SUCCESS
			}
			return live.eccUncorr, nvml.SUCCESS
		}
		return g.ECCErrors, nvml.SUCCESS
	}
	d.GetPcieReplayCounterFunc = func() (int, nvml.Return) {
		if live == nil {
			return 0, nvml.SUCCESS
		}
		live.mu.Lock()
		defer live.mu.Unlock()
		return live.pcieReplay, nvml.SUCCESS
	}
	d.GetFieldValuesFunc = func(fv []nvml.FieldValue) nvml.Return {
		if live == nil && g.CarriedKiB > 0 {
			for i := range fv {
				fv[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				if fv[i].FieldId == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX || fv[i].FieldId == nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX {
					binary.NativeEndian.PutUint64(fv[i].Value[:], g.CarriedKiB)
					fv[i].NvmlReturn = uint32(nvml.SUCCESS)
				}
			}
			return nvml.SUCCESS
		}
		if live == nil {
			return nvml.ERROR_NOT_SUPPORTED
		}
		live.mu.Lock()
		defer live.mu.Unlock()
		if live.unsupportedFV {
			return nvml.ERROR_NOT_SUPPORTED
		}
		for i := range fv {
			switch fv[i].FieldId {
			case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
				binary.NativeEndian.PutUint64(fv[i].Value[:], live.kib[int(fv[i].ScopeId)])
				fv[i].NvmlReturn = uint32(nvml.SUCCESS)
			default:
				fv[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			}
		}
		return nvml.SUCCESS
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		if live != nil {
			live.mu.Lock()
			defer live.mu.Unlock()
			return live.remapped, 0, g.RemapPending, false, nvml.SUCCESS
		}
		return 0, 0, g.RemapPending, false, nvml.SUCCESS
	}
}

func indexOf(devs []*mock.Device, d nvml.Device) int {
	for i, x := range devs {
		if nvml.Device(x) == d {
			return i
		}
	}
	return -1
}

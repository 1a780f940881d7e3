package facts

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The error counters doctor reads before and after each stage. NVLink
// counters are per link; ECC, row remaps and PCIe replays per GPU; the
// InfiniBand/RoCE ones per port (sysfs names); XIDs arrive as events.
const (
	CtrNVLinkReplay   = "nvlink_replay"
	CtrNVLinkRecovery = "nvlink_recovery"
	CtrNVLinkCRCFlit  = "nvlink_crc_flit"
	CtrNVLinkCRCData  = "nvlink_crc_data"
	CtrECCCorrected   = "ecc_corrected"
	CtrECCUncorrected = "ecc_uncorrected"
	CtrRemappedRows   = "remapped_rows"
	CtrPCIeReplay     = "pcie_replay"
	CtrXID            = "xid"
	CtrSymbolError    = "symbol_error"
	CtrLinkRecovery   = "link_error_recovery"
	CtrLinkDowned     = "link_downed"
	CtrPortRcvErrors  = "port_rcv_errors"
	CtrXmitDiscards   = "port_xmit_discards"
)

// nvlinkCounters are NVML's NVLink error counters in its numbering.
var nvlinkCounters = []struct {
	c    nvml.NvLinkErrorCounter
	name string
}{
	{nvml.NVLINK_ERROR_DL_REPLAY, CtrNVLinkReplay},
	{nvml.NVLINK_ERROR_DL_RECOVERY, CtrNVLinkRecovery},
	{nvml.NVLINK_ERROR_DL_CRC_FLIT, CtrNVLinkCRCFlit},
	{nvml.NVLINK_ERROR_DL_CRC_DATA, CtrNVLinkCRCData},
}

// portCounters are the sysfs counters of an InfiniBand/RoCE port that
// doctor watches (/sys/class/infiniband/DEV/ports/N/counters/NAME).
var portCounters = []string{CtrSymbolError, CtrLinkRecovery, CtrLinkDowned, CtrPortRcvErrors, CtrXmitDiscards}

// CounterPart is the part an error counter belongs to: a GPU (Link -1),
// one NVLink of a GPU, or a NIC port.
type CounterPart struct {
	GPU   int    `json:"gpu"` // -1 for a NIC port
	BusID string `json:"bus_id,omitempty"`
	Link  int    `json:"link"`          // NVLink index, -1 for the whole GPU
	NIC   string `json:"nic,omitempty"` // e.g. "mlx5_0 port 1"
}

// Name words the part, e.g. "GPU 1 (0000:2a:00.0) NVLink 3".
func (p CounterPart) Name() string {
	if p.NIC != "" {
		return "NIC " + p.NIC
	}
	s := fmt.Sprintf("GPU %d (%s)", p.GPU, p.BusID)
	if p.Link >= 0 {
		s += fmt.Sprintf(" NVLink %d", p.Link)
	}
	return s
}

// counterKey is one counter of one part, a map key.
type counterKey struct {
	Part    CounterPart
	Counter string
}

// snapshot is every counter read once, and the bytes measured over each
// part so far where the hardware counts them (NVLink throughput, a port's
// data counters).
type snapshot struct {
	vals  map[counterKey]uint64
	bytes map[CounterPart]uint64
}

// CounterGrowth is one error counter that grew while one stage ran.
type CounterGrowth struct {
	Host    string      `json:"host"`
	Stage   string      `json:"stage"`
	Part    CounterPart `json:"part"`
	Counter string      `json:"counter"`
	Before  uint64      `json:"before"`
	After   uint64      `json:"after"`
	// Detail is what an event said (an XID's number).
	Detail string `json:"detail,omitempty"`
	// Bytes is what the hardware counted over the part meanwhile (0: it
	// does not count them); Moved is what doctor sent and received through
	// it by its own tally, and Seconds how long the stage ran.
	Bytes   uint64  `json:"bytes_counted,omitempty"`
	Moved   float64 `json:"bytes_moved,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
}

// Growth is how much the counter grew.
func (g CounterGrowth) Growth() uint64 { return g.After - g.Before }

// GB is the traffic over the part while it grew, in 1e9 bytes: the
// hardware's count where it has one, else doctor's tally.
func (g CounterGrowth) GB() float64 {
	if g.Bytes > 0 {
		return float64(g.Bytes) / 1e9
	}
	return g.Moved / 1e9
}

// PerGB is the growth per GB of traffic (0 without traffic).
func (g CounterGrowth) PerGB() float64 {
	if gb := g.GB(); gb > 0 {
		return float64(g.Growth()) / gb
	}
	return 0
}

// counterGPU is one GPU whose counters a Sampler reads.
type counterGPU interface {
	GetNvLinkState(int) (nvml.EnableState, nvml.Return)
	GetNvLinkErrorCounter(int, nvml.NvLinkErrorCounter) (uint64, nvml.Return)
	GetTotalEccErrors(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return)
	GetRemappedRows() (int, int, bool, bool, nvml.Return)
	GetPcieReplayCounter() (int, nvml.Return)
	GetFieldValues([]nvml.FieldValue) nvml.Return
}

// readGPUCounters adds one GPU's counters to snap: every active NVLink's
// error counters and the data it carried, ECC, remapped rows and PCIe
// replays. What NVML does not support is left out.
func readGPUCounters(snap *snapshot, index int, bus string, d counterGPU) {
	gpu := CounterPart{GPU: index, BusID: bus, Link: -1}
	put := func(p CounterPart, name string, v uint64) { snap.vals[counterKey{p, name}] = v }
	for l := 0; l < 32; l++ {
		st, ret := d.GetNvLinkState(l)
		if ret != nvml.SUCCESS {
			break
		}
		if st != nvml.FEATURE_ENABLED {
			continue
		}
		link := CounterPart{GPU: index, BusID: bus, Link: l}
		for _, c := range nvlinkCounters {
			if v, ret := d.GetNvLinkErrorCounter(l, c.c); ret == nvml.SUCCESS {
				put(link, c.name, v)
			}
		}
		// The data the link carried, in KiB each way (NVML's field values).
		fv := []nvml.FieldValue{{FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ScopeId: uint32(l)}, {FieldId: nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ScopeId: uint32(l)}} //nolint:gosec // G115: a link index below 32
		if d.GetFieldValues(fv) == nvml.SUCCESS {
			var kib uint64
			ok := true
			for _, f := range fv {
				ok = ok && f.NvmlReturn == uint32(nvml.SUCCESS)
				kib += binary.NativeEndian.Uint64(f.Value[:])
			}
			if ok {
				snap.bytes[link] = kib << 10
			}
		}
	}
	if v, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		put(gpu, CtrECCCorrected, v)
	}
	if v, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		put(gpu, CtrECCUncorrected, v)
	}
	if corr, unc, _, _, ret := d.GetRemappedRows(); ret == nvml.SUCCESS && corr >= 0 && unc >= 0 {
		put(gpu, CtrRemappedRows, uint64(corr+unc)) //nolint:gosec // G115: checked non-negative
	}
	if v, ret := d.GetPcieReplayCounter(); ret == nvml.SUCCESS && v >= 0 {
		put(gpu, CtrPCIeReplay, uint64(v)) //nolint:gosec // G115: checked non-negative
	}
}

// readPortCounters adds the error and data counters of every InfiniBand or
// RoCE port under root (a sysfs root, "/" on a host) to snap.
func readPortCounters(snap *snapshot, root string) {
	ports, _ := filepath.Glob(filepath.Join(root, "sys", "class", "infiniband", "*", "ports", "*"))
	slices.Sort(ports)
	for _, dir := range ports {
		part := CounterPart{GPU: -1, Link: -1, NIC: filepath.Base(filepath.Dir(filepath.Dir(dir))) + " port " + filepath.Base(dir)}
		read := func(name string) (uint64, bool) {
			b, err := os.ReadFile(filepath.Join(dir, "counters", name)) //nolint:gosec // G304: a sysfs counter under the root we were given
			if err != nil {
				return 0, false
			}
			v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			return v, err == nil
		}
		for _, name := range portCounters {
			if v, ok := read(name); ok {
				snap.vals[counterKey{part, name}] = v
			}
		}
		// The data counters count 4-byte words (InfiniBand's PortXmitData
		// and PortRcvData).
		tx, ok1 := read("port_xmit_data")
		rx, ok2 := read("port_rcv_data")
		if ok1 && ok2 {
			snap.bytes[part] = (tx + rx) * 4
		}
	}
}

// grown compares two snapshots of one stage and returns every counter that
// grew, with the bytes counted over its part meanwhile. A counter that went
// down (reset, wrapped) is left out: its growth is unknown.
func grown(host, stage string, seconds float64, before, after snapshot) []CounterGrowth {
	var out []CounterGrowth
	for k, v := range after.vals {
		b, ok := before.vals[k]
		if !ok || v <= b {
			continue
		}
		g := CounterGrowth{Host: host, Stage: stage, Part: k.Part, Counter: k.Counter, Before: b, After: v, Seconds: seconds}
		part := k.Part
		if part.NIC == "" && part.Link < 0 {
			// A GPU's own counters: the data over all of its links.
			for p, n := range after.bytes {
				if p.NIC == "" && p.GPU == part.GPU && before.bytes[p] <= n {
					g.Bytes += n - before.bytes[p]
				}
			}
		} else if n, ok := after.bytes[part]; ok && before.bytes[part] <= n {
			g.Bytes = n - before.bytes[part]
		}
		out = append(out, g)
	}
	sortGrowth(out)
	return out
}

func sortGrowth(gs []CounterGrowth) {
	slices.SortFunc(gs, func(a, b CounterGrowth) int {
		for _, c := range []int{strings.Compare(a.Host, b.Host), a.Part.GPU - b.Part.GPU, strings.Compare(a.Part.NIC, b.Part.NIC),
			a.Part.Link - b.Part.Link, strings.Compare(a.Counter, b.Counter), strings.Compare(a.Stage, b.Stage)} {
			if c != 0 {
				return c
			}
		}
		return 0
	})
}

// Rate is a part's growth per GB where traffic was counted, else per minute.
func Rate(g CounterGrowth) float64 {
	if gb := g.GB(); gb > 0 {
		return g.PerGB()
	}
	if g.Seconds > 0 {
		return float64(g.Growth()) / (g.Seconds / 60)
	}
	return float64(g.Growth())
}

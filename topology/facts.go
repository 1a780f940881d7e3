// Package topology describes the machine under a benchmark: GPUs and the
// links between them (NVML), NICs and PCI locality (sysfs), and what NCCL
// chose (its debug log and topology dump). Every source is injectable, so
// the analysis is tested on recorded and mock machines without hardware.
package topology

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Facts are what NVML reports about the GPUs, kept raw so a machine can be
// recorded (collbench topo --record) and analysed again elsewhere.
type Facts struct {
	Driver      string     `json:"driver,omitempty"`
	CUDA        int        `json:"cuda,omitempty"` // e.g. 13000
	GPUs        []GPUFacts `json:"gpus"`
	Unavailable []string   `json:"unavailable,omitempty"`
}

// GPUFacts is one GPU.
type GPUFacts struct {
	Index   int    `json:"index"`
	Name    string `json:"name"`
	UUID    string `json:"uuid"`
	BusID   string `json:"bus_id"`
	Memory  uint64 `json:"memory_bytes"`
	CCMajor int    `json:"cc_major"`
	CCMinor int    `json:"cc_minor"`
	NUMA    int    `json:"numa"` // -1 when unknown
	CPUs    string `json:"cpus,omitempty"`
	// Links are the NVLinks, active or not.
	Links []LinkFacts `json:"nvlinks,omitempty"`
	// Ancestor is the PCI common-ancestor label towards each GPU (X for itself).
	Ancestor []string `json:"ancestor"`
	// P2P is the peer-to-peer support towards each GPU.
	P2P []P2PFacts `json:"p2p"`
}

// LinkFacts is one NVLink of a GPU.
type LinkFacts struct {
	Link        int    `json:"link"`
	Active      bool   `json:"active"`
	Version     uint32 `json:"version,omitempty"`
	RemoteBusID string `json:"remote_bus_id,omitempty"`
	RemoteType  string `json:"remote_type,omitempty"` // gpu, switch, unknown
}

// P2PFacts is peer-to-peer support between two GPUs.
type P2PFacts struct {
	Read    bool `json:"read"`
	Write   bool `json:"write"`
	NVLink  bool `json:"nvlink"`
	Atomics bool `json:"atomics"`
}

// maxNVLinks bounds the links probed per GPU (NVML_NVLINK_MAX_LINKS is 18
// today; probing stops at the first link NVML refuses).
const maxNVLinks = 32

// busID normalises a PCI bus id to the sysfs form 0000:00:06.0.
func busID(raw string) string {
	s := strings.ToLower(strings.TrimRight(strings.TrimSpace(raw), "\x00"))
	if parts := strings.SplitN(s, ":", 3); len(parts) == 3 && len(parts[0]) == 8 {
		s = parts[0][4:] + ":" + parts[1] + ":" + parts[2]
	}
	return s
}

func cString(b []uint8) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	return string(b[:n])
}

var levelLabels = map[nvml.GpuTopologyLevel]string{
	nvml.TOPOLOGY_INTERNAL:   "X",
	nvml.TOPOLOGY_SINGLE:     "PIX",
	nvml.TOPOLOGY_MULTIPLE:   "PXB",
	nvml.TOPOLOGY_HOSTBRIDGE: "PHB",
	nvml.TOPOLOGY_NODE:       "NODE",
	nvml.TOPOLOGY_SYSTEM:     "SYS",
}

// FromNVML reads the facts through lib, which the caller has initialised.
// What NVML cannot say is listed in Unavailable rather than failing.
func FromNVML(lib nvml.Interface) (Facts, error) {
	var f Facts
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		f.Driver = v
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		f.CUDA = v
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return f, fmt.Errorf("NVML could not count GPUs: %v", ret)
	}
	devs := make([]nvml.Device, n)
	for i := range devs {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return f, fmt.Errorf("NVML could not open GPU %d: %v", i, ret)
		}
		devs[i] = d
	}
	missing := map[string]bool{}
	note := func(what string, ret nvml.Return) {
		if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED && !missing[what] {
			missing[what] = true
			f.Unavailable = append(f.Unavailable, fmt.Sprintf("%s: %v", what, ret))
		}
	}
	for i, d := range devs {
		g := GPUFacts{Index: i, NUMA: -1}
		var ret nvml.Return
		g.Name, ret = d.GetName()
		note("GPU name", ret)
		g.UUID, ret = d.GetUUID()
		note("GPU UUID", ret)
		if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			g.BusID = busID(cString(pci.BusId[:]))
		} else {
			note("PCI info", ret)
		}
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.Memory = mem.Total
		}
		g.CCMajor, g.CCMinor, ret = d.GetCudaComputeCapability()
		note("compute capability", ret)
		if numa, ret := d.GetNumaNodeId(); ret == nvml.SUCCESS {
			g.NUMA = numa
		}
		for l := 0; l < maxNVLinks; l++ {
			st, ret := d.GetNvLinkState(l)
			if ret != nvml.SUCCESS {
				break
			}
			lf := LinkFacts{Link: l, Active: st == nvml.FEATURE_ENABLED}
			if lf.Active {
				lf.Version, _ = d.GetNvLinkVersion(l)
				if pci, ret := d.GetNvLinkRemotePciInfo(l); ret == nvml.SUCCESS {
					lf.RemoteBusID = busID(cString(pci.BusId[:]))
				}
				lf.RemoteType = "unknown"
				if t, ret := d.GetNvLinkRemoteDeviceType(l); ret == nvml.SUCCESS {
					switch t {
					case nvml.NVLINK_DEVICE_TYPE_GPU:
						lf.RemoteType = "gpu"
					case nvml.NVLINK_DEVICE_TYPE_SWITCH:
						lf.RemoteType = "switch"
					}
				}
			}
			g.Links = append(g.Links, lf)
		}
		for j, other := range devs {
			if i == j {
				g.Ancestor = append(g.Ancestor, "X")
				g.P2P = append(g.P2P, P2PFacts{true, true, false, true})
				continue
			}
			label := "?"
			if lvl, ret := d.GetTopologyCommonAncestor(other); ret == nvml.SUCCESS {
				if s, ok := levelLabels[lvl]; ok {
					label = s
				}
			} else {
				note("PCI topology", ret)
			}
			g.Ancestor = append(g.Ancestor, label)
			ok := func(idx nvml.GpuP2PCapsIndex) bool {
				st, ret := d.GetP2PStatus(other, idx)
				return ret == nvml.SUCCESS && st == nvml.P2P_STATUS_OK
			}
			g.P2P = append(g.P2P, P2PFacts{Read: ok(nvml.P2P_CAPS_INDEX_READ), Write: ok(nvml.P2P_CAPS_INDEX_WRITE),
				NVLink: ok(nvml.P2P_CAPS_INDEX_NVLINK), Atomics: ok(nvml.P2P_CAPS_INDEX_ATOMICS)})
		}
		f.GPUs = append(f.GPUs, g)
	}
	return f, nil
}

package nvmlmock

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestHGXReadsAsTheMachineItDescribes: the mock answers as the data says,
// a changed GPU included.
func TestHGXReadsAsTheMachineItDescribes(t *testing.T) {
	m := HGX("H200")
	m.GPUs[3].ActiveLinks = 16
	lib := m.NVML()
	if n, ret := lib.DeviceGetCount(); ret != nvml.SUCCESS || n != 8 {
		t.Fatalf("count %d %v", n, ret)
	}
	d, _ := lib.DeviceGetHandleByIndex(3)
	if name, _ := d.GetName(); name != "NVIDIA H200" {
		t.Errorf("name %q", name)
	}
	up := 0
	for l := 0; ; l++ {
		st, ret := d.GetNvLinkState(l)
		if ret != nvml.SUCCESS {
			break
		}
		if st == nvml.FEATURE_ENABLED {
			up++
		}
	}
	if up != 16 {
		t.Errorf("%d links up, want 16", up)
	}
	a, _ := lib.DeviceGetHandleByIndex(0)
	b, _ := lib.DeviceGetHandleByIndex(5)
	if lvl, _ := a.GetTopologyCommonAncestor(b); lvl != nvml.TOPOLOGY_SYSTEM {
		t.Errorf("GPUs 0 and 5 meet at %v, want the system (different NUMA nodes)", lvl)
	}
	if p, _ := d.GetPciInfo(); string(p.BusId[:16]) != "00000000:5d:00.0" {
		t.Errorf("bus %q", p.BusId[:16])
	}
}

package topology

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"collbench/internal/nvmlmock"
)

// hgxH100 is the shared mock of an 8-GPU H100 HGX board, with this
// package's driver and CUDA versions.
func hgxH100() nvml.Interface {
	m := nvmlmock.HGX("H100")
	m.Driver, m.CUDA = "550.90.07", 12040
	return m.NVML()
}

func indexOf(devs []*mock.Device, d nvml.Device) int {
	for i, x := range devs {
		if nvml.Device(x) == d {
			return i
		}
	}
	return -1
}

// dgxA100 is go-nvml's DGX A100 mock with 12 NVLink 3.0 links per GPU to
// NVSwitches and PCI topology added.
func dgxA100() nvml.Interface {
	s := dgxa100.New()
	for i, dev := range s.Devices {
		d := dev.(*dgxa100.Device)
		nvmlmock.SwitchLinks(&d.Device, 12, 4) // NVML version 4 = NVLink 3.0
		i := i
		d.GetTopologyCommonAncestorFunc = func(o nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			j := o.(*dgxa100.Device).Index
			switch {
			case i/2 == j/2:
				return nvml.TOPOLOGY_MULTIPLE, nvml.SUCCESS
			case i/4 == j/4:
				return nvml.TOPOLOGY_NODE, nvml.SUCCESS
			}
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
		d.GetP2PStatusFunc = func(o nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			return nvml.P2P_STATUS_OK, nvml.SUCCESS
		}
		d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	}
	return s
}

// pcieOnly models 4 GPUs without NVLink: pairs behind one PCIe switch
// each, the two switches on different NUMA nodes.
func pcieOnly() nvml.Interface {
	devs := make([]*mock.Device, 4)
	for i := range devs {
		i := i
		d := &mock.Device{}
		d.GetNameFunc = func() (string, nvml.Return) { return "NVIDIA L40S", nvml.SUCCESS }
		d.GetUUIDFunc = func() (string, nvml.Return) { return fmt.Sprintf("GPU-l40s-%d", i), nvml.SUCCESS }
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			return nvmlmock.PCIInfo(fmt.Sprintf("%02x:00.0", 0x10+i)), nvml.SUCCESS
		}
		d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 48 << 30}, nvml.SUCCESS }
		d.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) { return 8, 9, nvml.SUCCESS }
		d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return i / 2, nvml.SUCCESS }
		d.GetNvLinkStateFunc = func(n int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		devs[i] = d
	}
	for i, d := range devs {
		i := i
		d.GetTopologyCommonAncestorFunc = func(o nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			if j := indexOf(devs, o); i/2 == j/2 {
				return nvml.TOPOLOGY_SINGLE, nvml.SUCCESS
			}
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
		d.GetP2PStatusFunc = func(o nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			if j := indexOf(devs, o); i/2 == j/2 && idx != nvml.P2P_CAPS_INDEX_NVLINK {
				return nvml.P2P_STATUS_OK, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
	}
	return &mock.Interface{
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc:     func(n int) (nvml.Device, nvml.Return) { return devs[n], nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "570.86.15", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 12080, nvml.SUCCESS },
	}
}

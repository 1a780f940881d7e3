package doctor

import (
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"collbench/topology"
)

// gpuState is one mock GPU's health.
type gpuState struct {
	gen, genMax, width, widthMax int
	links, active                int
	crc                          uint64
	ecc                          uint64
	remapPending                 bool
	reasons                      uint64
}

var buses = []string{"18:00.0", "2a:00.0", "3a:00.0", "5d:00.0", "9a:00.0", "ab:00.0", "ba:00.0", "db:00.0"}

// hgx models an 8-GPU H100 board (18 NVLinks per GPU, PCIe gen 5 x16 in
// use); change edits GPUs before the mock is built.
func hgx(change func(i int, g *gpuState)) nvml.Interface {
	devs := make([]*mock.Device, 8)
	for i := range devs {
		st := gpuState{gen: 5, genMax: 5, width: 16, widthMax: 16, links: 18, active: 18}
		if change != nil {
			change(i, &st)
		}
		d := &mock.Device{}
		d.GetNameFunc = func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS }
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			copy(p.BusId[:], "00000000:"+buses[i])
			return p, nvml.SUCCESS
		}
		d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return st.gen, nvml.SUCCESS }
		d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return st.genMax, nvml.SUCCESS }
		d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return st.width, nvml.SUCCESS }
		d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return st.widthMax, nvml.SUCCESS }
		d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			switch {
			case l >= st.links:
				return 0, nvml.ERROR_INVALID_ARGUMENT
			case l < st.active:
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		d.GetNvLinkErrorCounterFunc = func(l int, c nvml.NvLinkErrorCounter) (uint64, nvml.Return) {
			if c == nvml.NVLINK_ERROR_DL_CRC_DATA && l == 0 {
				return st.crc, nvml.SUCCESS
			}
			return 0, nvml.SUCCESS
		}
		d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return st.ecc, nvml.SUCCESS }
		d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_DISABLED, nvml.ERROR_NOT_SUPPORTED }
		d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, st.remapPending, false, nvml.SUCCESS }
		d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return st.reasons, nvml.SUCCESS }
		devs[i] = d
	}
	return &mock.Interface{
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(n int) (nvml.Device, nvml.Return) { return devs[n], nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "580.159.04", nvml.SUCCESS },
	}
}

func hostOf(name string, lib nvml.Interface) HostFacts {
	gpus, driver, missing := ReadGPUHealth(lib)
	return HostFacts{Host: name, Driver: driver, NCCL: "2.28.3", GPUs: gpus, Unavailable: missing}
}

func TestHealthyMachineHasNoFindings(t *testing.T) {
	h := hostOf("node-1", hgx(nil))
	if len(h.GPUs) != 8 || h.GPUs[3].BusID != "0000:5d:00.0" || h.GPUs[3].NVLinksActive != 18 || len(h.Unavailable) != 0 {
		t.Fatalf("facts %+v", h)
	}
	if fs := HealthFindings([]HostFacts{h, hostOf("node-2", hgx(nil))}); len(fs) != 0 {
		t.Fatalf("a healthy machine has findings: %v", fs)
	}
	// GPUs idling at PCIe gen 1 together is power saving, not a fault.
	idle := hostOf("node-1", hgx(func(i int, g *gpuState) { g.gen = 1 }))
	if fs := HealthFindings([]HostFacts{idle}); len(fs) != 0 {
		t.Fatalf("idle links were flagged: %v", fs)
	}
}

// TestHealthFindingsNameEachFault plants one fault per GPU on a mock board
// and checks each is named with its GPU index and bus id, and nothing else.
func TestHealthFindingsNameEachFault(t *testing.T) {
	lib := hgx(func(i int, g *gpuState) {
		switch i {
		case 1:
			g.crc = 12
		case 2:
			g.active = 17 // one NVLink down
		case 3:
			g.width = 8 // a degraded PCIe link
		case 4:
			g.remapPending = true
		case 5:
			g.gen = 3 // trained at gen 3 while its peers run at gen 5
		case 6:
			g.ecc = 2
		case 7:
			g.reasons = nvml.ClocksThrottleReasonHwSlowdown | nvml.ClocksEventReasonSwPowerCap
		}
	})
	fs := HealthFindings([]HostFacts{hostOf("node-3", lib)})
	want := map[string]string{ // kind -> the part it must name
		"nvlink-errors": "node-3 GPU 1 (0000:2a:00.0)",
		"nvlink-down":   "node-3 GPU 2 (0000:3a:00.0)",
		"pcie-width":    "node-3 GPU 3 (0000:5d:00.0)",
		"row-remap":     "node-3 GPU 4 (0000:9a:00.0)",
		"pcie-gen":      "node-3 GPU 5 (0000:ab:00.0)",
		"ecc":           "node-3 GPU 6 (0000:ba:00.0)",
		"throttle":      "node-3 GPU 7 (0000:db:00.0)",
	}
	if len(fs) != len(want) {
		t.Fatalf("want %d findings, got %d: %v", len(want), len(fs), fs)
	}
	for _, f := range fs {
		if want[f.Kind] != f.Part {
			t.Errorf("%s named %q, want %q (%s)", f.Kind, f.Part, want[f.Kind], f.Line())
		}
	}
	for _, f := range fs {
		if f.Kind == "throttle" && (!strings.Contains(f.Msg, "hardware slowdown") || strings.Contains(f.Msg, "power cap")) {
			t.Errorf("throttle message %q: a power cap under load is normal", f.Msg)
		}
		if f.Kind == "nvlink-errors" && f.Severity != "WARN" {
			t.Errorf("NVLink error counts are a warning to watch: %+v", f)
		}
	}
}

func TestHostsAndNICsAreComparedWithTheirPeers(t *testing.T) {
	nics := func(rate float64, state string, locality ...string) []topology.NIC {
		return []topology.NIC{{Name: "mlx5_0:1", Kind: "infiniband", State: "ACTIVE", RateGbps: 400, Locality: locality},
			{Name: "mlx5_1:1", Kind: "infiniband", State: state, RateGbps: rate, Locality: locality}}
	}
	pix := []string{"PIX", "PIX", "PIX", "PIX", "PIX", "PIX", "PIX", "PIX"}
	a := hostOf("node-a", hgx(nil))
	a.NICs = nics(400, "ACTIVE", pix...)
	b := hostOf("node-b", hgx(nil))
	b.NICs = nics(200, "ACTIVE", pix...)
	c := hostOf("node-c", hgx(nil))
	c.NICs = nics(400, "DOWN", "PIX", "PIX", "PIX", "SYS", "PIX", "PIX", "PIX", "PIX")
	c.NICs[0].Locality[3] = "SYS" // GPU 3 has no NIC nearby
	c.Driver = "570.86.15"
	d := hostOf("node-d", hgx(nil))
	d.NICs = nics(400, "ACTIVE", pix...)
	fs := HealthFindings([]HostFacts{a, b, c, d})
	got := map[string]string{}
	for _, f := range fs {
		got[f.Kind] = f.Part
	}
	want := map[string]string{"nic-rate": "host node-b NIC mlx5_1:1", "nic-down": "host node-c NIC mlx5_1:1",
		"mismatch": "host node-c", "nic-locality": "node-c GPU 3 (0000:5d:00.0)"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v\n%v", got, want, fs)
	}
}

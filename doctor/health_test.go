package doctor

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/rules"
	"collbench/internal/nvmlmock"
	"collbench/topology"
)

// hgx is the shared mock of an 8-GPU H100 board; change edits GPUs
// before the mock is built.
func hgx(change func(i int, g *nvmlmock.GPU)) nvml.Interface {
	m := nvmlmock.HGX("H100")
	for i := range m.GPUs {
		if change != nil {
			change(i, &m.GPUs[i])
		}
	}
	return m.NVML()
}

func hostOf(name string, lib nvml.Interface) facts.HostFacts {
	gpus, driver, missing := facts.ReadGPUHealth(lib)
	return facts.HostFacts{Host: name, Driver: driver, NCCL: "2.28.3", GPUs: gpus, Unavailable: missing}
}

func TestHealthyMachineHasNoFindings(t *testing.T) {
	h := hostOf("node-1", hgx(nil))
	if len(h.GPUs) != 8 || h.GPUs[3].BusID != "0000:5d:00.0" || h.GPUs[3].NVLinksActive != 18 || len(h.Unavailable) != 0 {
		t.Fatalf("facts %+v", h)
	}
	if fs := rules.HealthFindings([]facts.HostFacts{h, hostOf("node-2", hgx(nil))}); len(fs) != 0 {
		t.Fatalf("a healthy machine has findings: %v", fs)
	}
	// GPUs idling at PCIe gen 1 together is power saving, not a fault.
	idle := hostOf("node-1", hgx(func(i int, g *nvmlmock.GPU) { g.PCIeGen = 1 }))
	if fs := rules.HealthFindings([]facts.HostFacts{idle}); len(fs) != 0 {
		t.Fatalf("idle links were flagged: %v", fs)
	}
}

// TestHealthFindingsNameEachFault plants one fault per GPU on a mock board
// and checks each is named with its GPU index and bus id, and nothing else.
func TestHealthFindingsNameEachFault(t *testing.T) {
	lib := hgx(func(i int, g *nvmlmock.GPU) {
		switch i {
		case 0:
			g.CRCErrors, g.CarriedKiB = 12, 1<<30 // 12 errors over 77 GB: a healthy rate
		case 1:
			g.CRCErrors, g.CarriedKiB = 12, 1<<10 // 12 over 0.04 GB: far beyond it
		case 2:
			g.ActiveLinks = 17 // one NVLink down
		case 3:
			g.PCIeWidth = 8 // a degraded PCIe link
		case 4:
			g.RemapPending = true
		case 5:
			g.PCIeGen = 3 // trained at gen 3 while its peers run at gen 5
		case 6:
			g.ECCErrors = 2
		case 7:
			g.ClockReasons = nvml.ClocksThrottleReasonHwSlowdown | nvml.ClocksEventReasonSwPowerCap
		}
	})
	fs := rules.HealthFindings([]facts.HostFacts{hostOf("node-3", lib)})
	want := map[string]string{ // kind -> the part it must name
		"nvlink-errors": "host node-3",
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
		if f.Kind == "nvlink-errors" && (f.Severity != "WARN" || !strings.Contains(f.Msg, "on 1 GPU; the worst, GPU 1 (0000:2a:00.0): crc_data 12 over 0.0377 GB carried")) {
			t.Errorf("NVLink errors since boot: one line for the host naming GPU 1 only, a warning to watch: %+v", f)
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
	fs := rules.HealthFindings([]facts.HostFacts{a, b, c, d})
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

// TestHostsAreComparedOnTheirSettings: a host whose GPUs differ from the
// other hosts' in ECC, MIG or persistence mode, application clocks or
// power limit, or whose NCCL variables differ, is named with what differs
// and from what; a setting NVML does not report is not a difference.
func TestHostsAreComparedOnTheirSettings(t *testing.T) {
	host := func(name string, change func(i int, g *nvmlmock.GPU), env map[string]string) facts.HostFacts {
		h := hostOf(name, hgx(change))
		h.NCCLEnv = env
		return h
	}
	same := map[string]string{"NCCL_NVLS_ENABLE": "0"}
	hosts := []facts.HostFacts{
		host("node-a", nil, same),
		host("node-b", func(i int, g *nvmlmock.GPU) { g.MIG = i == 5 }, same),
		host("node-c", func(i int, g *nvmlmock.GPU) { g.ECC = false }, same),
		host("node-d", func(i int, g *nvmlmock.GPU) { g.PowerLimitW = 500 }, map[string]string{"NCCL_NVLS_ENABLE": "0", "NCCL_IB_HCA": "mlx5_0"}),
		host("node-e", func(i int, g *nvmlmock.GPU) { g.Persistence = false; g.AppSMMHz = 1410 }, same),
	}
	want := map[string]string{
		"host node-b": "MIG mode off x7, on x1 where the other hosts have off",
		"host node-c": "ECC mode off where the other hosts have on",
		"host node-d": "power limit 500 W where the other hosts have 700 W",
		"host node-e": "persistence mode off where the other hosts have on",
	}
	got := map[string][]string{}
	for _, f := range rules.HealthFindings(hosts) {
		if f.Kind == "mismatch" {
			got[f.Part] = append(got[f.Part], f.Msg)
		}
	}
	for part, msg := range want {
		if !slices.ContainsFunc(got[part], func(m string) bool { return strings.Contains(m, msg) }) {
			t.Errorf("%s: want %q among %q", part, msg, got[part])
		}
	}
	if !slices.ContainsFunc(got["host node-d"], func(m string) bool { return strings.Contains(m, "NCCL environment NCCL_IB_HCA=mlx5_0") }) {
		t.Errorf("node-d's NCCL variables: %q", got["host node-d"])
	}
	if !slices.ContainsFunc(got["host node-e"], func(m string) bool { return strings.Contains(m, "application clocks SM 1410 MHz") }) {
		t.Errorf("node-e's application clocks: %q", got["host node-e"])
	}
	if len(got["host node-a"]) != 0 {
		t.Errorf("the common host was named: %q", got["host node-a"])
	}
	// NVML silent on one host's ECC mode: unknown is not a difference.
	silent := hostOf("node-f", hgx(nil))
	for i := range silent.GPUs {
		silent.GPUs[i].ECCMode = ""
	}
	silent.NCCLEnv = same
	for _, f := range rules.HealthFindings([]facts.HostFacts{hosts[0], silent}) {
		if f.Kind == "mismatch" {
			t.Errorf("an unreported setting was called a difference: %s", f.Line())
		}
	}
}

// TestHostsAreComparedOnPCIPolicy: a host whose IOMMU mode, ACS
// redirection or GPUDirect RDMA module differs from the others' is named
// with what differs; a host with ACS redirecting on its paths gets a
// warning of its own; ACS that could not be read is not a difference.
func TestHostsAreComparedOnPCIPolicy(t *testing.T) {
	host := func(name string, p topology.PCIPolicy) facts.HostFacts {
		h := hostOf(name, hgx(nil))
		h.PCI = p
		return h
	}
	base := topology.PCIPolicy{IOMMU: "passthrough", GPUDirectRDMA: "nvidia_peermem"}
	hosts := []facts.HostFacts{
		host("node-a", base),
		host("node-b", base),
		host("node-c", topology.PCIPolicy{IOMMU: "translated", GPUDirectRDMA: "nvidia_peermem"}),
		host("node-d", topology.PCIPolicy{IOMMU: "passthrough", GPUDirectRDMA: "none", ACSRedirect: []string{"0000:15:01.0"}}),
		host("node-e", topology.PCIPolicy{IOMMU: "passthrough", GPUDirectRDMA: "nvidia_peermem", ACSUnread: true}),
	}
	got := map[string][]string{}
	for _, f := range rules.HealthFindings(hosts) {
		got[f.Part] = append(got[f.Part], f.Severity+" "+f.Msg)
	}
	for part, want := range map[string][]string{
		"host node-c": {"FAIL IOMMU translated where the other hosts have passthrough"},
		"host node-d": {"FAIL GPUDirect RDMA module none where the other hosts have nvidia_peermem",
			"FAIL PCIe ACS on the GPUs' and NICs' paths redirecting at 1 bridge(s) where the other hosts have off",
			"WARN PCIe ACS redirects peer-to-peer traffic at 0000:15:01.0"},
	} {
		for _, w := range want {
			if !slices.ContainsFunc(got[part], func(m string) bool { return strings.HasPrefix(m, w) }) {
				t.Errorf("%s: want %q among %q", part, w, got[part])
			}
		}
	}
	for _, part := range []string{"host node-a", "host node-b", "host node-e"} {
		if len(got[part]) != 0 {
			t.Errorf("%s named: %q", part, got[part])
		}
	}
}

// TestEveryHealthRuleFiresAlone plants, for each rule of the registries,
// the one fact it judges into healthy hosts, at two places, and checks that
// the rule names it and no other rule speaks. A rule added without a
// planted fact here fails.
func TestEveryHealthRuleFiresAlone(t *testing.T) {
	gpuFaults := map[string]func(g *facts.GPUHealth){
		"pcie-width":  func(g *facts.GPUHealth) { g.PCIeWidth = g.PCIeWidthMax / 2 },
		"pcie-gen":    func(g *facts.GPUHealth) { g.PCIeGen-- },
		"nvlink-down": func(g *facts.GPUHealth) { g.NVLinksActive-- },
		"ecc":         func(g *facts.GPUHealth) { g.ECCUncorrected = 1 },
		"row-remap":   func(g *facts.GPUHealth) { g.RemapFailed = true },
		"throttle":    func(g *facts.GPUHealth) { g.Throttle = []string{"hardware slowdown"} },
	}
	// Host rules on a host alone (with peers, a host's ACS is also a
	// mismatch, as it should be).
	hostFaults := map[string]func(h *facts.HostFacts){
		"nvlink-errors": func(h *facts.HostFacts) {
			h.GPUs[1].NVLinkErrors, h.GPUs[1].NVLinkGB = map[string]uint64{"replay": 3}, 10
		},
		"acs": func(h *facts.HostFacts) { h.PCI.ACSRedirect = []string{"0000:00:01.0"} },
	}
	settingFaults := map[string]func(h *facts.HostFacts){
		"GPU count":             func(h *facts.HostFacts) { h.GPUs = h.GPUs[:7] },
		"driver":                func(h *facts.HostFacts) { h.Driver = "" },
		"NCCL":                  func(h *facts.HostFacts) { h.NCCL = "2.19.3" },
		"GPU model":             func(h *facts.HostFacts) { h.GPUs[2].Name = "NVIDIA H200" },
		"ECC mode":              func(h *facts.HostFacts) { h.GPUs[2].ECCMode = "off" },
		"MIG mode":              func(h *facts.HostFacts) { h.GPUs[2].MIGMode = "on" },
		"persistence mode":      func(h *facts.HostFacts) { h.GPUs[2].Persistence = "off" },
		"application clocks":    func(h *facts.HostFacts) { h.GPUs[2].AppClocks = "1200 MHz" },
		"power limit":           func(h *facts.HostFacts) { h.GPUs[2].PowerLimitW = 400 },
		"NCCL environment":      func(h *facts.HostFacts) { h.NCCLEnv = map[string]string{"NCCL_ALGO": "ring"} },
		"IOMMU":                 func(h *facts.HostFacts) { h.PCI.IOMMU = "translated" },
		"GPUDirect RDMA module": func(h *facts.HostFacts) { h.PCI.GPUDirectRDMA = "nvidia_peermem" },
	}
	// Hosts that do not say are not different: the settings differ from
	// hosts that say otherwise.
	said := func(hs []facts.HostFacts) {
		for i := range hs {
			hs[i].PCI.IOMMU, hs[i].PCI.GPUDirectRDMA = "passthrough", "not loaded"
		}
	}
	hosts := func(n int) []facts.HostFacts {
		out := make([]facts.HostFacts, n)
		for i := range out {
			out[i] = hostOf(fmt.Sprintf("node-%d", i+1), hgx(nil))
		}
		return out
	}
	check := func(what, kind, part string, hs []facts.HostFacts) {
		t.Helper()
		fs := rules.HealthFindings(hs)
		if len(fs) != 1 || fs[0].Kind != kind || fs[0].Part != part {
			t.Errorf("%s planted at %s: findings %v", what, part, fs)
		}
	}
	for _, r := range rules.GPURules {
		plant, ok := gpuFaults[r.Kind]
		if !ok {
			t.Errorf("the GPU rule %s has no planted fault in this test", r.Kind)
			continue
		}
		for _, at := range [][2]int{{1, 0}, {0, 5}} {
			hs := hosts(2)
			g := &hs[at[0]].GPUs[at[1]]
			plant(g)
			check(r.Kind, r.Kind, fmt.Sprintf("%s GPU %d (%s)", hs[at[0]].Host, g.Index, g.BusID), hs)
		}
	}
	for _, r := range rules.HostRules {
		plant, ok := hostFaults[r.Kind]
		if !ok {
			t.Errorf("the host rule %s has no planted fault in this test", r.Kind)
			continue
		}
		hs := hosts(1)
		plant(&hs[0])
		check(r.Kind, r.Kind, "host node-1", hs)
	}
	for _, r := range rules.SettingsRules {
		if r.What == "PCIe ACS on the GPUs' and NICs' paths" {
			continue // the acs host rule's fact: planted above
		}
		plant, ok := settingFaults[r.What]
		if !ok {
			t.Errorf("the setting %q has no planted difference in this test", r.What)
			continue
		}
		for _, at := range []int{0, 2} {
			hs := hosts(3)
			said(hs)
			plant(&hs[at])
			check(r.What, "mismatch", "host "+hs[at].Host, hs)
		}
	}
}

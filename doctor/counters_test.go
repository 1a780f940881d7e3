package doctor

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
	"collbench/internal/nvmlmock"
	"collbench/results"
)

// TestSamplerCountsWhatGrowsInEachStage plants growing counters on two GPUs
// of a mock HGX, at different stages, and an XID on a third: each growth is
// found in the stage it happened in, on its link or GPU, with the bytes the
// link counted meanwhile; nothing else grows.
func TestSamplerCountsWhatGrowsInEachStage(t *testing.T) {
	m := nvmlmock.HGX("H200")
	for i := range m.GPUs {
		m.GPUs[i].Live = nvmlmock.NewCounters()
	}
	m.XIDs = make(chan nvmlmock.XID, 1)
	g1, g2 := m.GPUs[1].Live, m.GPUs[2].Live
	s := facts.NewSampler(m.NVML(), "node-1", nil, time.Hour)

	s.Stage("each GPU alone")
	g1.AddNVLink(3, nvml.NVLINK_ERROR_DL_CRC_DATA, 96)
	g1.Carry(3, 6e9)
	g1.Carry(4, 1e9) // another link's traffic is not link 3's
	s.Stage("")
	s.Stage("every GPU pair within a host")
	g2.AddECC(0, 2)
	g2.AddPCIeReplays(20)
	g2.AddNVLink(0, nvml.NVLINK_ERROR_DL_REPLAY, 1)
	m.XIDs <- nvmlmock.XID{GPU: 5, Code: 79}
	waitFor(t, func() bool {
		for _, g := range s.Growth() {
			if g.Counter == facts.CtrXID {
				return true
			}
		}
		return false
	})
	s.Stage("")
	s.Stop()

	got := map[string]facts.CounterGrowth{}
	for _, g := range s.Growth() {
		got[g.Stage+"|"+g.Part.Name()+"|"+g.Counter] = g
	}
	if len(got) != 5 {
		t.Errorf("%d counters grew, want 5: %+v", len(got), s.Growth())
	}
	crc, ok := got["each GPU alone|GPU 1 (0000:2a:00.0) NVLink 3|nvlink_crc_data"]
	if !ok || crc.Growth() != 96 || crc.Bytes != 12e9/1024*1024 || crc.Host != "node-1" {
		t.Errorf("GPU 1's link 3: %+v", crc)
	}
	if crc.PerGB() < 7.9 || crc.PerGB() > 8.1 {
		t.Errorf("GPU 1's link 3 grew %.2f per GB, want 8", crc.PerGB())
	}
	for _, k := range []string{
		"every GPU pair within a host|GPU 2 (0000:3a:00.0)|ecc_uncorrected",
		"every GPU pair within a host|GPU 2 (0000:3a:00.0)|pcie_replay",
		"every GPU pair within a host|GPU 2 (0000:3a:00.0) NVLink 0|nvlink_replay",
	} {
		if _, ok := got[k]; !ok {
			t.Errorf("missing %s", k)
		}
	}
	if x := got["every GPU pair within a host|GPU 5 (0000:ab:00.0)|xid"]; x.Detail != "79" || x.Growth() != 1 {
		t.Errorf("the XID: %+v", x)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("timed out")
}

// TestSamplerStoppedInsideAStage keeps what grew in a stage a fault ended:
// Stop reads the counters of the stage that never closed.
func TestSamplerStoppedInsideAStage(t *testing.T) {
	m := nvmlmock.HGX("H100")
	m.GPUs[7].Live = nvmlmock.NewCounters()
	s := facts.NewSampler(m.NVML(), "node-9", []string{"0000:db:00.0"}, time.Hour)
	s.Stage("the whole world")
	m.GPUs[7].Live.AddECC(3, 0)
	s.Stop()
	g := s.Growth()
	if len(g) != 1 || g[0].Counter != facts.CtrECCCorrected || g[0].Growth() != 3 || g[0].Stage != "the whole world" {
		t.Errorf("growth %+v", g)
	}
}

// writePort writes one InfiniBand port's counters under root.
func writePort(t *testing.T, root, dev string, port int, vals map[string]int) {
	t.Helper()
	dir := filepath.Join(root, "sys", "class", "infiniband", dev, "ports", strconv.Itoa(port), "counters")
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // a test fixture
		t.Fatal(err)
	}
	for k, v := range vals {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(strconv.Itoa(v)+"\n"), 0o644); err != nil { //nolint:gosec // a test fixture
			t.Fatal(err)
		}
	}
}

// TestPortCountersFromSysfs grows the error counters of InfiniBand ports in
// a sysfs fixture between a stage's start and end, on two ports of two
// devices: each port's growth is found with the bytes its data counters
// counted (4-byte words), and a port that did not grow is not named.
func TestPortCountersFromSysfs(t *testing.T) {
	root := t.TempDir()
	clean := map[string]int{"symbol_error": 0, "link_downed": 0, "port_rcv_errors": 0, "port_xmit_discards": 0, "link_error_recovery": 0, "port_xmit_data": 0, "port_rcv_data": 0}
	for _, dev := range []string{"mlx5_0", "mlx5_1", "mlx5_2"} {
		writePort(t, root, dev, 1, clean)
	}
	s := facts.NewSampler(nil, "node-3", nil, time.Hour).WithPorts(root)
	s.Stage("across hosts")
	writePort(t, root, "mlx5_0", 1, map[string]int{"symbol_error": 12, "port_xmit_data": 250_000_000, "port_rcv_data": 250_000_000})
	writePort(t, root, "mlx5_2", 1, map[string]int{"link_downed": 1, "port_xmit_discards": 40})
	s.Stage("")
	s.Stop()
	got := map[string]facts.CounterGrowth{}
	for _, g := range s.Growth() {
		got[g.Part.Name()+"|"+g.Counter] = g
	}
	if len(got) != 3 {
		t.Errorf("%d counters grew, want 3: %+v", len(got), s.Growth())
	}
	if g := got["NIC mlx5_0 port 1|symbol_error"]; g.Growth() != 12 || g.Bytes != 2e9 || g.Stage != "across hosts" {
		t.Errorf("mlx5_0: %+v", g)
	}
	if g := got["NIC mlx5_2 port 1|link_downed"]; g.Growth() != 1 {
		t.Errorf("mlx5_2: %+v", g)
	}
	if g := got["NIC mlx5_2 port 1|port_xmit_discards"]; g.Growth() != 40 {
		t.Errorf("mlx5_2 discards: %+v", g)
	}
}

// TestCounterRollUp reads many NVLinks' growth as a person would: one line
// for the host and counter kind, naming how many links grew past the
// healthy rate and the worst of them; links at a healthy rate add nothing.
func TestCounterRollUp(t *testing.T) {
	var growth []facts.CounterGrowth
	for g := 0; g < 2; g++ {
		for l := uint64(0); l < 18; l++ {
			n := 3 * l // up to 51 over 6 GB: 8.5 per GB, healthy
			if g == 1 && (l == 4 || l == 9) {
				n = 400 + 100*l // 800 and 1300 over 6 GB
			}
			growth = append(growth, facts.CounterGrowth{Host: "node-1", Stage: "pairs", Part: facts.CounterPart{GPU: g, BusID: []string{"0000:18:00.0", "0000:2a:00.0"}[g], Link: int(l)}, //nolint:gosec // G115: a link index below 18
				Counter: facts.CtrNVLinkCRCData, Before: 0, After: n, Bytes: 6e9, Seconds: 5})
		}
	}
	d := counterSearch(growth, rules.CounterThresholds{})
	fs := d.counterFindings(nil)
	if len(fs) != 1 {
		t.Fatalf("%d findings, want one line for the host: %+v", len(fs), fs)
	}
	want := "nvlink_crc_data grew past its normal rate on 2 NVLinks during the run; the worst, GPU 1 (0000:2a:00.0) NVLink 9, by 1300 (217 per GB over 6 GB, counted by the hardware)"
	if f := fs[0]; f.Severity != "WARN" || f.Part != "host node-1" || !strings.Contains(f.Msg, want) || !slices.Equal(f.Ranks, []int{1}) {
		t.Errorf("got %+v, want a WARN for host node-1 saying %q", f, want)
	}
	// Every link at a healthy rate: no line at all.
	for i := range growth {
		growth[i].After = min(growth[i].After, 40)
	}
	if fs := counterSearch(growth, rules.CounterThresholds{}).counterFindings(nil); len(fs) != 0 {
		t.Errorf("healthy links gave findings: %+v", fs)
	}
}

// counterSearch is a search of one host with two GPUs (ranks 0 and 1 on
// GPUs 0 and 1 of an H200 HGX) whose report holds growth.
func counterSearch(growth []facts.CounterGrowth, ruleSet rules.CounterThresholds) *judging {
	m := nvmlmock.HGX("H200")
	gpus, _, _ := facts.ReadGPUHealth(m.NVML())
	d := newHandRun(2, Options{Hosts: []string{"node-1", "node-1"}, Counters: ruleSet,
		Devices: []results.Device{{Name: "NVIDIA H200", BusID: "0000:18:00.0"}, {Name: "NVIDIA H200", BusID: "0000:2a:00.0"}},
		Who:     func(r int) string { return "rank " + strconv.Itoa(r) }})
	d.devIndex[0], d.devIndex[1] = 0, 1
	d.rep.Counters = growth
	d.facts["node-1"] = &facts.HostFacts{Host: "node-1", GPUs: gpus}
	d.seen.moved = map[string]map[int]*traffic{"pairs": {0: {Link: 36e9}, 1: {Link: 36e9}}, "hosts": {0: {Net: 10e9}, 1: {Net: 10e9}}}
	return d.judging()
}

// TestCounterRules judges growth by the rules: any growth of an NVLink
// counter is a WARN naming the link; one on a part that a bandwidth FAIL
// names joins that FAIL; lost data and links are FAILs; PCIe replays pass
// up to 8 a minute; a class's rules replace the defaults; doctor's own
// tally stands in where the hardware counts no bytes.
func TestCounterRules(t *testing.T) {
	link := facts.CounterPart{GPU: 1, BusID: "0000:2a:00.0", Link: 3}
	gpu := facts.CounterPart{GPU: 1, BusID: "0000:2a:00.0", Link: -1}
	nic := facts.CounterPart{GPU: -1, Link: -1, NIC: "mlx5_0 port 1"}
	grow := func(p facts.CounterPart, c string, n, bytes uint64, secs float64) facts.CounterGrowth {
		return facts.CounterGrowth{Host: "node-1", Stage: "pairs", Part: p, Counter: c, Before: 10, After: 10 + n, Bytes: bytes, Seconds: secs}
	}
	slowPair := record.Finding{Severity: "FAIL", Stage: "pair", Kind: "slow-pair", Part: "ranks 0 and 1", Host: "node-1", Ranks: []int{0, 1}, Msg: "40 GB/s one way"}
	h200 := rules.CounterThresholds{Class: map[string]map[string]rules.CounterRule{"gpu:NVIDIA H200": {facts.CtrNVLinkCRCData: {PerGB: 10}}}}
	for _, tc := range []struct {
		name   string
		g      facts.CounterGrowth
		rules  rules.CounterThresholds
		before []record.Finding
		sev    string // "" none
		want   string // in the new finding's or the joined FAIL's words
	}{
		{"crc at a healthy link's rate", grow(link, facts.CtrNVLinkCRCData, 96, 12e9, 20), rules.CounterThresholds{}, nil, "", ""},
		{"crc past the healthy rate", grow(link, facts.CtrNVLinkCRCData, 960, 12e9, 20), rules.CounterThresholds{}, nil, "WARN",
			"nvlink_crc_data grew past its normal rate on 1 NVLink during the run; the worst, GPU 1 (0000:2a:00.0) NVLink 3, by 960 (80 per GB over 12 GB, counted by the hardware); normal for gpu:NVIDIA H200: up to 50 per GB"},
		{"crc on a slow link", grow(link, facts.CtrNVLinkCRCData, 960, 12e9, 20), rules.CounterThresholds{}, []record.Finding{slowPair}, "joined",
			"40 GB/s one way; nvlink_crc_data grew past its normal rate on 1 NVLink during the run; the worst, GPU 1 (0000:2a:00.0) NVLink 3"},
		{"crc within the class's rule", grow(link, facts.CtrNVLinkCRCData, 96, 12e9, 20), h200, nil, "", ""},
		{"crc past the class's rule", grow(link, facts.CtrNVLinkCRCData, 240, 12e9, 20), h200, nil, "WARN", "normal for gpu:NVIDIA H200: up to 10 per GB"},
		{"doctor's tally without hardware bytes", grow(link, facts.CtrNVLinkReplay, 4, 0, 20), rules.CounterThresholds{}, nil, "WARN",
			"by 4 (2 per GB over 2 GB, by doctor's tally); normal: none"},
		{"uncorrectable ECC", grow(gpu, facts.CtrECCUncorrected, 1, 0, 20), rules.CounterThresholds{}, []record.Finding{slowPair}, "FAIL", "uncorrectable memory errors"},
		{"PCIe replays within 8 a minute", grow(gpu, facts.CtrPCIeReplay, 7, 0, 60), rules.CounterThresholds{}, nil, "", ""},
		{"PCIe replays past 8 a minute", grow(gpu, facts.CtrPCIeReplay, 20, 0, 60), rules.CounterThresholds{}, nil, "WARN", "up to 8 per minute"},
		{"a port that went down", grow(nic, facts.CtrLinkDowned, 1, 0, 20), rules.CounterThresholds{}, nil, "FAIL", "the port went down"},
		{"symbol errors", grow(nic, facts.CtrSymbolError, 12, 2e9, 20), rules.CounterThresholds{}, nil, "WARN", "6 per GB over 2 GB"},
		{"an XID", facts.CounterGrowth{Host: "node-1", Stage: "pairs", Part: gpu, Counter: facts.CtrXID, After: 1, Detail: "79"}, rules.CounterThresholds{}, nil, "FAIL", "XID 79"},
	} {
		d := counterSearch([]facts.CounterGrowth{tc.g}, tc.rules)
		before := append([]record.Finding(nil), tc.before...)
		fs := d.counterFindings(before)
		added := fs[len(tc.before):]
		switch tc.sev {
		case "":
			if len(added) != 0 || (len(fs) > 0 && fs[0].Msg != slowPair.Msg && len(tc.before) > 0) {
				t.Errorf("%s: findings %+v, want none", tc.name, fs)
			}
		case "joined":
			if len(added) != 0 || !strings.Contains(fs[0].Msg, tc.want) {
				t.Errorf("%s: %+v, want the FAIL to say %q", tc.name, fs, tc.want)
			}
		default:
			if len(added) != 1 || added[0].Severity != tc.sev || !strings.Contains(added[0].Msg+"; "+added[0].Cause, tc.want) {
				t.Errorf("%s: %+v, want one %s saying %q", tc.name, added, tc.sev, tc.want)
				continue
			}
			if !strings.Contains(added[0].Part, "node-1") || added[0].Kind != "counter-growth" {
				t.Errorf("%s: part %q kind %q", tc.name, added[0].Part, added[0].Kind)
			}
		}
	}
}

// TestCounterThresholdsValidate refuses unknown counters and negative rules.
func TestCounterThresholdsValidate(t *testing.T) {
	for _, tc := range []struct {
		t    rules.CounterThresholds
		want string
	}{
		{rules.CounterThresholds{Default: map[string]rules.CounterRule{"crc": {}}}, `unknown counter "crc"`},
		{rules.CounterThresholds{Class: map[string]map[string]rules.CounterRule{"gpu:X": {facts.CtrPCIeReplay: {PerMinute: -1}}}}, "must be 0 or more"},
		{rules.CounterThresholds{Default: map[string]rules.CounterRule{facts.CtrSymbolError: {PerGB: 0.5}}}, ""},
	} {
		err := tc.t.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.t, err, tc.want)
		}
	}
}

// TestCounterGrowthJoinsOnlyItsOwnFail: a part's counter growth is added
// to a bandwidth FAIL only where that FAIL's traffic crossed the part: a
// NIC's only to a FAIL between hosts, a GPU's to any FAIL naming its rank.
func TestCounterGrowthJoinsOnlyItsOwnFail(t *testing.T) {
	gpuFail := record.Finding{Severity: "FAIL", Stage: "gpu", Kind: "slow-gpu", Host: "h1", Ranks: []int{2}}
	pairFail := record.Finding{Severity: "FAIL", Stage: "pair", Kind: "slow-pair", Host: "h1", Ranks: []int{1, 2}}
	hostFail := record.Finding{Severity: "FAIL", Stage: "host", Kind: "slow-nic", Host: "h1", Ranks: []int{3}}
	slowHost := record.Finding{Severity: "FAIL", Stage: "gpu", Kind: "slow-host", Host: "h1"}
	warn := record.Finding{Severity: "WARN", Stage: "host", Kind: "slow-nic", Host: "h1", Ranks: []int{3}}
	for _, tc := range []struct {
		name  string
		fs    []record.Finding
		ranks []int
		nic   bool
		want  int
	}{
		{"a NIC and a slow GPU on its host", []record.Finding{gpuFail}, []int{0, 1, 2, 3}, true, -1},
		{"a NIC and a slow NVLink pair on its host", []record.Finding{pairFail}, []int{0, 1, 2, 3}, true, -1},
		{"a NIC and a whole host slow in compute", []record.Finding{slowHost}, []int{0, 1, 2, 3}, true, -1},
		{"a NIC and a slow path between hosts", []record.Finding{gpuFail, hostFail}, []int{0, 1, 2, 3}, true, 1},
		{"a NIC and a warning only", []record.Finding{warn}, []int{0, 1, 2, 3}, true, -1},
		{"a GPU and its own slow copy", []record.Finding{gpuFail}, []int{2}, false, 0},
		{"a GPU and a slow pair it is in", []record.Finding{hostFail, pairFail}, []int{1}, false, 1},
		{"a GPU and another GPU's FAIL", []record.Finding{gpuFail}, []int{5}, false, -1},
		{"a GPU on a host slow alike", []record.Finding{slowHost}, []int{5}, false, 0},
	} {
		if got := failNaming(tc.fs, "h1", tc.ranks, tc.nic); got != tc.want {
			t.Errorf("%s: joins finding %d, want %d", tc.name, got, tc.want)
		}
	}
}

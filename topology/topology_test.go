package topology

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHGXH100ThroughNVSwitch(t *testing.T) {
	f, err := FromNVML(hgxH100())
	if err != nil {
		t.Fatal(err)
	}
	topo := Build(Inputs{Host: "hgx", Facts: &f})
	for i := range topo.Matrix {
		for j := range topo.Matrix {
			want := "NV18"
			if i == j {
				want = "X"
			}
			if topo.Matrix[i][j] != want {
				t.Fatalf("matrix[%d][%d] = %s, want %s", i, j, topo.Matrix[i][j], want)
			}
		}
	}
	g := topo.GPUs[5]
	if g.NVLinks != 18 || g.LinkGBps != 26.5625 || g.PeakGBps != 478.125 || g.NUMA != 1 || g.CC != "9.0" || g.BusID != "0000:ab:00.0" {
		t.Fatalf("GPU 5: %+v", g)
	}
	if !topo.NVLinkAllPairs() || topo.NVLinkPeak() != 478.125 {
		t.Fatal("peak")
	}
	if !strings.Contains(topo.Summary, "8x NVIDIA H100 80GB HBM3; NV18 between all pairs; NVLink 18 x 26.56 = 478.1 GB/s per GPU") {
		t.Errorf("summary %q", topo.Summary)
	}
	s := topo.ResultSummary(1)
	if s.PeakGBps != 478.125 || !strings.Contains(s.PeakLabel, "NVLink") || s.Fingerprint == "" {
		t.Errorf("result summary %+v", s)
	}
}

func TestDGXA100Mock(t *testing.T) {
	f, err := FromNVML(dgxA100())
	if err != nil {
		t.Fatal(err)
	}
	topo := Build(Inputs{Facts: &f})
	if len(topo.GPUs) != 8 || topo.Matrix[0][7] != "NV12" || topo.GPUs[0].PeakGBps != 300 || topo.GPUs[0].NUMA != -1 {
		t.Fatalf("%v %+v", topo.Matrix[0], topo.GPUs[0])
	}
	if f.Driver != "550.54.15" || topo.CUDA != "12.4" {
		t.Errorf("versions %q %q", f.Driver, topo.CUDA)
	}
}

func TestPCIeOnlyLabels(t *testing.T) {
	f, err := FromNVML(pcieOnly())
	if err != nil {
		t.Fatal(err)
	}
	topo := Build(Inputs{Facts: &f})
	want := [][]string{{"X", "PIX", "SYS", "SYS"}, {"PIX", "X", "SYS", "SYS"}, {"SYS", "SYS", "X", "PIX"}, {"SYS", "SYS", "PIX", "X"}}
	for i := range want {
		for j := range want[i] {
			if topo.Matrix[i][j] != want[i][j] {
				t.Fatalf("matrix %v", topo.Matrix)
			}
		}
	}
	if topo.NVLinkAllPairs() || topo.NVLinkPeak() != 0 || topo.ResultSummary(1).PeakGBps != 0 {
		t.Error("no NVLink means no NVLink peak")
	}
	if !topo.P2P[0][1].Read || topo.P2P[0][2].Read || topo.P2P[0][1].NVLink {
		t.Errorf("p2p %+v", topo.P2P[0])
	}
	// Different machines, different fingerprints; the same machine, the same.
	h, _ := FromNVML(hgxH100())
	f2, _ := FromNVML(pcieOnly())
	if Build(Inputs{Facts: &h}).Fingerprint == topo.Fingerprint || Build(Inputs{Facts: &f2}).Fingerprint != topo.Fingerprint {
		t.Error("fingerprint does not tell machine shapes apart")
	}
}

// fakeSysfs builds a sysfs tree: GPU 0 and mlx5_0 under one PCIe switch,
// GPU 1 on another root port, GPU 2 on the second socket, a RoCE port, an
// Ethernet device, a virtual bridge and loopback.
func fakeSysfs(t *testing.T) (Sysfs, []GPU) {
	t.Helper()
	root := t.TempDir()
	dev := func(parts ...string) string {
		p := filepath.Join(append([]string{root, "sys", "devices"}, parts...)...)
		if err := os.MkdirAll(p, 0o755); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
		return p
	}
	write := func(p, content string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil { //nolint:gosec // test files in the test's own temporary directory
			t.Fatal(err)
		}
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	pci := map[string]string{
		"0000:03:00.0": dev("pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"), // GPU 0
		"0000:04:00.0": dev("pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:01.0", "0000:04:00.0"), // mlx5_0
		"0000:21:00.0": dev("pci0000:00", "0000:00:03.0", "0000:20:00.0", "0000:21:00.0"),                 // GPU 1
		"0000:85:00.0": dev("pci0000:80", "0000:80:01.0", "0000:84:00.0", "0000:85:00.0"),                 // GPU 2
		"0000:86:00.0": dev("pci0000:80", "0000:80:02.0", "0000:86:00.0"),                                 // mlx5_1 (RoCE)
		"0000:87:00.0": dev("pci0000:80", "0000:80:03.0", "0000:87:00.0"),                                 // eth0
	}
	for bus, p := range pci {
		link(p, filepath.Join(root, "sys", "bus", "pci", "devices", bus))
		numa := "0"
		if strings.HasPrefix(bus, "0000:8") {
			numa = "1"
		}
		write(filepath.Join(p, "numa_node"), numa)
		write(filepath.Join(p, "local_cpulist"), map[string]string{"0": "0-31", "1": "32-63"}[numa])
	}
	ib := filepath.Join(root, "sys", "class", "infiniband")
	link(pci["0000:04:00.0"], filepath.Join(ib, "mlx5_0", "device"))
	write(filepath.Join(ib, "mlx5_0", "ports", "1", "state"), "4: ACTIVE")
	write(filepath.Join(ib, "mlx5_0", "ports", "1", "phys_state"), "5: LinkUp")
	write(filepath.Join(ib, "mlx5_0", "ports", "1", "rate"), "400 Gb/sec (4X NDR)")
	write(filepath.Join(ib, "mlx5_0", "ports", "1", "link_layer"), "InfiniBand")
	link(pci["0000:86:00.0"], filepath.Join(ib, "mlx5_1", "device"))
	write(filepath.Join(ib, "mlx5_1", "ports", "1", "state"), "1: DOWN")
	write(filepath.Join(ib, "mlx5_1", "ports", "1", "phys_state"), "3: Disabled")
	write(filepath.Join(ib, "mlx5_1", "ports", "1", "rate"), "100 Gb/sec (4X EDR)")
	write(filepath.Join(ib, "mlx5_1", "ports", "1", "link_layer"), "Ethernet")
	write(filepath.Join(pci["0000:86:00.0"], "net", "ens86", "operstate"), "down")
	net := filepath.Join(root, "sys", "class", "net")
	link(filepath.Join(pci["0000:86:00.0"], "net", "ens86"), filepath.Join(net, "ens86"))
	link(pci["0000:87:00.0"], filepath.Join(net, "eth0", "device"))
	write(filepath.Join(net, "eth0", "operstate"), "up")
	write(filepath.Join(net, "eth0", "speed"), "25000")
	write(filepath.Join(net, "docker0", "operstate"), "down")
	write(filepath.Join(net, "lo", "operstate"), "unknown")
	gpus := []GPU{{Index: 0, BusID: "0000:03:00.0", NUMA: 0}, {Index: 1, BusID: "0000:21:00.0", NUMA: 0}, {Index: 2, BusID: "0000:85:00.0", NUMA: 1}}
	return Sysfs{Root: root}, gpus
}

func TestSysfsNICsAndLocality(t *testing.T) {
	s, gpus := fakeSysfs(t)
	nics := s.NICs()
	var names []string
	for _, n := range nics {
		names = append(names, n.Name+"/"+n.Kind)
	}
	if strings.Join(names, " ") != "mlx5_0:1/infiniband mlx5_1:1/roce docker0/ethernet eth0/ethernet" {
		t.Fatalf("NICs %v", names)
	}
	ib := nics[0]
	if ib.State != "ACTIVE" || ib.PhysState != "LinkUp" || ib.RateGbps != 400 || ib.BusID != "0000:04:00.0" || ib.NUMA != 0 {
		t.Fatalf("ib %+v", ib)
	}
	if roce := nics[1]; roce.Netdev != "ens86" || roce.State != "DOWN" || roce.NUMA != 1 {
		t.Fatalf("roce %+v", roce)
	}
	if eth := nics[3]; eth.RateGbps != 25 || eth.State != "up" || eth.BusID != "0000:87:00.0" {
		t.Fatalf("eth %+v", eth)
	}
	if nics[2].BusID != "" {
		t.Fatal("docker0 is virtual")
	}
	cases := []struct{ a, b, want string }{
		{"0000:03:00.0", "0000:04:00.0", "PIX"}, // same switch
		{"0000:03:00.0", "0000:21:00.0", "PHB"}, // same host bridge
		{"0000:03:00.0", "0000:85:00.0", "SYS"}, // other socket
		{"0000:85:00.0", "0000:86:00.0", "PHB"}, // root complex pci0000:80
		{"0000:03:00.0", "0000:99:00.0", "SYS"}, // unknown device
	}
	for _, c := range cases {
		if got := s.Locality(c.a, c.b); got != c.want {
			t.Errorf("Locality(%s, %s) = %s, want %s", c.a, c.b, got, c.want)
		}
	}
	// GPU 2 sits on NUMA node 1, where only a down RoCE port and eth0 live.
	topo := &Topology{GPUs: gpus, NICs: nics}
	for i := range topo.NICs {
		for _, g := range gpus {
			topo.NICs[i].Locality = append(topo.NICs[i].Locality, nicLocality(s, topo.NICs[i], g))
		}
	}
	if got := strings.Join(topo.NICs[0].Locality, " "); got != "PIX PHB SYS" {
		t.Errorf("mlx5_0 locality %s", got)
	}
	if p, name := topo.NICPeak(); p != 50 || name != "mlx5_0:1" {
		t.Errorf("NIC peak %v %s", p, name)
	}
}

func TestNoNICNearGPUWarning(t *testing.T) {
	s, gpus := fakeSysfs(t)
	topo := &Topology{GPUs: gpus, NICs: s.NICs()}
	// Only the InfiniBand port counts here: drop the others.
	topo.NICs = topo.NICs[:1]
	topo.NICs[0].Locality = []string{"PIX", "PHB", "SYS"}
	topo.warn()
	if len(topo.Warnings) != 1 || topo.Warnings[0] != "GPU 2: no NIC on its PCIe switch or NUMA node" {
		t.Errorf("warnings %v", topo.Warnings)
	}
}

var ncclLog228 = `vm:1:1 [0] NCCL INFO NCCL version 2.28.3+cuda13.0
vm:1:2 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.
vm:1:2 [0] NCCL INFO Using network Socket
vm:1:2 [0] NCCL INFO comm 0x55d0c6a1b2c0 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0
vm:1:2 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 24, bw 20.000000/20.000000, type NVL/PIX, sameChannels 0
vm:1:2 [0] NCCL INFO Pattern 1, crossNic 0, nChannels 24, bw 40.000000/40.000000, type NVL/PIX, sameChannels 0
vm:1:2 [0] NCCL INFO Ring 00 : 3 -> 0 -> 1
vm:1:2 [1] NCCL INFO Ring 00 : 0 -> 1 -> 2
vm:1:2 [2] NCCL INFO Ring 00 : 1 -> 2 -> 3
vm:1:2 [3] NCCL INFO Ring 00 : 2 -> 3 -> 0
vm:1:2 [0] NCCL INFO Ring 01 : 2 -> 0 -> 3
vm:1:2 [1] NCCL INFO Ring 01 : 3 -> 1 -> 2
vm:1:2 [2] NCCL INFO Ring 01 : 1 -> 2 -> 0
vm:1:2 [3] NCCL INFO Ring 01 : 0 -> 3 -> 1
vm:1:2 [0] NCCL INFO NVLS multicast support is not available on dev 0 (NVLS_NCHANNELS 0)
vm:1:3 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
vm:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/CUMEM
vm:1:3 [2] NCCL INFO Channel 00/0 : 2[2] -> 3[3] via SHM/direct/direct
vm:1:3 [3] NCCL INFO Channel 00/0 : 3[3] -> 0[0] via P2P/CUMEM
vm:1:3 [3] NCCL INFO Channel 01/0 : 3[3] -> 0[0] via P2P/CUMEM
`

var ncclLog218 = `node1:9:9 [0] NCCL INFO NCCL version 2.18.5+cuda12.2
node1:9:9 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.0.0.1<0>
node1:9:9 [0] NCCL INFO Using network IB
node1:9:9 [0] NCCL INFO comm 0x7f00 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0
node1:9:9 [0] NCCL INFO Channel 00/02 :    0   7   6   5   4   3   2   1   8  15  14  13  12  11  10   9
node1:9:9 [0] NCCL INFO Channel 01/02 :    0   7   6   5   4   3   2   1   8  15  14  13  12  11  10   9
node1:9:9 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 2, bw 24.000000/24.000000, type NVL/PIX, sameChannels 1
node1:9:9 [0] NCCL INFO Channel 00/0 : 9[1a000] -> 0[17000] [receive] via NET/IB/0/GDRDMA
node1:9:9 [0] NCCL INFO Channel 00/0 : 0[17000] -> 8[18000] [send] via NET/IB/1
node1:9:9 [0] NCCL INFO Channel 00/0 : 0[17000] -> 7[c7000] via P2P/IPC/read
`

func TestParseNCCLLogs(t *testing.T) {
	v, err := ParseLog(strings.NewReader(ncclLog228))
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != "2.28.3" || v.Ranks != 4 || v.Nodes != 1 || v.LocalRanks != 4 || v.Network != "Socket" || v.NVLS != "off" || v.Plugin != "internal" {
		t.Fatalf("%+v", v)
	}
	if len(v.Transports) != 4 || v.Transports[2].Class() != "SHM" || v.Transports[0].Transport != "P2P/CUMEM" {
		t.Fatalf("transports %+v", v.Transports)
	}
	if len(v.Rings) != 2 || v.Rings[0] != "0 1 2 3" || v.Rings[1] != "0 3 1 2" || len(v.Graphs) != 2 || v.Graphs[0].Channels != 24 || v.Graphs[0].Type != "NVL/PIX" {
		t.Fatalf("rings %v graphs %+v", v.Rings, v.Graphs)
	}
	old, err := ParseLog(strings.NewReader(ncclLog218))
	if err != nil {
		t.Fatal(err)
	}
	if old.Version != "2.18.5" || old.Nodes != 2 || old.Network != "IB" || strings.Join(old.NetDevs, " ") != "[0]mlx5_0:1/IB [1]mlx5_1:1/IB" {
		t.Fatalf("%+v", old)
	}
	if len(old.Rings) != 1 || !strings.HasPrefix(old.Rings[0], "0 7 6 5") || len(old.Transports) != 3 {
		t.Fatalf("rings %v transports %+v", old.Rings, old.Transports)
	}
	classes := map[string]bool{}
	for _, c := range old.Transports {
		classes[c.Class()] = true
	}
	if !classes["NET/IB"] || !classes["P2P"] {
		t.Fatalf("classes %v", classes)
	}
}

// TestWarningsFromNCCL: NVLink between GPUs 2 and 3 but NCCL used SHM; IB
// without GPUDirect RDMA.
func TestWarningsFromNCCL(t *testing.T) {
	f, _ := FromNVML(hgxH100())
	v, _ := ParseLog(strings.NewReader(ncclLog228))
	topo := Build(Inputs{Facts: &f, NCCL: v})
	if len(topo.Warnings) != 1 || !strings.Contains(topo.Warnings[0], "GPUs 2 and 3 have NV18, but NCCL connects rank 2 to 3 via SHM/direct/direct") {
		t.Fatalf("warnings %v", topo.Warnings)
	}
	old, _ := ParseLog(strings.NewReader(ncclLog218))
	topo = Build(Inputs{Facts: &f, NCCL: old})
	found := false
	for _, w := range topo.Warnings {
		found = found || strings.Contains(w, "NET/IB/1 between ranks 0 and 8 without GPUDirect RDMA")
	}
	if !found {
		t.Fatalf("warnings %v", topo.Warnings)
	}
}

const topoXML = `<system version="1">
  <cpu numaid="0" affinity="ffffffff" arch="x86_64" vendor="AuthenticAMD" familyid="175" modelid="17">
    <pci busid="0000:00:06.0" class="0x030200" vendor="0x10de" device="0x2335" link_speed="32.0 GT/s PCIe" link_width="16">
      <gpu dev="0" sm="90" rank="0" gdr="1">
        <nvlink target="0000:00:07.0" count="18" tclass="0x030200"/>
      </gpu>
    </pci>
    <pci busid="0000:00:07.0" class="0x030200">
      <gpu dev="1" sm="90" rank="1" gdr="0">
        <nvlink target="0000:00:06.0" count="18" tclass="0x030200"/>
      </gpu>
    </pci>
    <nic>
      <net name="eth0" dev="0" speed="100000" port="0" latency="0.000000" guid="0x0" maxconn="65536" gdr="0"/>
    </nic>
  </cpu>
</system>`

func TestParseTopoXML(t *testing.T) {
	v := &NCCLView{}
	if err := v.ParseTopoXML(strings.NewReader(topoXML)); err != nil {
		t.Fatal(err)
	}
	if len(v.XMLGPUs) != 2 || v.XMLGPUs[0].NVLinks["0000:00:07.0"] != 18 || !v.XMLGPUs[0].GDR || v.XMLGPUs[1].GDR || v.XMLGPUs[1].SM != 90 {
		t.Fatalf("%+v", v.XMLGPUs)
	}
	if len(v.XMLNets) != 1 || v.XMLNets[0].Name != "eth0" || v.XMLNets[0].SpeedMbps != 100000 {
		t.Fatalf("%+v", v.XMLNets)
	}
	if err := v.ParseTopoXML(strings.NewReader("<other/>")); err == nil {
		t.Fatal("foreign XML accepted")
	}
}

func TestTopologyJSONRoundTrip(t *testing.T) {
	f, _ := FromNVML(hgxH100())
	topo := Build(Inputs{Host: "hgx", Facts: &f})
	b, err := json.Marshal(topo)
	if err != nil {
		t.Fatal(err)
	}
	var back Topology
	if err := json.Unmarshal(b, &back); err != nil || back.Fingerprint != topo.Fingerprint || back.Matrix[1][2] != "NV18" {
		t.Fatalf("%v %+v", err, back)
	}
}

// TestRecordedH200Host analyses the facts NVML reported on the 4x H200
// machine (collbench topo --record): every pair NV18 through NVSwitch,
// 18 x 26.56 GB/s per GPU, PCIe host bridge between the GPUs.
func TestRecordedH200Host(t *testing.T) {
	b, err := os.ReadFile("testdata/h200x4-facts.json")
	if err != nil {
		t.Fatal(err)
	}
	var f Facts
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	topo := Build(Inputs{Host: "h200", Facts: &f, NCCLVersion: "2.28.3"})
	if len(topo.GPUs) != 4 || !topo.NVLinkAllPairs() || topo.Matrix[0][3] != "NV18" || topo.Matrix[2][1] != "NV18" {
		t.Fatalf("matrix %v", topo.Matrix)
	}
	for _, g := range topo.GPUs {
		if g.Name != "NVIDIA H200" || g.NVLinks != 18 || g.LinkGBps != 26.5625 || g.PeakGBps != 478.125 || g.CC != "9.0" {
			t.Fatalf("GPU %+v", g)
		}
	}
	if f.GPUs[0].Ancestor[1] != "PHB" || !topo.P2P[1][3].NVLink || f.Driver != "580.159.04" {
		t.Fatalf("facts %+v", f.GPUs[0])
	}
	s := topo.ResultSummary(1)
	if s.PeakGBps != 478.125 || s.GPUs != 4 || !strings.Contains(s.Summary, "4x NVIDIA H200; NV18 between all pairs; NVLink 18 x 26.56 = 478.1 GB/s per GPU") {
		t.Fatalf("summary %+v", s)
	}
}

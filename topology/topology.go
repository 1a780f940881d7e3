package topology

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"collbench/results"
)

// Topology is the analysed machine.
type Topology struct {
	Host        string            `json:"host"`
	Driver      string            `json:"driver,omitempty"`
	CUDA        string            `json:"cuda,omitempty"`
	NCCLVersion string            `json:"nccl_version,omitempty"`
	GPUs        []GPU             `json:"gpus"`
	Matrix      [][]string        `json:"matrix"` // GPU x GPU labels: X, NV#, PIX, PXB, PHB, NODE, SYS
	P2P         [][]P2PFacts      `json:"p2p,omitempty"`
	NICs        []NIC             `json:"nics,omitempty"`
	NCCL        *NCCLView         `json:"nccl,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Unavailable []string          `json:"unavailable,omitempty"`
	Warnings    []string          `json:"warnings,omitempty"`
	Summary     string            `json:"summary"`
	Fingerprint string            `json:"fingerprint"`
}

// GPU is one analysed GPU.
type GPU struct {
	Index   int    `json:"index"`
	Name    string `json:"name"`
	UUID    string `json:"uuid,omitempty"`
	BusID   string `json:"bus_id"`
	Memory  uint64 `json:"memory_bytes"`
	CC      string `json:"compute_capability"`
	NUMA    int    `json:"numa"`
	CPUs    string `json:"cpu_affinity,omitempty"`
	NVLinks int    `json:"nvlinks"`
	// LinkGBps is one NVLink's bandwidth per direction; PeakGBps all links'.
	LinkGBps float64 `json:"nvlink_gbps_per_link,omitempty"`
	PeakGBps float64 `json:"nvlink_peak_gbps,omitempty"`
}

// linkGBps is one NVLink's bandwidth per direction by the version NVML
// reports, which counts minor versions: 1 = NVLink 1.0, 2 = 2.0, 3 = 2.2,
// 4 = 3.0, 5 = 3.1, 6 = 4.0 (Hopper), 7 = 5.0 (Blackwell).
var linkGBps = map[uint32]float64{1: 20, 2: 25, 3: 25, 4: 25, 5: 25, 6: 26.5625, 7: 50}

// Inputs are the sources Build analyses; any may be missing.
type Inputs struct {
	Host   string
	Facts  *Facts
	Sysfs  *Sysfs
	NCCL   *NCCLView
	Env    map[string]string
	Errors []string // sources that could not be read, and why
	// NCCLVersion names the library in use when there is no NCCL view.
	NCCLVersion string
}

// Build analyses the inputs.
func Build(in Inputs) *Topology {
	t := &Topology{Host: in.Host, NCCL: in.NCCL, Env: in.Env, Unavailable: append([]string(nil), in.Errors...)}
	if in.NCCL != nil && in.Env["NCCL_NVLS_ENABLE"] == "0" {
		in.NCCL.NVLS = "off (NCCL_NVLS_ENABLE=0)"
	}
	t.NCCLVersion = in.NCCLVersion
	if in.NCCL != nil && in.NCCL.Version != "" {
		t.NCCLVersion = in.NCCL.Version
	}
	f := in.Facts
	if f != nil {
		t.Driver = f.Driver
		if f.CUDA > 0 {
			t.CUDA = fmt.Sprintf("%d.%d", f.CUDA/1000, f.CUDA%1000/10)
		}
		t.Unavailable = append(t.Unavailable, f.Unavailable...)
		t.buildGPUs(f, in.Sysfs)
	}
	if in.Sysfs != nil {
		t.NICs = in.Sysfs.NICs()
		for i := range t.NICs {
			for _, g := range t.GPUs {
				t.NICs[i].Locality = append(t.NICs[i].Locality, nicLocality(*in.Sysfs, t.NICs[i], g))
			}
		}
	}
	t.warn()
	t.Summary = t.summary()
	t.Fingerprint = t.fingerprint()
	return t
}

func nicLocality(s Sysfs, n NIC, g GPU) string {
	if n.BusID == "" {
		return "SYS"
	}
	l := s.Locality(n.BusID, g.BusID)
	if l == "SYS" && n.NUMA >= 0 && n.NUMA == g.NUMA {
		return "NODE"
	}
	return l
}

// buildGPUs fills the GPUs, their link matrix (as nvidia-smi topo -m
// draws it), NVLink rates and peer-to-peer capabilities from NVML's facts
// and sysfs.
func (t *Topology) buildGPUs(f *Facts, sys *Sysfs) {
	n := len(f.GPUs)
	byBus := map[string]int{}
	for i, g := range f.GPUs {
		byBus[g.BusID] = i
	}
	direct := make([][]int, n)
	switchLinks := make([]int, n)
	for i, g := range f.GPUs {
		direct[i] = make([]int, n)
		gpu := GPU{Index: g.Index, Name: g.Name, UUID: g.UUID, BusID: g.BusID, Memory: g.Memory,
			CC: fmt.Sprintf("%d.%d", g.CCMajor, g.CCMinor), NUMA: g.NUMA, CPUs: g.CPUs}
		for _, l := range g.Links {
			if !l.Active {
				continue
			}
			gpu.NVLinks++
			if s := linkGBps[l.Version]; s > 0 && (gpu.LinkGBps == 0 || s < gpu.LinkGBps) {
				gpu.LinkGBps = s
			}
			if j, ok := byBus[l.RemoteBusID]; ok && l.RemoteType != "switch" {
				direct[i][j]++
			} else if l.RemoteType != "gpu" {
				switchLinks[i]++ // an NVSwitch, or a peer NVML cannot name
			}
		}
		gpu.PeakGBps = float64(gpu.NVLinks) * gpu.LinkGBps
		if sys != nil {
			if gpu.NUMA < 0 {
				gpu.NUMA = sys.numa(g.BusID)
			}
			if gpu.NUMA < 0 && sys.NUMANodes() == 1 {
				gpu.NUMA = 0 // one NUMA node: every device is on it
			}
			if gpu.CPUs == "" {
				gpu.CPUs = sys.CPUList(g.BusID)
			}
		}
		t.GPUs = append(t.GPUs, gpu)
	}
	t.Matrix = make([][]string, n)
	for i, g := range f.GPUs {
		t.Matrix[i] = make([]string, n)
		for j := 0; j < n; j++ {
			label := "?"
			if j < len(g.Ancestor) {
				label = g.Ancestor[j]
			}
			links := direct[i][j]
			if i != j && switchLinks[i] > 0 && switchLinks[j] > 0 {
				links += min(switchLinks[i], switchLinks[j])
			}
			if i != j && links > 0 {
				label = fmt.Sprintf("NV%d", links)
			}
			if i == j {
				label = "X"
			}
			t.Matrix[i][j] = label
		}
		t.P2P = append(t.P2P, g.P2P)
	}
}

// NVLinkAllPairs reports whether every pair of GPUs is NVLink-connected.
func (t *Topology) NVLinkAllPairs() bool {
	if len(t.GPUs) < 2 {
		return false
	}
	for i := range t.Matrix {
		for j := range t.Matrix[i] {
			if i != j && !strings.HasPrefix(t.Matrix[i][j], "NV") {
				return false
			}
		}
	}
	return true
}

// NVLinkPeak is the slowest GPU's NVLink bandwidth per direction, 0 if unknown.
func (t *Topology) NVLinkPeak() float64 {
	peak := 0.0
	for i, g := range t.GPUs {
		if g.PeakGBps <= 0 {
			return 0
		}
		if i == 0 || g.PeakGBps < peak {
			peak = g.PeakGBps
		}
	}
	return peak
}

// NICPeak is the slowest active InfiniBand/RoCE port's rate in GB/s, 0 if none.
func (t *Topology) NICPeak() (float64, string) {
	best, name := 0.0, ""
	for _, n := range t.NICs {
		if n.Kind == "ethernet" || n.RateGbps <= 0 || !strings.EqualFold(n.State, "ACTIVE") {
			continue
		}
		if gb := n.RateGbps / 8; best == 0 || gb < best {
			best, name = gb, n.Name
		}
	}
	return best, name
}

// warn adds the warnings a reader of the topology needs: NCCL going
// through SHM or the network between GPUs with NVLink, the network
// without GPUDirect RDMA, and GPUs with no NIC near them.
func (t *Topology) warn() {
	// NVLink between local GPUs, yet NCCL went through SHM or the network.
	if t.NCCL != nil && len(t.Matrix) > 0 && t.NCCL.Nodes <= 1 {
		dev := map[int]int{}
		for _, g := range t.NCCL.XMLGPUs {
			dev[g.Rank] = g.Dev
		}
		for _, c := range t.NCCL.Transports {
			a, b := c.From, c.To
			if d, ok := dev[a]; ok {
				a = d
			}
			if d, ok := dev[b]; ok {
				b = d
			}
			if a < len(t.Matrix) && b < len(t.Matrix) && a != b && strings.HasPrefix(t.Matrix[a][b], "NV") {
				if cl := c.Class(); cl == "SHM" || strings.HasPrefix(cl, "NET") {
					t.Warnings = append(t.Warnings, fmt.Sprintf("GPUs %d and %d have %s, but NCCL connects rank %d to %d via %s",
						a, b, t.Matrix[a][b], c.From, c.To, c.Transport))
				}
			}
		}
	}
	if t.NCCL != nil {
		for _, c := range t.NCCL.Transports {
			if c.Class() == "NET/IB" && !strings.Contains(c.Transport, "GDRDMA") {
				t.Warnings = append(t.Warnings, fmt.Sprintf("NCCL uses %s between ranks %d and %d without GPUDirect RDMA", c.Transport, c.From, c.To))
				break
			}
		}
	}
	// GPUs without a NIC nearby.
	var real []NIC
	for _, n := range t.NICs {
		if n.Kind != "ethernet" || n.BusID != "" {
			real = append(real, n)
		}
	}
	if len(real) == 0 || len(t.GPUs) == 0 {
		return
	}
	var lonely []string
	for gi := range t.GPUs {
		near := false
		for _, n := range real {
			if gi < len(n.Locality) && n.Locality[gi] != "SYS" {
				near = true
			}
		}
		if !near {
			lonely = append(lonely, fmt.Sprint(gi))
		}
	}
	if len(lonely) > 0 {
		t.Warnings = append(t.Warnings, fmt.Sprintf("GPU %s: no NIC on its PCIe switch or NUMA node", strings.Join(lonely, ", ")))
	}
}

// summary is the one-line description of the machine: GPU models and
// counts, the links between them, the NICs.
func (t *Topology) summary() string {
	var parts []string
	if len(t.GPUs) > 0 {
		names := map[string]int{}
		for _, g := range t.GPUs {
			names[g.Name]++
		}
		var ns []string
		for n, c := range names {
			ns = append(ns, fmt.Sprintf("%dx %s", c, n))
		}
		sort.Strings(ns)
		parts = append(parts, strings.Join(ns, " + "))
		labels := map[string]bool{}
		for i := range t.Matrix {
			for j := range t.Matrix[i] {
				if i != j {
					labels[t.Matrix[i][j]] = true
				}
			}
		}
		if len(labels) == 1 {
			for l := range labels {
				parts = append(parts, l+" between all pairs")
			}
		} else if len(labels) > 1 {
			var ls []string
			for l := range labels {
				ls = append(ls, l)
			}
			sort.Strings(ls)
			parts = append(parts, "links "+strings.Join(ls, "/"))
		}
		if p := t.NVLinkPeak(); p > 0 {
			g := t.GPUs[0]
			parts = append(parts, fmt.Sprintf("NVLink %d x %.2f = %.1f GB/s per GPU", g.NVLinks, g.LinkGBps, p))
		}
	} else {
		parts = append(parts, "no GPUs")
	}
	var nics []string
	for _, n := range t.NICs {
		up := strings.EqualFold(n.State, "ACTIVE") || strings.EqualFold(n.State, "up")
		if !up && n.BusID == "" {
			continue // a virtual device that is down says nothing about the machine
		}
		s := n.Name
		if n.RateGbps > 0 {
			s += fmt.Sprintf(" %gGb/s", n.RateGbps)
		}
		nics = append(nics, s)
	}
	if len(nics) > 0 {
		parts = append(parts, "NICs "+strings.Join(nics, ", "))
	}
	if t.Driver != "" {
		parts = append(parts, "driver "+t.Driver)
	}
	if t.NCCLVersion != "" {
		parts = append(parts, "NCCL "+t.NCCLVersion)
	}
	return strings.Join(parts, "; ")
}

// fingerprint hashes the machine's shape: GPU models, link matrix, NIC set
// and versions. Equal fingerprints mean the same kind of machine.
func (t *Topology) fingerprint() string {
	shape := struct {
		GPUs   []string
		Matrix [][]string
		NICs   []string
		Driver string
		NCCL   string
	}{Matrix: t.Matrix, Driver: t.Driver, NCCL: t.NCCLVersion}
	for _, g := range t.GPUs {
		shape.GPUs = append(shape.GPUs, g.Name)
	}
	for _, n := range t.NICs {
		shape.NICs = append(shape.NICs, fmt.Sprintf("%s/%s/%g", n.Name, n.Kind, n.RateGbps))
	}
	b, _ := json.Marshal(shape)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// ResultSummary is the short form placed beside benchmark results.
func (t *Topology) ResultSummary(nodes int) *results.TopologySummary {
	s := &results.TopologySummary{Summary: t.Summary, Fingerprint: t.Fingerprint, GPUs: len(t.GPUs),
		Driver: t.Driver, NCCL: t.NCCLVersion, Nodes: nodes}
	if nodes <= 1 && t.NVLinkAllPairs() {
		if p := t.NVLinkPeak(); p > 0 {
			g := t.GPUs[0]
			s.PeakGBps = p
			s.PeakLabel = fmt.Sprintf("NVLink, %d x %.2f GB/s per GPU per direction", g.NVLinks, g.LinkGBps)
		}
	} else if nodes > 1 {
		if p, name := t.NICPeak(); p > 0 {
			s.PeakGBps = p
			s.PeakLabel = fmt.Sprintf("NIC %s, %.0f GB/s", name, p)
		}
	}
	return s
}

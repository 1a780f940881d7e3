package report

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"collbench/internal/words"
	"collbench/topology"
)

// WriteTopology renders a topology for people: the link matrix as
// nvidia-smi topo -m shows it, then GPUs, NVLinks, NICs, what NCCL chose,
// warnings and what could not be read.
func WriteTopology(w io.Writer, t *topology.Topology) error {
	fmt.Fprintf(w, "# topology of %s\n", t.Host)
	var ver []string
	for _, kv := range [][2]string{{"driver", t.Driver}, {"CUDA", t.CUDA}, {"NCCL", t.NCCLVersion}} {
		if kv[1] != "" {
			ver = append(ver, kv[0]+" "+kv[1])
		}
	}
	if len(ver) > 0 {
		fmt.Fprintf(w, "# versions: %s\n", strings.Join(ver, ", "))
	}
	fmt.Fprintf(w, "# summary:  %s\n# fingerprint: %s\n", t.Summary, t.Fingerprint)
	if len(t.GPUs) > 0 {
		if err := writeGPUs(w, t); err != nil {
			return err
		}
	}
	if len(t.NICs) > 0 {
		if err := writeNICs(w, t); err != nil {
			return err
		}
	}
	if t.NCCL != nil {
		writeNCCLChoice(w, t.NCCL)
	}
	if len(t.Env) > 0 {
		var kv []string
		for k, v := range t.Env {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		fmt.Fprintf(w, "#\n# environment: %s\n", strings.Join(kv, " "))
	}
	for _, s := range t.Warnings {
		fmt.Fprintf(w, "# warning: %s\n", s)
	}
	for _, s := range t.Unavailable {
		fmt.Fprintf(w, "# unavailable: %s\n", s)
	}
	return nil
}

// writeGPUs writes the link matrix (as nvidia-smi topo -m draws it), the
// GPUs and their peer-to-peer capabilities.
func writeGPUs(w io.Writer, t *topology.Topology) error {
	fmt.Fprintln(w, "#\n# link matrix")
	tb := PlainTable(w)
	header := []any{""}
	for i := range t.GPUs {
		header = append(header, fmt.Sprintf("GPU%d", i))
	}
	for i := range t.NICs {
		header = append(header, fmt.Sprintf("NIC%d", i))
	}
	header = append(header, "CPU Affinity", "NUMA Affinity")
	tb.Header(header...)
	for i, g := range t.GPUs {
		row := []any{fmt.Sprintf("GPU%d", i)}
		for _, l := range t.Matrix[i] {
			row = append(row, l)
		}
		for _, n := range t.NICs {
			row = append(row, at(n.Locality, i))
		}
		row = append(row, words.OrDash(g.CPUs), numa(g.NUMA))
		if err := tb.Append(row...); err != nil {
			return err
		}
	}
	for ni, n := range t.NICs {
		row := []any{fmt.Sprintf("NIC%d", ni)}
		for i := range t.GPUs {
			row = append(row, at(n.Locality, i))
		}
		for nj := range t.NICs {
			if ni == nj {
				row = append(row, "X")
			} else {
				row = append(row, "-")
			}
		}
		row = append(row, "", numa(n.NUMA))
		if err := tb.Append(row...); err != nil {
			return err
		}
	}
	if err := tb.Render(); err != nil {
		return err
	}
	fmt.Fprintln(w, `# Legend:
#   X    = self
#   SYS  = connection traversing PCIe and the interconnect between NUMA nodes (e.g. QPI/UPI)
#   NODE = connection traversing PCIe and the interconnect between PCIe host bridges within a NUMA node
#   PHB  = connection traversing PCIe and a PCIe host bridge (typically the CPU)
#   PXB  = connection traversing multiple PCIe bridges (without the PCIe host bridge)
#   PIX  = connection traversing at most a single PCIe bridge
#   NV#  = connection traversing a bonded set of # NVLinks (directly or through NVSwitch)`)
	if len(t.NICs) > 0 {
		fmt.Fprintln(w, "# NIC legend:")
		for i, n := range t.NICs {
			fmt.Fprintf(w, "#   NIC%d: %s\n", i, n.Name)
		}
	}

	fmt.Fprintln(w, "#\n# GPUs")
	tb = PlainTable(w)
	tb.Header("GPU", "name", "bus id", "memory", "cc", "NUMA", "NVLinks", "per link (GB/s)", "peak per direction (GB/s)", "UUID")
	for _, g := range t.GPUs {
		per, peak := "-", "-"
		if g.LinkGBps > 0 {
			per, peak = fmt.Sprintf("%.2f", g.LinkGBps), fmt.Sprintf("%.1f", g.PeakGBps)
		}
		if err := tb.Append(fmt.Sprint(g.Index), g.Name, g.BusID, words.Bytes(int64(g.Memory)), g.CC, numa(g.NUMA), //nolint:gosec // G115: GPU memory is far below 2^63 bytes
			fmt.Sprint(g.NVLinks), per, peak, words.OrDash(g.UUID)); err != nil {
			return err
		}
	}
	if err := tb.Render(); err != nil {
		return err
	}
	fmt.Fprintln(w, "#\n# peer-to-peer (read/write/nvlink/atomics)")
	tb = PlainTable(w)
	tb.Header(header[:len(t.GPUs)+1]...)
	for i, row := range t.P2P {
		cells := []any{fmt.Sprintf("GPU%d", i)}
		for j, p := range row {
			if i == j {
				cells = append(cells, "X")
				continue
			}
			cells = append(cells, flags(p))
		}
		if err := tb.Append(cells...); err != nil {
			return err
		}
	}
	return tb.Render()
}

// writeNICs writes the NICs' table.
func writeNICs(w io.Writer, t *topology.Topology) error {
	fmt.Fprintln(w, "#\n# NICs")
	tb := PlainTable(w)
	tb.Header("NIC", "name", "kind", "state", "phys state", "rate (Gb/s)", "link layer", "netdev", "bus id", "NUMA")
	for i, n := range t.NICs {
		rate := "-"
		if n.RateGbps > 0 {
			rate = fmt.Sprintf("%g", n.RateGbps)
		}
		bus := n.BusID
		if bus == "" {
			bus = "virtual"
		}
		if err := tb.Append(fmt.Sprintf("NIC%d", i), n.Name, n.Kind, words.OrDash(n.State), words.OrDash(n.PhysState), rate,
			words.OrDash(n.LinkLayer), words.OrDash(n.Netdev), bus, numa(n.NUMA)); err != nil {
			return err
		}
	}
	return tb.Render()
}

// writeNCCLChoice writes what NCCL chose: ranks, network, transports,
// rings and graphs.
func writeNCCLChoice(w io.Writer, v *topology.NCCLView) {
	fmt.Fprintln(w, "#\n# what NCCL chose")
	fmt.Fprintf(w, "#   ranks %d, nodes %d, local ranks %d; network %s (plugin %s); NVLS %s\n", v.Ranks, v.Nodes, v.LocalRanks, words.OrDash(v.Network), words.OrDash(v.Plugin), words.OrDash(v.NVLS))
	if len(v.NetDevs) > 0 {
		fmt.Fprintf(w, "#   network devices: %s\n", strings.Join(v.NetDevs, " "))
	}
	counts := map[string]int{}
	for _, c := range v.Transports {
		counts[c.Transport]++
	}
	var ts []string
	for k, n := range counts {
		ts = append(ts, fmt.Sprintf("%s (%d connections)", k, n))
	}
	sort.Strings(ts)
	if len(ts) > 0 {
		fmt.Fprintf(w, "#   transports: %s\n", strings.Join(ts, ", "))
	}
	for _, c := range v.Transports {
		fmt.Fprintf(w, "#     rank %d -> %d via %s\n", c.From, c.To, c.Transport)
	}
	for _, r := range v.Rings {
		fmt.Fprintf(w, "#   ring: %s\n", r)
	}
	for _, g := range v.Graphs {
		fmt.Fprintf(w, "#   graph: pattern %d (%s), %d channels, bw %s GB/s, path %s\n", g.Pattern, patternName(g.Pattern), g.Channels, g.Bandwidth, g.Type)
	}
}

func patternName(p int) string {
	switch p {
	case 1:
		return "balanced tree"
	case 2:
		return "split tree"
	case 3:
		return "tree"
	case 4:
		return "ring"
	case 5:
		return "NVLS"
	case 6:
		return "CollNet direct"
	}
	return "other"
}

func flags(p topology.P2PFacts) string {
	b := []byte("----")
	for i, ok := range []bool{p.Read, p.Write, p.NVLink, p.Atomics} {
		if ok {
			b[i] = "rwna"[i]
		}
	}
	return string(b)
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "?"
}

func numa(n int) string {
	if n < 0 {
		return "N/A"
	}
	return fmt.Sprint(n)
}

// HostTopology is one host of a world as `collbench topo` gathers it under
// a launcher: its processes and its topology's fingerprint and summary.
type HostTopology struct {
	Host        string `json:"host"`
	Ranks       []int  `json:"ranks"`
	Fingerprint string `json:"fingerprint"`
	Summary     string `json:"summary"`
}

// maxShapeHosts is the most hosts a shape of machine names.
const maxShapeHosts = 4

// WriteHostTopologies writes the hosts of a world by shape: one row per
// distinct fingerprint, the most common first, with how many hosts and
// processes have it and the first few hosts' names, so a host built
// differently from the rest stands out at any size.
func WriteHostTopologies(w io.Writer, hosts []HostTopology) error {
	type shape struct {
		fp, summary string
		hosts       []string
		procs       int
	}
	var order []string
	by := map[string]*shape{}
	procs := 0
	for _, h := range hosts {
		s := by[h.Fingerprint]
		if s == nil {
			s = &shape{fp: h.Fingerprint, summary: h.Summary}
			by[h.Fingerprint] = s
			order = append(order, h.Fingerprint)
		}
		s.hosts = append(s.hosts, h.Host)
		s.procs += len(h.Ranks)
		procs += len(h.Ranks)
	}
	slices.SortStableFunc(order, func(a, b string) int { return len(by[b].hosts) - len(by[a].hosts) })
	verdict := "every host has the same topology"
	if len(order) > 1 {
		verdict = fmt.Sprintf("%s shapes of host: the hosts below the first differ from most", words.Count(len(order)))
	}
	fmt.Fprintf(w, "#\n# hosts of this world: %s hosts, %s processes; %s\n", words.Count(len(hosts)), words.Count(procs), verdict)
	tb := PlainTable(w)
	tb.Header("fingerprint", "hosts", "processes", "which", "summary")
	for _, fp := range order {
		s := by[fp]
		which := strings.Join(s.hosts[:min(len(s.hosts), maxShapeHosts)], ", ")
		if len(s.hosts) > maxShapeHosts {
			which += fmt.Sprintf(" and %s more", words.Count(len(s.hosts)-maxShapeHosts))
		}
		if err := tb.Append(words.OrDash(fp), words.Count(len(s.hosts)), words.Count(s.procs), which, s.summary); err != nil {
			return err
		}
	}
	return tb.Render()
}

// TopologyWorld is topo's JSON under a launcher: rank 0's topology and every
// host's shape.
type TopologyWorld struct {
	Topology *topology.Topology `json:"topology"`
	Hosts    []HostTopology     `json:"hosts"`
}

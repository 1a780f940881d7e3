// Package cluster describes a GPU cluster as a model: hosts of GPUs joined
// by NVLink inside each host, one NIC per GPU on rails, leaf switches and
// spines between hosts, the speeds of every link, planted faults and
// seeded noise. The simulated backend runs collectives on it and doctor
// plans against it; Net gives what each link carries and how long a
// collective takes when many run at once.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"collbench/internal/bounded"
	"collbench/internal/yamlwords"
)

// Model is a cluster file.
type Model struct {
	Name        string  `yaml:"name"`
	Hosts       int     `yaml:"hosts"`
	GPUsPerHost int     `yaml:"gpus_per_host"`
	GPU         GPU     `yaml:"gpu"`
	NVLink      Link    `yaml:"nvlink"`
	NIC         Link    `yaml:"nic"`
	Fabric      Fabric  `yaml:"fabric"`
	Costs       Costs   `yaml:"costs"`
	Noise       Noise   `yaml:"noise"`
	Faults      []Fault `yaml:"faults"`
}

// GPU is what every GPU of the cluster is and does when healthy.
type GPU struct {
	Model string `yaml:"model"`
	// CopyGBps is a device-to-device copy's rate (bytes copied per second);
	// FillGelems the fill kernel's rate in 1e9 elements per second.
	CopyGBps   float64 `yaml:"copy_gbytes_per_s"`
	FillGelems float64 `yaml:"fill_gelems_per_s"`
	// What NVML would report, from which doctor forms its expectations.
	MemBusBits  int `yaml:"memory_bus_bits"`
	MemClockMHz int `yaml:"memory_clock_mhz"`
	Cores       int `yaml:"cores"`
	SMClockMHz  int `yaml:"sm_clock_mhz"`
}

// Link is a kind of link: the rate a transfer over it reaches per
// direction and its latency. For NVLink, Links and LinkPeakGBps are what
// NVML reports (links per GPU, each link's peak), from which doctor forms
// its expectation.
type Link struct {
	GBps         float64 `yaml:"gbytes_per_s"`
	LatencyUS    float64 `yaml:"latency_us"`
	Links        int     `yaml:"links"`
	LinkPeakGBps float64 `yaml:"link_peak_gbytes_per_s"`
}

// Fabric is the network between hosts: every NIC of a host goes to the
// host's leaf switch; every leaf has one uplink to every spine. Traffic
// between leaves on rail r crosses spine r mod Spines.
type Fabric struct {
	HostsPerLeaf int `yaml:"hosts_per_leaf"`
	Spines       int `yaml:"spines"`
	// Oversubscription is what the hosts of a leaf can send over what its
	// uplinks carry (1: non-blocking, 2: half).
	Oversubscription float64 `yaml:"oversubscription"`
	// LatencyUS is one switch's latency.
	LatencyUS float64 `yaml:"switch_latency_us"`
}

// Costs are the host-side times a doctor run spends outside the
// collectives, at the cluster's scale.
type Costs struct {
	// SplitS is making one round's communicators (ncclCommSplit on every rank).
	SplitS float64 `yaml:"split_s"`
	// MeasureS is one measurement's fill, check and gathering of figures.
	MeasureS float64 `yaml:"measure_s"`
}

// Noise is what makes healthy measurements differ: every operation's time
// is drawn around the model's with Spread (its coefficient of variation),
// and one in StallEvery stalls StallFactor times as long. Seed picks the draws.
type Noise struct {
	Seed        uint64  `yaml:"seed"`
	Spread      float64 `yaml:"spread"`
	StallEvery  int     `yaml:"stall_every"`
	StallFactor float64 `yaml:"stall_factor"`
}

// Fault kinds a cluster file may plant.
const (
	SlowNIC     = "slow-nic"     // host, gpu, factor
	FlappingNIC = "flapping-nic" // host, gpu, factor, every
	SlowUplink  = "slow-uplink"  // leaf, spine, factor
	SlowGPU     = "slow-gpu"     // host, gpu, factor
	SlowNVLink  = "slow-nvlink"  // host, factor
	WrongData   = "wrong-data"   // host, gpu
	BusyFabric  = "busy-fabric"  // factor, from_s, for_s
)

// FaultKinds are the kinds a cluster file may plant, in the docs' order.
var FaultKinds = []string{SlowNIC, FlappingNIC, SlowUplink, SlowGPU, SlowNVLink, WrongData, BusyFabric}

// Fault is one planted fault. Factor is the share of its healthy speed the
// part keeps (0.5: half); a flapping NIC keeps it in one operation of Every.
// A busy fabric (another job's traffic) is no part: every operation between
// hosts that starts from FromS seconds into the run, for ForS seconds, keeps
// Factor of its speed. The run's seconds are the ranks' own (collectives
// and each measurement's host work; making communicators aside).
type Fault struct {
	Kind   string   `yaml:"kind"`
	Host   *int     `yaml:"host"`
	GPU    *int     `yaml:"gpu"`
	Leaf   *int     `yaml:"leaf"`
	Spine  *int     `yaml:"spine"`
	Factor float64  `yaml:"factor"`
	Every  int      `yaml:"every"`
	FromS  *float64 `yaml:"from_s"`
	ForS   float64  `yaml:"for_s"`
}

// Busy is the share of its speed an operation between hosts that starts at
// second s of the run keeps: the least factor of the busy-fabric faults
// whose window holds s, 1 where none does.
func (m *Model) Busy(s float64) float64 {
	f := 1.0
	for _, x := range m.Faults {
		if x.Kind == BusyFabric && x.FromS != nil && s >= *x.FromS && s < *x.FromS+x.ForS {
			f = min(f, x.Factor)
		}
	}
	return f
}

// Defaults is an H200 cluster: 8 GPUs per host on NVSwitch, 400 Gb/s NICs,
// 32 hosts per leaf and 8 spines, non-blocking. The rates are what
// collbench measured on the lent H200 machines where it could, and the
// parts' published rates elsewhere (docs/simulate.md says which).
func Defaults() Model {
	return Model{
		Name: "cluster", GPUsPerHost: 8,
		GPU:    GPU{Model: "NVIDIA H200", CopyGBps: 2098, FillGelems: 174, MemBusBits: 6016, MemClockMHz: 3201, Cores: 16896, SMClockMHz: 1980},
		NVLink: Link{GBps: 340, LatencyUS: 2, Links: 18, LinkPeakGBps: 25},
		NIC:    Link{GBps: 48, LatencyUS: 3},
		Fabric: Fabric{HostsPerLeaf: 32, Spines: 8, Oversubscription: 1, LatencyUS: 0.6},
		Costs:  Costs{SplitS: 1, MeasureS: 0.1},
		Noise:  Noise{Seed: 1, Spread: 0.02, StallEvery: 2000, StallFactor: 4},
	}
}

// Load reads and checks a cluster file.
func Load(ctx context.Context, path string) (*Model, error) {
	data, err := bounded.ReadFile(ctx, path, bounded.Config)
	if err != nil {
		var big *bounded.TooLargeError
		if errors.As(err, &big) {
			return nil, fmt.Errorf("cluster file %v", err)
		}
		return nil, fmt.Errorf("cannot read cluster file %s: %w", path, err)
	}
	m, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("cluster file %s: %v", path, err)
	}
	return m, nil
}

// Parse reads and checks a cluster model from YAML text; what it leaves
// out takes Defaults. Errors name the line.
func Parse(data []byte) (*Model, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlwords.Tidy(err, "docs/simulate.md")
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("empty cluster file: give at least hosts: (see docs/simulate.md)")
	}
	m := Defaults()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return nil, yamlwords.Tidy(err, "docs/simulate.md")
	}
	if err := m.check(root.Content[0]); err != nil {
		return nil, err
	}
	return &m, nil
}

// node finds the value node at a path of keys (a number indexes a list).
func node(n *yaml.Node, path ...any) *yaml.Node {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			if n.Kind != yaml.MappingNode {
				return nil
			}
			var next *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == k {
					next = n.Content[i+1]
				}
			}
			if next == nil {
				return nil
			}
			n = next
		case int:
			if n.Kind != yaml.SequenceNode || k >= len(n.Content) {
				return nil
			}
			n = n.Content[k]
		}
	}
	return n
}

// check validates the model; doc is the file's top mapping, for lines.
func (m *Model) check(doc *yaml.Node) error {
	at := func(path ...any) *yaml.Node {
		for len(path) > 0 {
			if n := node(doc, path...); n != nil {
				return n
			}
			path = path[:len(path)-1]
		}
		return doc
	}
	bad := func(path []any, format string, a ...any) error {
		return yamlwords.Atf(at(path...), format, a...)
	}
	if node(doc, "hosts") == nil {
		return bad(nil, "hosts: missing: say how many hosts the cluster has")
	}
	counts := []struct {
		path  []any
		v     int
		least int
	}{
		{[]any{"hosts"}, m.Hosts, 1}, {[]any{"gpus_per_host"}, m.GPUsPerHost, 1},
		{[]any{"fabric", "hosts_per_leaf"}, m.Fabric.HostsPerLeaf, 1}, {[]any{"fabric", "spines"}, m.Fabric.Spines, 1},
		{[]any{"noise", "stall_every"}, m.Noise.StallEvery, 0}, {[]any{"nvlink", "links"}, m.NVLink.Links, 1},
	}
	for _, c := range counts {
		if c.v < c.least {
			return bad(c.path, "%s: %d must be %d or more", c.path[len(c.path)-1], c.v, c.least)
		}
	}
	if m.Hosts > 65536 || m.GPUsPerHost > 64 {
		return bad([]any{"hosts"}, "the model holds at most 65,536 hosts of at most 64 GPUs")
	}
	speeds := []struct {
		path []any
		v    float64
		pos  bool // must be above 0 (else 0 or more)
	}{
		{[]any{"gpu", "copy_gbytes_per_s"}, m.GPU.CopyGBps, true}, {[]any{"gpu", "fill_gelems_per_s"}, m.GPU.FillGelems, true},
		{[]any{"nvlink", "gbytes_per_s"}, m.NVLink.GBps, true}, {[]any{"nic", "gbytes_per_s"}, m.NIC.GBps, true},
		{[]any{"nvlink", "link_peak_gbytes_per_s"}, m.NVLink.LinkPeakGBps, true},
		{[]any{"nvlink", "latency_us"}, m.NVLink.LatencyUS, false}, {[]any{"nic", "latency_us"}, m.NIC.LatencyUS, false},
		{[]any{"fabric", "switch_latency_us"}, m.Fabric.LatencyUS, false}, {[]any{"fabric", "oversubscription"}, m.Fabric.Oversubscription, true},
		{[]any{"costs", "split_s"}, m.Costs.SplitS, false}, {[]any{"costs", "measure_s"}, m.Costs.MeasureS, false},
		{[]any{"noise", "spread"}, m.Noise.Spread, false},
	}
	for _, s := range speeds {
		key := s.path[len(s.path)-1]
		if s.v < 0 || (s.pos && s.v == 0) || s.v != s.v {
			least := "0 or more"
			if s.pos {
				least = "above 0"
			}
			return bad(s.path, "%s: %v must be %s", key, s.v, least)
		}
	}
	if m.Noise.Spread >= 0.5 {
		return bad([]any{"noise", "spread"}, "spread: %v must be below 0.5 (a coefficient of variation, e.g. 0.02)", m.Noise.Spread)
	}
	if m.Noise.StallEvery > 0 && m.Noise.StallFactor < 1 {
		return bad([]any{"noise", "stall_factor"}, "stall_factor: %v must be 1 or more (how many times longer a stalled operation takes)", m.Noise.StallFactor)
	}
	for i, f := range m.Faults {
		p := []any{"faults", i}
		where := func(key string) []any { return append(append([]any(nil), p...), key) }
		need := map[string][]string{SlowNIC: {"host", "gpu", "factor"}, FlappingNIC: {"host", "gpu", "factor", "every"},
			SlowUplink: {"leaf", "spine", "factor"}, SlowGPU: {"host", "gpu", "factor"}, SlowNVLink: {"host", "factor"}, WrongData: {"host", "gpu"},
			BusyFabric: {"factor", "from_s", "for_s"}}
		keys, ok := need[f.Kind]
		if !ok {
			return bad(where("kind"), "fault kind %q is not one of %s", f.Kind, strings.Join(FaultKinds, ", "))
		}
		given := map[string]bool{"host": f.Host != nil, "gpu": f.GPU != nil, "leaf": f.Leaf != nil, "spine": f.Spine != nil,
			"factor": f.Factor != 0, "every": f.Every != 0, "from_s": f.FromS != nil, "for_s": f.ForS != 0}
		for _, k := range keys {
			if !given[k] {
				return bad(p, "fault %s needs %s: (it takes %s)", f.Kind, k, strings.Join(keys, ", "))
			}
		}
		for k, g := range given {
			if g && !slices.Contains(keys, k) {
				return bad(where(k), "fault %s takes no %s: (it takes %s)", f.Kind, k, strings.Join(keys, ", "))
			}
		}
		inRange := func(key string, v *int, n int, what string) error {
			if v != nil && (*v < 0 || *v >= n) {
				return bad(where(key), "fault %s: %s %d does not exist: the model has %s %d (0 to %d)", f.Kind, key, *v, what, n, n-1)
			}
			return nil
		}
		if err := errors.Join(inRange("host", f.Host, m.Hosts, "hosts"), inRange("gpu", f.GPU, m.GPUsPerHost, "GPUs per host"),
			inRange("leaf", f.Leaf, m.Leaves(), "leaves"), inRange("spine", f.Spine, m.Fabric.Spines, "spines")); err != nil {
			return err
		}
		if f.Kind == SlowUplink && m.Leaves() < 2 {
			return bad(p, "fault slow-uplink: the model has one leaf, so no traffic crosses a spine")
		}
		if given["factor"] && (f.Factor <= 0 || f.Factor >= 1) {
			return bad(where("factor"), "fault %s: factor %v must be between 0 and 1 (the share of its speed the part keeps)", f.Kind, f.Factor)
		}
		if f.FromS != nil && (*f.FromS < 0 || *f.FromS != *f.FromS) {
			return bad(where("from_s"), "fault %s: from_s %v must be 0 or more (seconds into the run)", f.Kind, *f.FromS)
		}
		if given["for_s"] && (f.ForS <= 0 || f.ForS != f.ForS) {
			return bad(where("for_s"), "fault %s: for_s %v must be above 0 (seconds)", f.Kind, f.ForS)
		}
		if given["every"] && f.Every < 2 {
			return bad(where("every"), "fault %s: every %d must be 2 or more (slow one operation in every)", f.Kind, f.Every)
		}
	}
	return nil
}

// Ranks is the number of GPUs, one rank each.
func (m *Model) Ranks() int { return m.Hosts * m.GPUsPerHost }

// Leaves is the number of leaf switches.
func (m *Model) Leaves() int { return (m.Hosts + m.Fabric.HostsPerLeaf - 1) / m.Fabric.HostsPerLeaf }

// LeafOf is the leaf host h hangs from.
func (m *Model) LeafOf(h int) int { return h / m.Fabric.HostsPerLeaf }

// SpineOf is the spine that carries rail r between leaves.
func (m *Model) SpineOf(r int) int { return r % m.Fabric.Spines }

// HostName, LeafName and SpineName are the parts' names in reports.
func (m *Model) HostName(h int) string {
	return fmt.Sprintf("node-%0*d", digits(m.Hosts-1), h)
}

// LeafName names leaf l.
func (m *Model) LeafName(l int) string { return fmt.Sprintf("leaf-%0*d", digits(m.Leaves()-1), l) }

// SpineName names spine s.
func (m *Model) SpineName(s int) string { return fmt.Sprintf("spine-%d", s) }

// BusID is GPU g's PCI address (an HGX board's for eight GPUs).
func (m *Model) BusID(g int) string {
	hgx := []int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}
	if m.GPUsPerHost <= len(hgx) {
		return fmt.Sprintf("0000:%02x:00.0", hgx[g])
	}
	return fmt.Sprintf("0000:%02x:00.0", 0x10+g*3)
}

func digits(n int) int {
	d := 1
	for n >= 10 {
		n /= 10
		d++
	}
	return d
}

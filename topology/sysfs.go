package topology

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// NIC is a network interface: an InfiniBand/RoCE port or an Ethernet device.
type NIC struct {
	Name      string  `json:"name"`  // mlx5_0:1 or eth0
	Kind      string  `json:"kind"`  // infiniband, roce, ethernet
	State     string  `json:"state"` // ACTIVE, DOWN, up, down
	PhysState string  `json:"phys_state,omitempty"`
	RateGbps  float64 `json:"rate_gbps"` // 0 when unknown
	LinkLayer string  `json:"link_layer,omitempty"`
	Netdev    string  `json:"netdev,omitempty"` // the Ethernet name of a RoCE port
	BusID     string  `json:"bus_id,omitempty"` // empty for virtual devices
	NUMA      int     `json:"numa"`
	// Locality is the PCI relation to each GPU: PIX, PXB, PHB, NODE, SYS.
	Locality []string `json:"locality,omitempty"`
}

// Sysfs reads device information under Root (normally "/").
type Sysfs struct{ Root string }

func (s Sysfs) path(p ...string) string { return filepath.Join(append([]string{s.Root}, p...)...) }

func (s Sysfs) read(p ...string) string {
	b, err := os.ReadFile(s.path(p...))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// pciPath returns the resolved device path of a PCI function, as the list
// of PCI components below /sys/devices (root complex first), or nil.
func (s Sysfs) pciPath(bus string) []string {
	if bus == "" {
		return nil
	}
	target, err := filepath.EvalSymlinks(s.path("sys/bus/pci/devices", bus))
	if err != nil {
		return nil
	}
	rel, err := filepath.Rel(s.path("sys/devices"), target)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil
	}
	return strings.Split(rel, string(filepath.Separator))
}

// numa returns a PCI function's NUMA node, -1 when unknown.
func (s Sysfs) numa(bus string) int {
	if n, err := strconv.Atoi(s.read("sys/bus/pci/devices", bus, "numa_node")); err == nil {
		return n
	}
	return -1
}

// CPUList returns the CPUs local to a PCI function (local_cpulist).
func (s Sysfs) CPUList(bus string) string {
	return s.read("sys/bus/pci/devices", bus, "local_cpulist")
}

// deviceBus returns the PCI bus id a class device points at, or "".
func (s Sysfs) deviceBus(classPath string) string {
	target, err := filepath.EvalSymlinks(filepath.Join(classPath, "device"))
	if err != nil {
		return ""
	}
	base := filepath.Base(target)
	if pciBusRE.MatchString(base) {
		return base
	}
	return ""
}

var (
	pciBusRE = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	rateRE   = regexp.MustCompile(`^([0-9.]+) Gb/sec`)
)

// stateName strips sysfs's numeric prefix: "4: ACTIVE" -> "ACTIVE".
func stateName(s string) string {
	if _, after, ok := strings.Cut(s, ": "); ok {
		return after
	}
	return s
}

// NICs lists InfiniBand/RoCE ports and Ethernet devices.
func (s Sysfs) NICs() []NIC {
	var out []NIC
	roceNetdevs := map[string]bool{}
	ibs, _ := os.ReadDir(s.path("sys/class/infiniband"))
	for _, dev := range ibs {
		base := s.path("sys/class/infiniband", dev.Name())
		bus := s.deviceBus(base)
		netdevs, _ := os.ReadDir(filepath.Join(base, "device", "net"))
		ports, _ := os.ReadDir(filepath.Join(base, "ports"))
		for _, p := range ports {
			pp := filepath.Join("sys/class/infiniband", dev.Name(), "ports", p.Name())
			n := NIC{Name: dev.Name() + ":" + p.Name(), State: stateName(s.read(pp, "state")),
				PhysState: stateName(s.read(pp, "phys_state")), LinkLayer: s.read(pp, "link_layer"), BusID: bus, NUMA: -1}
			if m := rateRE.FindStringSubmatch(s.read(pp, "rate")); m != nil {
				n.RateGbps, _ = strconv.ParseFloat(m[1], 64)
			}
			n.Kind = "infiniband"
			if strings.EqualFold(n.LinkLayer, "Ethernet") {
				n.Kind = "roce"
				if len(netdevs) > 0 {
					n.Netdev = netdevs[0].Name()
					roceNetdevs[n.Netdev] = true
				}
			}
			if bus != "" {
				n.NUMA = s.numa(bus)
			}
			out = append(out, n)
		}
	}
	nets, _ := os.ReadDir(s.path("sys/class/net"))
	for _, d := range nets {
		name := d.Name()
		if name == "lo" || roceNetdevs[name] {
			continue
		}
		base := s.path("sys/class/net", name)
		if s.read("sys/class/net", name, "type") == "32" { // IPoIB: its port is listed above
			continue
		}
		n := NIC{Name: name, Kind: "ethernet", State: s.read("sys/class/net", name, "operstate"), NUMA: -1}
		if mbps, err := strconv.ParseFloat(s.read("sys/class/net", name, "speed"), 64); err == nil && mbps > 0 {
			n.RateGbps = mbps / 1000
		}
		n.BusID = s.deviceBus(base)
		if n.BusID != "" {
			n.NUMA = s.numa(n.BusID)
		}
		out = append(out, n)
	}
	sort.SliceStable(out, func(a, b int) bool { return kindOrder(out[a].Kind) < kindOrder(out[b].Kind) })
	return out
}

func kindOrder(k string) int {
	switch k {
	case "infiniband":
		return 0
	case "roce":
		return 1
	}
	return 2
}

// Locality labels how two PCI functions reach each other, as nvidia-smi
// topo -m does: PIX (one PCIe bridge), PXB (several bridges), PHB (the host
// bridge), NODE (the same NUMA node), SYS (across NUMA nodes).
func (s Sysfs) Locality(a, b string) string {
	pa, pb := s.pciPath(a), s.pciPath(b)
	if pa == nil || pb == nil {
		return "SYS"
	}
	common := 0
	for common < len(pa)-1 && common < len(pb)-1 && pa[common] == pb[common] {
		common++
	}
	// pa[0] is the root complex (pci0000:00); pa[1] the root port; deeper
	// levels are switch ports.
	switch {
	case common >= 3:
		if len(pa)-common <= 2 && len(pb)-common <= 2 {
			return "PIX"
		}
		return "PXB"
	case common == 2:
		return "PXB"
	case common == 1:
		return "PHB"
	}
	na, nb := s.numa(a), s.numa(b)
	if na >= 0 && na == nb {
		return "NODE"
	}
	return "SYS"
}

// NUMANodes counts the system's NUMA nodes, 0 when unknown.
func (s Sysfs) NUMANodes() int {
	nodes, _ := filepath.Glob(s.path("sys/devices/system/node/node[0-9]*"))
	return len(nodes)
}

package topology

import (
	"bufio"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// NCCLView is what NCCL itself detected and chose, from its INFO log
// (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH) and its topology dump
// (NCCL_TOPO_DUMP_FILE).
type NCCLView struct {
	Version    string `json:"version,omitempty"`
	Ranks      int    `json:"ranks,omitempty"`
	Nodes      int    `json:"nodes,omitempty"`
	LocalRanks int    `json:"local_ranks,omitempty"`
	// Transports lists each peer connection NCCL made, deduplicated.
	Transports []Connection `json:"transports,omitempty"`
	// Rings are the ring orders of the channels, deduplicated.
	Rings []string `json:"rings,omitempty"`
	// Graphs are the search results: pattern, channels, bandwidth, path type.
	Graphs []Graph `json:"graphs,omitempty"`
	// Network is the network NCCL uses (IB, Socket, a plugin's name).
	Network string `json:"network,omitempty"`
	// Plugin is the network plugin NCCL loaded, or "internal".
	Plugin  string   `json:"net_plugin,omitempty"`
	NetDevs []string `json:"net_devices,omitempty"`
	// NVLS tells whether NVLink SHARP was in use ("off" when unsupported or disabled).
	NVLS string `json:"nvls,omitempty"`
	// XML facts from the topology dump.
	XMLGPUs []XMLGPU `json:"xml_gpus,omitempty"`
	XMLNets []XMLNet `json:"xml_nets,omitempty"`
}

// Connection is one peer link NCCL set up.
type Connection struct {
	From      int    `json:"from"`
	To        int    `json:"to"`
	Transport string `json:"transport"` // P2P/CUMEM, SHM/direct/direct, NET/IB/0/GDRDMA, NET/Socket/0
}

// Class reduces a transport to P2P, SHM, NET/IB, NET/Socket or NET.
func (c Connection) Class() string { return transportClass(c.Transport) }

func transportClass(t string) string {
	switch {
	case strings.HasPrefix(t, "P2P"):
		return "P2P"
	case strings.HasPrefix(t, "SHM"):
		return "SHM"
	case strings.HasPrefix(t, "NET/IB"):
		return "NET/IB"
	case strings.HasPrefix(t, "NET/Socket"):
		return "NET/Socket"
	case strings.HasPrefix(t, "NET"):
		return "NET"
	case strings.HasPrefix(t, "CollNet"), strings.HasPrefix(t, "COLLNET"):
		return "CollNet"
	}
	return t
}

// Graph is one line of NCCL's topology search result.
type Graph struct {
	Pattern   int    `json:"pattern"`
	Channels  int    `json:"channels"`
	Bandwidth string `json:"bandwidth"` // intra/inter GB/s
	Type      string `json:"type"`      // e.g. NVL/PIX
}

// XMLGPU is a GPU of NCCL's topology dump.
type XMLGPU struct {
	Dev     int            `json:"dev"`
	Rank    int            `json:"rank"`
	SM      int            `json:"sm"`
	GDR     bool           `json:"gdr"`
	NVLinks map[string]int `json:"nvlinks,omitempty"` // target bus id -> link count
}

// XMLNet is a network device of NCCL's topology dump.
type XMLNet struct {
	Name      string `json:"name"`
	SpeedMbps int    `json:"speed_mbps"`
	Port      int    `json:"port"`
	GDR       bool   `json:"gdr"`
}

var (
	commRE    = regexp.MustCompile(`comm 0x[0-9a-f]+ rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+)`)
	chanRE    = regexp.MustCompile(`Channel \d+(?:/\d+)? : (\d+)\[[0-9a-fx]+\] -> (\d+)\[[0-9a-fx]+\](?: \[(?:send|receive)\])? via (\S+)`)
	ringOldRE = regexp.MustCompile(`Channel (\d+)/\d+ :((?:\s+\d+)+)\s*$`)
	ringNewRE = regexp.MustCompile(`Ring (\d+) : (\d+(?: -> \d+)+)`)
	patternRE = regexp.MustCompile(`Pattern (\d+), crossNic \d+, nChannels (\d+), bw ([0-9.]+/[0-9.]+), type (\S+?),`)
	pluginRE  = regexp.MustCompile(`NET/Plugin: (?:Loaded|Using) (?:net plugin |collnet plugin )?(\S+?)(?: \(|$)`)
	versionRE = regexp.MustCompile(`NCCL version (\d+\.\d+\.\d+)`)
	netRE     = regexp.MustCompile(`Using network (\S+)`)
	netDevRE  = regexp.MustCompile(`NET/(?:IB|Socket) : Using (.+?)(?:; OOB|;|$)`)
	devTokRE  = regexp.MustCompile(`^\[\d+\]\S+`)
)

// ErrNotNCCLLog is ParseLog's answer to text without one line NCCL wrote.
var ErrNotNCCLLog = errors.New("it holds no line NCCL wrote (\"NCCL INFO\"): capture one with NCCL_DEBUG=INFO (and NCCL_DEBUG_FILE=FILE)")

// ParseLog reads NCCL's INFO log lines (formats from 2.18 to 2.28).
func ParseLog(r io.Reader) (*NCCLView, error) {
	v := &NCCLView{}
	seenConn := map[Connection]bool{}
	seenRing := map[string]bool{}
	// NCCL 2.19+ logs each rank's place in each ring as "prev -> me -> next".
	next := map[int]map[int]int{}
	seenGraph := map[Graph]bool{}
	nvlsOff := false
	nvlsSeen := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	ncclLines := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "NCCL INFO") || strings.Contains(line, "NCCL WARN") {
			ncclLines++
		}
		if m := versionRE.FindStringSubmatch(line); m != nil && v.Version == "" {
			v.Version = m[1]
		}
		if m := commRE.FindStringSubmatch(line); m != nil {
			v.Ranks, _ = strconv.Atoi(m[2])
			v.Nodes, _ = strconv.Atoi(m[3])
			v.LocalRanks, _ = strconv.Atoi(m[4])
		}
		if m := chanRE.FindStringSubmatch(line); m != nil {
			from, _ := strconv.Atoi(m[1])
			to, _ := strconv.Atoi(m[2])
			c := Connection{From: from, To: to, Transport: m[3]}
			if !seenConn[c] {
				seenConn[c] = true
				v.Transports = append(v.Transports, c)
			}
			continue
		}
		if m := ringNewRE.FindStringSubmatch(line); m != nil {
			nodes := strings.Split(m[2], " -> ")
			if len(nodes) == 3 {
				ch, _ := strconv.Atoi(m[1])
				me, _ := strconv.Atoi(nodes[1])
				nx, _ := strconv.Atoi(nodes[2])
				if next[ch] == nil {
					next[ch] = map[int]int{}
				}
				next[ch][me] = nx
			} else if ring := strings.Join(nodes, " "); !seenRing[ring] {
				seenRing[ring] = true
				v.Rings = append(v.Rings, ring)
			}
		} else if m := ringOldRE.FindStringSubmatch(line); m != nil && !strings.Contains(line, "via") {
			ring := strings.Join(strings.Fields(m[2]), " ")
			if !seenRing[ring] {
				seenRing[ring] = true
				v.Rings = append(v.Rings, ring)
			}
		}
		if m := patternRE.FindStringSubmatch(line); m != nil {
			p, _ := strconv.Atoi(m[1])
			ch, _ := strconv.Atoi(m[2])
			g := Graph{Pattern: p, Channels: ch, Bandwidth: m[3], Type: m[4]}
			if !seenGraph[g] {
				seenGraph[g] = true
				v.Graphs = append(v.Graphs, g)
			}
		}
		if m := netRE.FindStringSubmatch(line); m != nil {
			v.Network = m[1]
		}
		if strings.Contains(line, "NET/Plugin") {
			switch {
			case strings.Contains(line, "internal"):
				v.Plugin = "internal"
			case pluginRE.MatchString(line):
				v.Plugin = pluginRE.FindStringSubmatch(line)[1]
			}
		}
		if m := netDevRE.FindStringSubmatch(line); m != nil && len(v.NetDevs) == 0 {
			for _, tok := range strings.Fields(m[1]) {
				if devTokRE.MatchString(tok) {
					v.NetDevs = append(v.NetDevs, tok)
				}
			}
		}
		if strings.Contains(line, "NVLS") {
			nvlsSeen = true
			low := strings.ToLower(line)
			if strings.Contains(low, "not available") || strings.Contains(low, "disabled") || strings.Contains(low, "nvls support 0") ||
				strings.Contains(low, "nvlssupport 0") {
				nvlsOff = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return v, err
	}
	if ncclLines == 0 {
		return v, ErrNotNCCLLog
	}
	var chans []int
	for ch := range next {
		chans = append(chans, ch)
	}
	sort.Ints(chans)
	for _, ch := range chans {
		if ring := walkRing(next[ch]); ring != "" && !seenRing[ring] {
			seenRing[ring] = true
			v.Rings = append(v.Rings, ring)
		}
	}
	switch {
	case nvlsOff:
		v.NVLS = "off"
	case nvlsSeen:
		v.NVLS = "mentioned"
	}
	sort.Slice(v.Transports, func(a, b int) bool {
		if v.Transports[a].From != v.Transports[b].From {
			return v.Transports[a].From < v.Transports[b].From
		}
		return v.Transports[a].To < v.Transports[b].To
	})
	return v, nil
}

type xmlNode struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Nodes   []xmlNode  `xml:",any"`
}

func (n xmlNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (n xmlNode) intAttr(name string) int {
	v, _ := strconv.Atoi(n.attr(name))
	return v
}

// ParseTopoXML adds the GPUs and network devices of NCCL's topology dump.
func (v *NCCLView) ParseTopoXML(r io.Reader) error {
	var root xmlNode
	if err := xml.NewDecoder(r).Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("reading NCCL's topology dump: no XML in it (expected the <system> file NCCL_TOPO_DUMP_FILE writes)")
		}
		var se *xml.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("reading NCCL's topology dump: not valid XML at line %d: %s", se.Line, se.Msg)
		}
		return fmt.Errorf("reading NCCL's topology dump: %w", err)
	}
	if root.XMLName.Local != "system" {
		return fmt.Errorf("reading NCCL's topology dump: root element is <%s>, not <system>", root.XMLName.Local)
	}
	var walk func(n xmlNode, pciBus string)
	walk = func(n xmlNode, pciBus string) {
		switch n.XMLName.Local {
		case "pci":
			pciBus = n.attr("busid")
		case "gpu":
			g := XMLGPU{Dev: n.intAttr("dev"), Rank: n.intAttr("rank"), SM: n.intAttr("sm"), GDR: n.attr("gdr") == "1"}
			for _, c := range n.Nodes {
				if c.XMLName.Local == "nvlink" {
					if g.NVLinks == nil {
						g.NVLinks = map[string]int{}
					}
					g.NVLinks[c.attr("target")] += c.intAttr("count")
				}
			}
			v.XMLGPUs = append(v.XMLGPUs, g)
		case "net":
			v.XMLNets = append(v.XMLNets, XMLNet{Name: n.attr("name"), SpeedMbps: n.intAttr("speed"), Port: n.intAttr("port"), GDR: n.attr("gdr") == "1"})
		}
		for _, c := range n.Nodes {
			walk(c, pciBus)
		}
	}
	walk(root, "")
	return nil
}

// walkRing follows next pointers from the lowest rank; it returns "" when
// the log holds only part of the ring (other processes logged the rest).
func walkRing(next map[int]int) string {
	start := -1
	for r := range next {
		if start < 0 || r < start {
			start = r
		}
	}
	var out []string
	for r, n := start, 0; n <= len(next); n++ {
		out = append(out, strconv.Itoa(r))
		nx, ok := next[r]
		if !ok {
			return ""
		}
		if nx == start {
			return strings.Join(out, " ")
		}
		r = nx
	}
	return ""
}

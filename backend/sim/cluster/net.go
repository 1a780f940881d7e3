package cluster

import "math"

// Pattern is how a collective moves data, for its cost.
type Pattern int

const (
	// Shift: every member sends the message to the next (sendrecv).
	Shift Pattern = iota
	// Chain: the root's message is pipelined down a chain (broadcast).
	Chain
	// Ring: an allreduce, 2(n-1)/n of the message over every hop of a
	// ring; a hop between hosts is spread over the rails both hosts have
	// in the group. Its latency is NCCL's ring's (2(n-1) steps) or tree's
	// (2 log2 n steps, at TreeShare of the ring's bandwidth), whichever
	// is faster.
	Ring
)

// TreeShare is the share of the ring's bandwidth the model gives NCCL's
// tree allreduce (an assumption: docs/simulate.md).
const TreeShare = 0.9

// Net is a model's links with its faults applied: what each carries per
// direction, in GB/s.
type Net struct {
	m        *Model
	g, nh    int
	cap      []float64 // healthy share applied
	flapCap  []float64 // with every flapping NIC slow
	flapping map[int]int
	// base indexes of each kind of link.
	hbm, nvOut, nvIn, nicOut, nicIn, up, down int
	fill                                      []float64 // per rank, 1e9 elements/s
	wrong                                     map[int]bool
}

// NewNet builds m's links.
func NewNet(m *Model) *Net {
	g, nh := m.GPUsPerHost, m.Hosts
	n := &Net{m: m, g: g, nh: nh, flapping: map[int]int{}, wrong: map[int]bool{}}
	r := nh * g
	nl, ns := m.Leaves(), m.Fabric.Spines
	n.hbm, n.nvOut, n.nvIn, n.nicOut, n.nicIn = 0, r, 2*r, 3*r, 4*r
	n.up, n.down = 5*r, 5*r+nl*ns
	total := 5*r + 2*nl*ns
	n.cap = make([]float64, total)
	n.fill = make([]float64, r)
	for i := 0; i < r; i++ {
		n.cap[n.hbm+i] = m.GPU.CopyGBps
		n.cap[n.nvOut+i], n.cap[n.nvIn+i] = m.NVLink.GBps, m.NVLink.GBps
		n.cap[n.nicOut+i], n.cap[n.nicIn+i] = m.NIC.GBps, m.NIC.GBps
		n.fill[i] = m.GPU.FillGelems
	}
	for l := 0; l < nl; l++ {
		for s := 0; s < ns; s++ {
			// Each spine carries the rails r mod spines == s of the leaf's hosts.
			rails := 0
			for x := 0; x < g; x++ {
				if m.SpineOf(x) == s {
					rails++
				}
			}
			c := float64(m.Fabric.HostsPerLeaf*max(rails, 1)) * m.NIC.GBps / m.Fabric.Oversubscription
			n.cap[n.up+l*ns+s], n.cap[n.down+l*ns+s] = c, c
		}
	}
	n.flapCap = append([]float64(nil), n.cap...)
	for _, f := range m.Faults {
		switch f.Kind {
		case SlowNIC:
			x := *f.Host*g + *f.GPU
			n.scale(f.Factor, n.nicOut+x, n.nicIn+x)
		case FlappingNIC:
			x := *f.Host*g + *f.GPU
			n.flapping[n.nicOut+x], n.flapping[n.nicIn+x] = f.Every, f.Every
			n.flapCap[n.nicOut+x] *= f.Factor
			n.flapCap[n.nicIn+x] *= f.Factor
		case SlowUplink:
			n.scale(f.Factor, n.up+*f.Leaf*ns+*f.Spine, n.down+*f.Leaf*ns+*f.Spine)
		case SlowGPU:
			x := *f.Host*g + *f.GPU
			n.scale(f.Factor, n.hbm+x)
			n.fill[x] *= f.Factor
		case SlowNVLink:
			for x := *f.Host * g; x < (*f.Host+1)*g; x++ {
				n.scale(f.Factor, n.nvOut+x, n.nvIn+x)
			}
		case WrongData:
			n.wrong[*f.Host*g+*f.GPU] = true
		case BusyFabric:
			// A window of the run, not a part: the backend applies it to
			// each operation between hosts by its start (Model.Busy).
		}
	}
	return n
}

func (n *Net) scale(f float64, links ...int) {
	for _, l := range links {
		n.cap[l] *= f
		n.flapCap[l] *= f
	}
}

// Model is the net's model.
func (n *Net) Model() *Model { return n.m }

// Wrong says whether rank r returns wrong data.
func (n *Net) Wrong(r int) bool { return n.wrong[r] }

// FillRate is rank r's fill kernel rate, 1e9 elements per second.
func (n *Net) FillRate(r int) float64 { return n.fill[r] }

// path appends the links a flow from rank a to rank b crosses and
// returns them with the flow's latency in µs.
func (n *Net) path(links []int, a, b int) ([]int, float64) {
	m := n.m
	ha, hb := a/n.g, b/n.g
	if ha == hb {
		return append(links, n.nvOut+a, n.nvIn+b), m.NVLink.LatencyUS
	}
	links = append(links, n.nicOut+a)
	la, lb := m.LeafOf(ha), m.LeafOf(hb)
	lat := 2*m.NIC.LatencyUS + m.Fabric.LatencyUS
	if la != lb {
		s := m.SpineOf(a % n.g)
		ns := m.Fabric.Spines
		links = append(links, n.up+la*ns+s, n.down+lb*ns+s)
		lat += 2 * m.Fabric.LatencyUS
	}
	return append(links, n.nicIn+b), lat
}

// flow is bytes over a path from rank a to rank b, for one group.
type flow struct {
	links []int
	bytes float64
	a, b  int
}

// flows lists a group's flows for one operation of bytes, its steps and
// the latency of its slowest hop.
func (n *Net) flows(p Pattern, group []int, bytes float64) (fs []flow, steps int, lat float64) {
	k := len(group)
	if k == 1 {
		// A communicator of one copies within its GPU's memory.
		return []flow{{links: []int{n.hbm + group[0]}, bytes: bytes, a: group[0], b: group[0]}}, 1, 0
	}
	add := func(a, b int, by float64) {
		links, l := n.path(nil, a, b)
		fs = append(fs, flow{links, by, a, b})
		lat = math.Max(lat, l)
	}
	switch p {
	case Shift:
		for i, a := range group {
			add(a, group[(i+1)%k], bytes)
		}
		return fs, 1, lat
	case Chain:
		for i := 0; i+1 < k; i++ {
			add(group[i], group[i+1], bytes)
		}
		return fs, k - 1, lat
	}
	// Ring: hops within a host on NVLink; a hop between hosts spread over
	// the rails the two hosts share in the group.
	per := 2 * float64(k-1) / float64(k) * bytes
	rails := map[int]map[int]int{} // host -> rail -> rank
	for _, r := range group {
		h := r / n.g
		if rails[h] == nil {
			rails[h] = map[int]int{}
		}
		rails[h][r%n.g] = r
	}
	for i, a := range group {
		b := group[(i+1)%k]
		ha, hb := a/n.g, b/n.g
		if ha == hb {
			add(a, b, per)
			continue
		}
		var shared []int
		for x := 0; x < n.g; x++ {
			_, okA := rails[ha][x]
			_, okB := rails[hb][x]
			if okA && okB {
				shared = append(shared, x)
			}
		}
		if len(shared) == 0 {
			add(a, b, per)
			continue
		}
		for _, x := range shared {
			add(rails[ha][x], rails[hb][x], per/float64(len(shared)))
		}
	}
	return fs, 2 * (k - 1), lat
}

// Times is what one operation takes on each group of a round in which
// every group runs it at once: healthy, and with the flapping NICs slow.
type Times struct {
	US, FlapUS []float64
	// Flaps is, per group, the every of the flapping NIC it crosses (0: none).
	Flaps []int
}

// OpTimes models one operation of bytes run by every group at once: the
// flows of all groups share each link's rate, and a group's operation
// takes its slowest link's bytes over the link's rate, plus a latency per
// step (the cost model of NCCL's ring and chain algorithms).
func (n *Net) OpTimes(p Pattern, groups [][]int, bytes int64) Times {
	load := make(map[int]float64)
	type gf struct {
		fs    []flow
		steps int
		lat   float64
	}
	all := make([]gf, len(groups))
	for i, g := range groups {
		fs, steps, lat := n.flows(p, g, float64(bytes))
		all[i] = gf{fs, steps, lat}
		for _, f := range fs {
			for _, l := range f.links {
				load[l] += f.bytes
			}
		}
	}
	t := Times{US: make([]float64, len(groups)), FlapUS: make([]float64, len(groups)), Flaps: make([]int, len(groups))}
	for i, g := range all {
		worst, worstFlap := 0.0, 0.0
		for _, f := range g.fs {
			for _, l := range f.links {
				worst = math.Max(worst, load[l]/n.cap[l])
				worstFlap = math.Max(worstFlap, load[l]/n.flapCap[l])
				if e := n.flapping[l]; e > 0 {
					t.Flaps[i] = e
				}
			}
		}
		// bytes / (GB/s) is ns; µs below.
		base := float64(g.steps) * g.lat
		t.US[i] = base + worst/1e3
		t.FlapUS[i] = base + worstFlap/1e3
		if k := len(groups[i]); p == Ring && k > 2 {
			tree := 2 * math.Ceil(math.Log2(float64(k))) * g.lat
			if u := tree + worst/1e3/TreeShare; u < t.US[i] {
				t.US[i], t.FlapUS[i] = u, tree+worstFlap/1e3/TreeShare
			}
		}
	}
	return t
}

// Wire is one flow between hosts in an operation, as NCCL's proxy would
// report it: rank From handed Bytes to the network for rank To, which was
// busy with them for US µs (the flow's slowest link, shared with every
// flow of the round; no stalls, which a step's sum over a large message
// smooths away).
type Wire struct {
	From, To int
	Bytes    float64
	US       float64
}

// Wires lists, per group, the flows between hosts of one operation of
// bytes run by every group at once (the paths and loads of OpTimes).
func (n *Net) Wires(p Pattern, groups [][]int, bytes int64) [][]Wire {
	load := make(map[int]float64)
	all := make([][]flow, len(groups))
	for i, g := range groups {
		all[i], _, _ = n.flows(p, g, float64(bytes))
		for _, f := range all[i] {
			for _, l := range f.links {
				load[l] += f.bytes
			}
		}
	}
	out := make([][]Wire, len(groups))
	for i, fs := range all {
		for _, f := range fs {
			if f.a/n.g == f.b/n.g {
				continue
			}
			busy := 0.0
			for _, l := range f.links {
				busy = math.Max(busy, load[l]/n.cap[l])
			}
			us := busy / 1e3
			if sd := n.m.Noise.Spread; sd > 0 {
				key := uint64(f.a)<<32 | uint64(f.b)                                                                                                       //nolint:gosec // G115: ranks, never negative
				z := math.Sqrt(-2*math.Log(unit(n.m.Noise.Seed, key, uint64(bytes), 5))) * math.Cos(2*math.Pi*unit(n.m.Noise.Seed, key, uint64(bytes), 6)) //nolint:gosec // G115: a size, never negative
				us *= math.Exp(sd*z - sd*sd/2)
			}
			out[i] = append(out[i], Wire{From: f.a, To: f.b, Bytes: f.bytes, US: us})
		}
	}
	return out
}

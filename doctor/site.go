package doctor

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
	"collbench/results"
	"collbench/watchdog"
)

// Options configure a doctor run.
type Options struct {
	// Knobs are the mode, sizes and iterations, every one set
	// (DefaultKnobs).
	facts.Knobs
	Thresholds rules.Thresholds
	// Expectations replace, by GPU model, the healthy shares GPUs alone
	// are held to.
	Expectations rules.Expectations
	// Backend names the backend, for the report.
	Backend string
	// Hosts is each world rank's host; Devices each world rank's device.
	Hosts   []string
	Devices []results.Device
	// Facts are every host's health facts (rank 0; empty without NVML).
	Facts []facts.HostFacts
	// Machines is the boot id of the machine each host runs on, by host
	// (rank 0; host-memory backends): simulated hosts on one machine
	// (launch --nodes) share it, and its cores.
	Machines map[string]string
	// Who names a world rank with its host and device, e.g.
	// "rank 3 (node-2, GPU 0000:9a:00.0)".
	Who func(rank int) string
	// Transport says which transport NCCL used between two world ranks, if
	// known; called on rank 0 once the stages ran.
	Transport func(a, b int) string
	// BeforeVerdict, if set, is called by every process once the stages
	// ran and before rank 0 judges (to gather what Transport needs).
	BeforeVerdict func() error
	// Board receives every local rank's progress, for the watchdog.
	Board *watchdog.Board
	// Progress is told when each stage starts (rank 0 only); may be nil.
	Progress func(string)
	// Stage, if set, is told on every process when each stage starts, and
	// "" when the stages are over (for a Sampler).
	Stage func(string)
	// Samples, if set, returns on rank 0 what NVML reported of every GPU
	// while the stages ran; called once BeforeVerdict has run.
	Samples func() []facts.StageSample
	// Growth, if set, returns on rank 0 every error counter that grew on
	// any host while each stage ran, and the XID events; called once
	// BeforeVerdict has run.
	Growth func() []facts.CounterGrowth
	// Watched, if set, says on rank 0 which error counters each host's
	// processes could read.
	Watched func() []string
	// Counters are the rules for the counters' growth by hardware class.
	Counters rules.CounterThresholds
	// Clock, if set, is the time in seconds that stages are timed by (a
	// cluster model's time); wall time otherwise.
	Clock func() float64
	// Fabric, if set, is the switch network between the hosts.
	Fabric *Fabric
}

// Fabric is the switch network between hosts, where a cluster file gives
// it: the leaf switch of every host, and the spine that carries each rail
// (local GPU index) between leaves. With it, the stage across hosts also
// pairs hosts of different leaves, and names a slow uplink between a leaf
// and a spine rather than the hosts behind it.
type Fabric struct {
	Leaf  map[string]string `json:"leaf"`  // host -> leaf switch
	Spine []string          `json:"spine"` // rail -> spine switch
}

// site is where the world's ranks run, read by every stage and by the
// verdict: each rank's host, the hosts in order with their ranks, each
// rank's GPU index on its host and every host's facts, with the run's
// options. Nothing in it changes once the run starts.
type site struct {
	o        Options
	n        int
	hostList []string
	members  map[string][]int
	devIndex map[int]int // world rank -> GPU index on its host (from the facts)
	facts    map[string]*facts.HostFacts
	peak     float64 // nicPeak, read once from the facts: it is asked per path
}

// newSite places n ranks on their hosts and GPUs from the options.
func newSite(o Options, n int) *site {
	s := &site{o: o, n: n, members: map[string][]int{}, devIndex: map[int]int{}, facts: map[string]*facts.HostFacts{}}
	if s.o.Who == nil {
		s.o.Who = func(r int) string { return fmt.Sprintf("rank %d (%s)", r, s.host(r)) }
	}
	for r := 0; r < n; r++ {
		h := s.host(r)
		if _, ok := s.members[h]; !ok {
			s.hostList = append(s.hostList, h)
		}
		s.members[h] = append(s.members[h], r)
	}
	for i := range o.Facts {
		f := &o.Facts[i]
		s.facts[f.Host] = f
	}
	s.peak = slowestNICPort(o.Facts)
	for r := 0; r < n && r < len(o.Devices); r++ {
		if f := s.facts[s.host(r)]; f != nil {
			for _, g := range f.GPUs {
				if g.BusID != "" && strings.EqualFold(g.BusID, o.Devices[r].BusID) {
					s.devIndex[r] = g.Index
				}
			}
		}
	}
	return s
}

// host is world rank r's host.
func (s *site) host(r int) string {
	if r >= 0 && r < len(s.o.Hosts) {
		return s.o.Hosts[r]
	}
	return "localhost"
}

// deviceName is a world rank's device model (without the host that the
// cpu backend's device names carry), so like devices are peers.
func (d *site) deviceName(r int) string {
	if r < len(d.o.Devices) && d.o.Devices[r].Name != "" {
		return strings.TrimSuffix(d.o.Devices[r].Name, " on "+d.host(r))
	}
	return "device"
}

// localIndex is rank r's GPU index on its host (its rail), -1 unknown.
func (d *site) localIndex(r int) int {
	if i, ok := d.devIndex[r]; ok {
		return i
	}
	return slices.Index(d.members[d.host(r)], r)
}

// health is the NVML health of the GPU rank r drives, where the host's
// facts have it.
func (d *site) health(r int) (facts.GPUHealth, bool) {
	f := d.facts[d.host(r)]
	if f == nil {
		return facts.GPUHealth{}, false
	}
	idx, ok := d.devIndex[r]
	if !ok {
		return facts.GPUHealth{}, false
	}
	for _, g := range f.GPUs {
		if g.Index == idx {
			return g, true
		}
	}
	return facts.GPUHealth{}, false
}

// nicPeak is the slowest active InfiniBand/RoCE port's rate in GB/s over
// every host's facts, 0 when unknown.
func (d *site) nicPeak() float64 { return d.peak }

// slowestNICPort is nicPeak read from the facts: a pass over every port of
// every host, once per run (per path judged, it made the judging of 8,192
// ranks' paths quadratic).
func slowestNICPort(hosts []facts.HostFacts) float64 {
	peak := 0.0
	for _, f := range hosts {
		for _, n := range f.NICs {
			if n.Kind != "ethernet" && n.RateGbps > 0 && strings.EqualFold(n.State, "ACTIVE") {
				if r := n.RateGbps / 8; peak == 0 || r < peak {
					peak = r
				}
			}
		}
	}
	return peak
}

// pairKey orders a pair.
func pairKey(a, b int) [2]int {
	if a > b {
		a, b = b, a
	}
	return [2]int{a, b}
}

// parsePair reads a pair back from its key ("a-b").
func parsePair(key string) [2]int {
	var a, b int
	_, _ = fmt.Sscanf(key, "%d-%d", &a, &b) // pairKey makes every key: two ranks
	return [2]int{a, b}
}

// outcome is what stages decided, agreed by every process: the ranks slow
// alone, the pairs slow within a host (by "a-b", a < b), and the findings
// a stage names itself (rank 0's). Each stage returns its own; a stage
// reads those of the stages before it.
type outcome struct {
	slowRanks map[int]rules.Suspect
	slowPairs map[string]rules.Suspect
	found     []record.Finding
}

// add merges a stage's outcome into o.
func (o *outcome) add(x outcome) {
	if o.slowRanks == nil {
		o.slowRanks = map[int]rules.Suspect{}
	}
	if o.slowPairs == nil {
		o.slowPairs = map[string]rules.Suspect{}
	}
	maps.Copy(o.slowRanks, x.slowRanks)
	maps.Copy(o.slowPairs, x.slowPairs)
	o.found = append(o.found, x.found...)
}

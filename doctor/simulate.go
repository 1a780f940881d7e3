package doctor

import (
	"context"
	"fmt"

	"collbench/backend/sim"
	"collbench/backend/sim/cluster"
	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
	"collbench/topology"
	"collbench/watchdog"
)

// Simulation is a doctor run on a cluster model instead of a cluster.
type Simulation struct {
	Model *cluster.Model
	// Knobs as for Doctor; a size or count left 0 takes a GPU run's
	// default.
	facts.Knobs
	Thresholds   *rules.Thresholds
	Expectations rules.Expectations
	Progress     func(string)
}

// LoadCluster reads a cluster file for Simulate; "" gives nil (no
// simulation).
func LoadCluster(ctx context.Context, path string) (*cluster.Model, error) {
	if path == "" {
		return nil, nil
	}
	return cluster.Load(ctx, path)
}

// Simulate runs doctor on every modelled GPU of s.Model, in this process,
// and returns its report: the plan, the rounds and modelled time of every
// stage and the verdict on the planted faults (Healthy, as for a real
// run). An error is the backend's or the run's.
func Simulate(ctx context.Context, s Simulation) (*record.Report, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	m := s.Model
	b := sim.New(m)
	world, err := b.Open(ctx, m.Ranks())
	if err != nil {
		return nil, err
	}
	defer world.Close()
	sw := world.(*sim.World)
	o := Options{Knobs: s.Or(facts.DefaultKnobs(false)), Backend: "sim", Board: watchdog.NewBoard(), Progress: s.Progress,
		Expectations: s.Expectations, Clock: sw.Elapsed}
	o.Thresholds = ThresholdsOr(s.Thresholds, rules.DefaultRules)
	g := m.GPUsPerHost
	fab := &Fabric{Leaf: map[string]string{}}
	for r := 0; r < g; r++ {
		fab.Spine = append(fab.Spine, m.SpineName(m.SpineOf(r)))
	}
	for h := 0; h < m.Hosts; h++ {
		name := m.HostName(h)
		fab.Leaf[name] = m.LeafName(m.LeafOf(h))
		o.Facts = append(o.Facts, modelFacts(m, name))
		for x := 0; x < g; x++ {
			o.Hosts = append(o.Hosts, name)
		}
	}
	if m.Leaves() > 1 {
		o.Fabric = fab
	}
	for _, r := range world.Ranks() {
		o.Devices = append(o.Devices, r.Device())
	}
	o.Who = func(r int) string {
		if r < 0 || r >= m.Ranks() {
			return fmt.Sprintf("rank %d", r)
		}
		return fmt.Sprintf("rank %d (%s, GPU %d)", r, m.HostName(r/g), r%g)
	}
	rep, err := Run(ctx, world, o)
	if err != nil {
		return rep, err
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("a cluster model, not a measurement: %d hosts x %d GPUs, %d leaves, %d spines; times are modelled (docs/simulate.md)",
		m.Hosts, g, m.Leaves(), m.Fabric.Spines))
	return rep, nil
}

// modelFacts are the health facts NVML and sysfs would report on a
// healthy host of model m: doctor's expectations follow from them.
func modelFacts(m *cluster.Model, host string) facts.HostFacts {
	g := m.GPUsPerHost
	f := facts.HostFacts{Host: host, Driver: "model", NCCL: "model"}
	for x := 0; x < g; x++ {
		f.GPUs = append(f.GPUs, facts.GPUHealth{Index: x, Name: m.GPU.Model, BusID: m.BusID(x),
			MemBusWidth: m.GPU.MemBusBits, MemClockMaxMHz: m.GPU.MemClockMHz, Cores: m.GPU.Cores, SMClockMaxMHz: m.GPU.SMClockMHz,
			NVLinks: m.NVLink.Links, NVLinksActive: m.NVLink.Links})
		f.LinkGBps = append(f.LinkGBps, m.NVLink.LinkPeakGBps)
		row := make([]string, g)
		for y := range row {
			row[y] = fmt.Sprintf("NV%d", m.NVLink.Links)
		}
		row[x] = "X"
		f.Matrix = append(f.Matrix, row)
		loc := make([]string, g)
		for y := range loc {
			loc[y] = "SYS"
		}
		loc[x] = "PIX"
		f.NICs = append(f.NICs, topology.NIC{Name: fmt.Sprintf("mlx5_%d:1", x), Kind: "infiniband", State: "ACTIVE", RateGbps: m.NIC.GBps * 8, Locality: loc})
	}
	return f
}

// ThresholdsOr are th where given, with def as the default rules where th
// has none.
func ThresholdsOr(th *rules.Thresholds, def rules.Rules) rules.Thresholds {
	out := rules.Thresholds{Default: def}
	if th != nil {
		if th.Default != (rules.Rules{}) {
			out.Default = th.Default
		}
		out.Class = th.Class
	}
	return out
}

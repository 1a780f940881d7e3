package doctor

import (
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/render"
	"collbench/doctor/internal/rules"
	"collbench/internal/nvmlmock"
)

// machine is one mock host for the expectation tests: its GPUs, and the
// copy rate each GPU measured alone.
type machine struct {
	name   string
	lib    nvml.Interface
	copies []float64
}

// judgeMachines runs the GPU-alone judgement and the verdict over the
// hosts as doctor does after its first stage, one rank per GPU, and
// returns the findings and the report.
func judgeMachines(t *testing.T, ms ...machine) ([]record.Finding, *record.Report) {
	t.Helper()
	return judgeFills(t, ms[0], nil, ms[1:]...)
}

// judgeFills is judgeMachines with the fill rates of some ranks set
// (others fill at 172 Gelem/s, as a healthy H100 does).
func judgeFills(t *testing.T, first machine, fills map[int]float64, more ...machine) ([]record.Finding, *record.Report) {
	t.Helper()
	ms := append([]machine{first}, more...)
	var hosts []string
	var hostFacts []facts.HostFacts
	for _, m := range ms {
		hf := hostOf(m.name, m.lib)
		hf.Ours = []uint32{ourPID}
		hostFacts = append(hostFacts, hf)
		for range m.copies {
			hosts = append(hosts, m.name)
		}
	}
	d := newHandRun(len(hosts), Options{Backend: "nccl", Hosts: hosts, Facts: hostFacts, Thresholds: rules.Thresholds{Default: rules.DefaultRules}})
	d.o.Who = func(r int) string { return fmt.Sprintf("rank %d (%s)", r, d.host(r)) }
	figs := map[int]record.GPUFigure{}
	r := 0
	for i, m := range ms {
		d.facts[m.name] = &d.o.Facts[i]
		d.hostList = append(d.hostList, m.name)
		for g, c := range m.copies {
			d.members[m.name] = append(d.members[m.name], r)
			d.devIndex[r] = g
			fill := 172.0
			if v, ok := fills[r]; ok {
				fill = v
			}
			figs[r] = record.GPUFigure{Rank: r, Host: m.name, CopyGBps: c, FillGelem: fill}
			r++
		}
	}
	alone := &aloneRun{meter: d.meter}
	alone.recordGPUs(figs)
	for _, s := range alone.judgeAlone(figs) {
		var rank int
		if _, err := fmt.Sscanf(s.Key, "rank %d", &rank); err == nil {
			d.slowRanks[rank] = s
		}
	}
	d.assemble()
	return d.rep.Findings, d.rep
}

func h100(change func(i int, g *nvmlmock.GPU)) nvml.Interface {
	m := nvmlmock.HGX("H100")
	for i := range m.GPUs {
		if change != nil {
			change(i, &m.GPUs[i])
		}
	}
	return m.NVML()
}

// ourPID is the test world's own collbench process on every host.
const ourPID = 99

func eight(v float64) []float64 { return []float64{v, v, v, v, v, v, v, v} }

// TestGPUsAreJudgedAgainstWhatTheyShouldDo: a healthy board passes; one
// GPU slowed by another program is named with that program; eight GPUs
// slowed alike fail as their host; a one-GPU host slowed fails; a clock
// slowdown is named as the cause.
func TestGPUsAreJudgedAgainstWhatTheyShouldDo(t *testing.T) {
	// A healthy H100 copies about 1,495 GB/s alone (89% of half its
	// 3,352 GB/s memory), as measured on the lent H100.
	const healthy, loaded = 1495, 224 // loaded: -85%, as another program made it
	if fs, _ := judgeMachines(t, machine{"node-1", h100(nil), eight(healthy)}); len(fs) != 0 {
		t.Fatalf("a healthy board: %v", fs)
	}

	one := eight(healthy)
	one[3] = loaded
	lib := h100(func(i int, g *nvmlmock.GPU) {
		if i == 3 {
			g.Processes = []nvml.ProcessInfo{{Pid: ourPID}, {Pid: 4242, UsedGpuMemory: 12 << 30}}
		}
	})
	fs, _ := judgeMachines(t, machine{"node-1", lib, one})
	if len(fs) != 1 || fs[0].Kind != "slow-gpu" || fs[0].Ranks[0] != 3 || !strings.Contains(fs[0].Cause, "another workload runs on it: pid 4242") || strings.Contains(fs[0].Cause, "pid 99") ||
		!strings.Contains(fs[0].Msg, "85% below") {
		t.Errorf("one GPU slowed by another program: %v", fs)
	}

	// What the lent H100 showed with another program on it: the copy
	// kept its rate (its best iteration fell in this process's time
	// slice), the fill kernel fell by 86%.
	filled := map[int]float64{5: 24}
	fs, _ = judgeFills(t, machine{"node-1", h100(nil), eight(healthy)}, filled)
	if len(fs) != 1 || fs[0].Kind != "slow-gpu" || fs[0].Ranks[0] != 5 || !strings.Contains(fs[0].Msg, "fills at 24.0 Gelem/s") {
		t.Errorf("a GPU whose fill kernel is slowed by another program: %v", fs)
	}

	fs, _ = judgeMachines(t, machine{"node-1", h100(nil), eight(700)})
	if len(fs) != 1 || fs[0].Kind != "slow-host" || fs[0].Part != "host node-1" || !strings.Contains(fs[0].Msg, "a healthy one of their model") {
		t.Errorf("eight GPUs slowed alike must fail as their host: %v", fs)
	}

	single := nvmlmock.HGX("H100")
	single.GPUs = single.GPUs[:1]
	fs, _ = judgeMachines(t, machine{"solo", single.NVML(), []float64{loaded}})
	if len(fs) != 1 || fs[0].Kind != "slow-gpu" {
		t.Errorf("a one-GPU host slowed: %v", fs)
	}

	capped := h100(func(i int, g *nvmlmock.GPU) { g.ClockReasons = nvml.ClocksThrottleReasonHwSlowdown })
	fs, _ = judgeMachines(t, machine{"node-2", capped, eight(900)})
	var host *record.Finding
	for i := range fs {
		if fs[i].Kind == "slow-host" {
			host = &fs[i]
		}
	}
	if host == nil || !strings.Contains(host.Cause, "clocks held down") {
		t.Errorf("a host held down by its clocks: %v", fs)
	}
}

// TestExpectationOfUnknownAndSilentModels: a model without a measured
// fraction gets the formula's typical share; a GPU whose NVML reports no
// memory limits is judged against its peers only, and the report says so
// rather than that it met its expectation.
func TestExpectationOfUnknownAndSilentModels(t *testing.T) {
	g := facts.GPUHealth{Name: "NVIDIA X1000", MemBusWidth: 4096, MemClockMaxMHz: 2000}
	exp, why := rules.ExpectedCopyGBps(g, nil)
	if want := 4096.0 / 8 * 2000e6 * 2 / 1e9 / 2 * rules.DefaultCopyFraction; exp != want || !strings.Contains(why, "without a measured fraction") {
		t.Errorf("unknown model: %.1f (%s), want %.1f", exp, why, want)
	}
	silent := h100(func(i int, g *nvmlmock.GPU) { g.MemBusWidth = 0 })
	fs, rep := judgeMachines(t, machine{"node-1", silent, eight(1495)})
	if len(fs) != 0 || len(rep.NoExpectation) != 1 || !strings.Contains(rep.NoExpectation[0], "no memory bus width") {
		t.Fatalf("findings %v, no expectation %q", fs, rep.NoExpectation)
	}
	rep.Healthy = true
	var b strings.Builder
	if err := render.WriteText(rep, &b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "met its peers and its expectation") {
		t.Errorf("a report without an expectation claims one:\n%s", b.String())
	}
}

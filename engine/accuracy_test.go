package engine

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/backend/nccl/fakegpu"
	"collbench/doctor"
	"collbench/internal/nvmlmock"
	"collbench/internal/racebuild"
)

// How often doctor is right: it runs (full mode) over seeded modeled 8-GPU
// HGX H100 hosts, healthy ones and ones with one planted fault at a random
// place, and counts false verdicts on the healthy hosts and, per fault
// kind, the runs whose failures name exactly the part at fault. The
// machines are backend/nccl/fakegpu models: healthy rates and spreads as measured
// on the lent H100 and H200, faults as a slow GPU, a slow link or a slow
// host would show. COLLBENCH_ACCURACY sets the machines per kind (make
// doctor-accuracy: 1,000); without it, a few, as a check that the harness
// and doctor agree. The goals: at most 5 false verdicts in 1,000 healthy
// hosts, the right part named in at least 990 of 1,000 per kind.

// plantedFault plants one fault in a machine and says what doctor must
// name: the GPUs at fault (indices), or the host.
type plantedFault struct {
	name  string
	plant func(rng *rand.Rand, hw *nvmlmock.Machine, m *fakegpu.Model) (gpus []int, host bool)
}

var plantedFaults = []plantedFault{
	{"healthy", func(*rand.Rand, *nvmlmock.Machine, *fakegpu.Model) ([]int, bool) { return nil, false }},
	{"GPU slow to compute (fill 15-60%)", func(rng *rand.Rand, hw *nvmlmock.Machine, m *fakegpu.Model) ([]int, bool) {
		g := rng.Intn(len(hw.GPUs))
		m.FillFactor = map[int]float64{g: 0.15 + 0.45*rng.Float64()}
		return []int{g}, false
	}},
	{"GPU slow to copy (memory 30-70%)", func(rng *rand.Rand, hw *nvmlmock.Machine, m *fakegpu.Model) ([]int, bool) {
		g := rng.Intn(len(hw.GPUs))
		m.CopyFactor = map[int]float64{g: 0.3 + 0.4*rng.Float64()}
		return []int{g}, false
	}},
	{"slow link (10-40%)", func(rng *rand.Rand, hw *nvmlmock.Machine, m *fakegpu.Model) ([]int, bool) {
		a := rng.Intn(len(hw.GPUs))
		b := (a + 1 + rng.Intn(len(hw.GPUs)-1)) % len(hw.GPUs)
		m.LinkFactor = map[[2]int]float64{{min(a, b), max(a, b)}: 0.1 + 0.3*rng.Float64()}
		return []int{a, b}, false
	}},
	{"NVLinks down (6-12 of 18)", func(rng *rand.Rand, hw *nvmlmock.Machine, m *fakegpu.Model) ([]int, bool) {
		g := rng.Intn(len(hw.GPUs))
		hw.GPUs[g].ActiveLinks = 6 + rng.Intn(7)
		return []int{g}, false
	}},
	{"GPU time-sliced with another workload (30-60% of its time)", func(rng *rand.Rand, hw *nvmlmock.Machine, m *fakegpu.Model) ([]int, bool) {
		g := rng.Intn(len(hw.GPUs))
		m.Shared = map[int]float64{g: 0.3 + 0.3*rng.Float64()}
		m.SliceUS = 4
		hw.GPUs[g].Processes = []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 2 << 30}}
		hw.GPUs[g].UtilPct = 100
		return []int{g}, false
	}},
	{"host slow alike (copy 40-70%)", func(rng *rand.Rand, hw *nvmlmock.Machine, m *fakegpu.Model) ([]int, bool) {
		f := 0.4 + 0.3*rng.Float64()
		m.CopyFactor = map[int]float64{}
		for g := range hw.GPUs {
			m.CopyFactor[g] = f
		}
		return nil, true
	}},
}

// judgeRun says whether a report names exactly the planted part: every
// FAIL finding names it and nothing else, and there is at least one.
func judgeRun(rep *doctor.Report, all []string, buses []string, host bool) bool {
	fails := 0
	for _, f := range rep.Findings {
		if f.Severity != "FAIL" {
			continue
		}
		fails++
		if host {
			if f.Part != "host testhost" {
				return false
			}
			continue
		}
		for _, b := range all {
			named := strings.Contains(f.Part, b)
			wanted := false
			for _, w := range buses {
				wanted = wanted || w == b
			}
			if named && !wanted {
				return false
			}
		}
		if !strings.Contains(f.Part, buses[0]) {
			return false
		}
	}
	return fails > 0
}

func TestDoctorAccuracy(t *testing.T) {
	racebuild.SkipLongModelRun(t)
	n := 3
	if testing.Short() {
		n = 1 // make test: every kind once; make test-long: three each
	}
	if v := os.Getenv("COLLBENCH_ACCURACY"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("COLLBENCH_ACCURACY=%q: give the machines per kind, e.g. 1000", v)
		}
	}
	tallies := make([]tally, len(plantedFaults))
	start := time.Now()
	// Each kind on its own, side by side; the table once all are done.
	t.Run("kinds", func(t *testing.T) {
		for k, pf := range plantedFaults {
			t.Run(pf.name, func(t *testing.T) {
				t.Parallel()
				tallies[k] = runKind(k, pf, n)
			})
		}
	})
	var b strings.Builder
	mode := "full mode"
	if accuracyQuick() {
		mode = "quick mode"
	}
	fmt.Fprintf(&b, "doctor over seeded modeled HGX H100 hosts (8 GPUs, %s), %d per kind, %.0f s\n", mode, n, time.Since(start).Seconds())
	fmt.Fprintf(&b, "| kind | hosts | right | goal |\n| --- | --- | --- | --- |\n")
	for k, pf := range plantedFaults {
		tl := tallies[k]
		goal := "right part named in ≥ 99%"
		if pf.name == "healthy" {
			goal = "false verdicts ≤ 0.5%"
		}
		fmt.Fprintf(&b, "| %s | %d | %d (%d wrong) | %s |\n", pf.name, tl.runs, tl.right, tl.runs-tl.right, goal)
	}
	t.Log("\n" + b.String())
	if out := os.Getenv("COLLBENCH_ACCURACY_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil { //nolint:gosec // a report for people to read
			t.Error(err)
		}
	}
	for k, pf := range plantedFaults {
		tl := tallies[k]
		limit := tl.runs / 100 // at most 1% wrong per fault kind
		if pf.name == "healthy" {
			limit = tl.runs / 200 // at most 0.5% false verdicts
		}
		if tl.runs-tl.right > limit {
			t.Errorf("%s: %d of %d wrong (at most %d): %s", pf.name, tl.runs-tl.right, tl.runs, limit, strings.Join(tl.wrong, "; "))
		}
	}
}

// accuracyQuick says whether the harness runs doctor --quick
// (COLLBENCH_ACCURACY_QUICK=1, make doctor-accuracy QUICK=1).
func accuracyQuick() bool { return os.Getenv("COLLBENCH_ACCURACY_QUICK") == "1" }

// tally counts one kind's runs and keeps the first few wrong ones.
type tally struct {
	right, runs int
	wrong       []string
}

// runKind runs n machines with fault kind k planted and tallies them.
func runKind(k int, pf plantedFault, n int) tally {
	var tl tally
	for i := 0; i < n; i++ {
		seed := int64(k)*1_000_000 + int64(i)
		rng := rand.New(rand.NewSource(seed)) //nolint:gosec // G404: seeded machines, not security
		hw := nvmlmock.HGX("H100")
		model := fakegpu.HealthyModel(seed)
		gpus, host := pf.plant(rng, &hw, model)
		var all, buses []string
		for _, g := range hw.GPUs {
			all = append(all, "0000:"+g.Bus)
		}
		for _, g := range gpus {
			buses = append(buses, all[g])
		}
		sys := machineSystem(fakegpu.New(hw, fakegpu.Options{Model: model}))
		d := Doctor{Backend: "nccl", Knobs: doctor.Knobs{BWSize: 256 << 10, CopySize: 256 << 10, WorldSize: 256 << 10, LatSize: 4 << 10, Iters: 5, Quick: accuracyQuick()}, RunFlags: DefaultRunFlags()}
		rep, err := sys.RunDoctor(context.Background(), d)
		tl.runs++
		var ok bool
		switch {
		case rep == nil:
			ok = false
		case pf.name == "healthy":
			ok = err == nil && rep.Healthy
		default:
			ok = judgeRun(rep, all, buses, host)
		}
		if ok {
			tl.right++
		} else if len(tl.wrong) < 3 {
			first := fmt.Sprint(err)
			if rep != nil && len(rep.Findings) > 0 {
				first = rep.Findings[0].Line()
			}
			tl.wrong = append(tl.wrong, fmt.Sprintf("seed %d (want %v host %v): %s", seed, buses, host, first))
		}
	}
	return tl
}

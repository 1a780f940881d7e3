package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"collbench/backend/sim/cluster"
	"collbench/doctor"
	"collbench/internal/racebuild"
)

var updateSim = flag.Bool("update-simulate", false, "rewrite testdata/simulate-scale.golden")

// simulateScale says whether the runs at 1,024 hosts and more are wanted:
// they take minutes, so they run in `make simulate` (part of make test-long),
// not under the race detector of the unit tests.
func simulateScale(t *testing.T) {
	t.Helper()
	if os.Getenv("COLLBENCH_SIMULATE") == "" {
		t.Skip("set COLLBENCH_SIMULATE=1 (make simulate) for the runs of 1,024 hosts and more")
	}
}

func model(t *testing.T, hosts int, seed uint64, faults ...cluster.Fault) *cluster.Model {
	t.Helper()
	m := cluster.Defaults()
	m.Hosts, m.Noise.Seed, m.Faults = hosts, seed, faults
	if hosts < m.Fabric.HostsPerLeaf*4 {
		m.Fabric.HostsPerLeaf = max(hosts/4, 1)
	}
	return &m
}

func ip(v int) *int { return &v }

// want is a finding the doctor must make for a planted fault.
type want struct {
	kind  string
	rank  int    // the rank named, or -1
	part  string // a substring of the part named, or ""
	fault string
	// quickUplink, if set, is a leaf and spine that an "uplinks A ↔ spine
	// ↔ B" finding must name (quick mode).
	quickUplink [2]string
}

func (w want) matches(f doctor.Finding) bool {
	if f.Kind != w.kind {
		return false
	}
	if w.rank >= 0 && (len(f.Ranks) != 1 || f.Ranks[0] != w.rank) {
		return false
	}
	if u := w.quickUplink; u[0] != "" {
		return strings.HasPrefix(f.Part, "uplink") && strings.Contains(f.Part, u[0]) && strings.Contains(f.Part, u[1])
	}
	return w.part == "" || strings.Contains(f.Part, w.part)
}

// plantAll plants one fault of every kind at places drawn from seed, each
// on its own host, and says what the doctor must name for each.
func plantAll(m *cluster.Model, seed uint64) []want {
	rng := rand.New(rand.NewPCG(seed, 25)) //nolint:gosec // G404: seeded places for a test, not secrets
	g := m.GPUsPerHost
	used := map[int]bool{}
	host := func() int {
		for {
			h := rng.IntN(m.Hosts)
			if !used[h] && !used[h^1] {
				used[h], used[h^1] = true, true
				return h
			}
		}
	}
	var ws []want
	add := func(f cluster.Fault, w want) {
		m.Faults = append(m.Faults, f)
		w.fault = fmt.Sprintf("%s at host %v gpu %v leaf %v spine %v", f.Kind, deref(f.Host), deref(f.GPU), deref(f.Leaf), deref(f.Spine))
		ws = append(ws, w)
	}
	h, x := host(), rng.IntN(g)
	add(cluster.Fault{Kind: cluster.SlowNIC, Host: ip(h), GPU: ip(x), Factor: 0.5}, want{kind: "slow-nic", rank: h*g + x})
	h, x = host(), rng.IntN(g)
	add(cluster.Fault{Kind: cluster.FlappingNIC, Host: ip(h), GPU: ip(x), Factor: 0.3, Every: 4}, want{kind: "flapping-nic", rank: h*g + x})
	h, x = host(), rng.IntN(g)
	add(cluster.Fault{Kind: cluster.SlowGPU, Host: ip(h), GPU: ip(x), Factor: 0.5}, want{kind: "slow-gpu", rank: h*g + x})
	h = host()
	add(cluster.Fault{Kind: cluster.SlowNVLink, Host: ip(h), Factor: 0.5}, want{kind: "slow-host-pairs", rank: -1, part: "host " + m.HostName(h)})
	h, x = host(), rng.IntN(g)
	add(cluster.Fault{Kind: cluster.WrongData, Host: ip(h), GPU: ip(x)}, want{kind: "corrupt-sender", rank: h*g + x})
	l, s := rng.IntN(m.Leaves()), rng.IntN(m.Fabric.Spines)
	add(cluster.Fault{Kind: cluster.SlowUplink, Leaf: ip(l), Spine: ip(s), Factor: 0.5},
		want{kind: "slow-uplink", rank: -1, part: fmt.Sprintf("uplink %s ↔ %s", m.LeafName(l), m.SpineName(s))})
	return ws
}

func deref(p *int) any {
	if p == nil {
		return "-"
	}
	return *p
}

// checkNamed fails unless every want is named and nothing else is.
func checkNamed(t *testing.T, what string, rep *doctor.Report, ws []want) {
	t.Helper()
	used := make([]bool, len(rep.Findings))
	for _, w := range ws {
		found := false
		for i, f := range rep.Findings {
			if !used[i] && w.matches(f) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("%s: %s not named", what, w.fault)
		}
	}
	for i, f := range rep.Findings {
		if !used[i] {
			t.Errorf("%s: a finding no planted fault explains: %s", what, f.Line())
		}
	}
}

func simulate(t *testing.T, m *cluster.Model, quick bool) (*doctor.Report, time.Duration) {
	t.Helper()
	t0 := time.Now()
	rep, err := Simulate(context.Background(), doctor.Simulation{Model: m, Knobs: doctor.Knobs{Quick: quick}})
	var cf *CheckFailedError
	if err != nil && !errors.As(err, &cf) {
		t.Fatalf("simulate %d hosts: %v", m.Hosts, err)
	}
	return rep, time.Since(t0)
}

func TestSimulateNamesEachFaultSmall(t *testing.T) {
	racebuild.SkipLongModelRun(t)
	m := model(t, 32, 7)
	ws := plantAll(m, 7)
	rep, _ := simulate(t, m, false)
	checkNamed(t, "32 hosts", rep, ws)
	if rep.Healthy || !rep.Modelled {
		t.Errorf("healthy %v modelled %v, want an unhealthy modelled report", rep.Healthy, rep.Modelled)
	}
}

func TestSimulateCleanSmall(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		rep, _ := simulate(t, model(t, 16, seed), false)
		checkNamed(t, fmt.Sprintf("16 clean hosts, seed %d", seed), rep, nil)
	}
}

// TestSimulateFaultsAt1024 plants every fault kind at once, at places
// drawn from the seed, on 1,024 hosts x 8 GPUs, for 10 seeds.
func TestSimulateFaultsAt1024(t *testing.T) {
	simulateScale(t)
	for seed := uint64(1); seed <= 10; seed++ {
		m := model(t, 1024, seed)
		ws := plantAll(m, seed)
		rep, took := simulate(t, m, false)
		checkNamed(t, fmt.Sprintf("seed %d", seed), rep, ws)
		t.Logf("1,024 hosts, seed %d, every fault kind planted: %d findings, %.1f s modelled, %.1f s real", seed, len(rep.Findings), rep.Seconds, took.Seconds())
	}
}

// TestSimulateCleanAt1024 runs 10 clean seeded clusters with noise on:
// no finding may come of the noise.
func TestSimulateCleanAt1024(t *testing.T) {
	simulateScale(t)
	for seed := uint64(101); seed <= 110; seed++ {
		rep, took := simulate(t, model(t, 1024, seed), false)
		checkNamed(t, fmt.Sprintf("clean seed %d", seed), rep, nil)
		t.Logf("1,024 clean hosts, seed %d: %d findings, %.1f s modelled, %.1f s real", seed, len(rep.Findings), rep.Seconds, took.Seconds())
	}
}

// TestSimulateScale writes the rounds and modelled time of every stage,
// full and quick, from 16 to 4,096 hosts of 8 GPUs (the golden, whose
// table docs/simulate.md shows), and holds full doctor at 1,024 hosts to 2 minutes of modelled
// time and --quick to 40 s (it measures every GPU pair of a host too).
func TestSimulateScale(t *testing.T) {
	simulateScale(t)
	var b strings.Builder
	b.WriteString("| hosts | GPUs | leaves | mode | each GPU alone | pairs within hosts | across hosts | whole world | total |\n")
	b.WriteString("|---:|---:|---:|---|---:|---:|---:|---:|---:|\n")
	for _, hosts := range []int{16, 64, 256, 1024, 4096} {
		for _, quick := range []bool{false, true} {
			m := model(t, hosts, 1)
			rep, took := simulate(t, m, quick)
			if !rep.Healthy {
				t.Errorf("%d clean hosts: %d findings, first %s", hosts, len(rep.Findings), rep.Findings[0].Line())
			}
			fmt.Fprintf(&b, "| %d | %d | %d | %s |", hosts, m.Ranks(), m.Leaves(), rep.Mode)
			for _, s := range rep.Stages {
				fmt.Fprintf(&b, " %d rounds, %.1f s |", s.Rounds, s.Seconds)
			}
			fmt.Fprintf(&b, " %.1f s |\n", rep.Seconds)
			t.Logf("%d hosts %s: %.1f s modelled, %.1f s real", hosts, rep.Mode, rep.Seconds, took.Seconds())
			if hosts == 1024 && !quick && rep.Seconds > 120 {
				t.Errorf("full doctor at 1,024 hosts takes %.1f s modelled, over 2 minutes", rep.Seconds)
			}
			if hosts == 1024 && quick && rep.Seconds > 40 {
				t.Errorf("doctor --quick at 1,024 hosts takes %.1f s modelled, over 40 s", rep.Seconds)
			}
		}
	}
	path := filepath.Join("testdata", "simulate-scale.golden")
	if *updateSim {
		if err := os.MkdirAll("testdata", 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil { //nolint:gosec // G306: a golden file in the repository
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run make simulate UPDATE=1 to create it)", err)
	}
	if string(golden) != b.String() {
		t.Errorf("the scale table differs from %s (make simulate UPDATE=1 rewrites it):\n%s", path, b.String())
	}
}

// quickWants are the findings quick doctor must make for ws: the same
// parts, except that a slow uplink is named with the leaf on the other end
// of the slow paths (one round of host pairs cannot tell the two apart).
func quickWants(ws []want) []want {
	out := append([]want(nil), ws...)
	for i, w := range out {
		if w.kind == "slow-uplink" {
			leaf, spine, _ := strings.Cut(strings.TrimPrefix(w.part, "uplink "), " ↔ ")
			out[i].part = ""
			out[i].quickUplink = [2]string{leaf, spine}
		}
	}
	return out
}

// TestSimulateQuickNamesEachFaultSmall is TestSimulateNamesEachFaultSmall
// in quick mode (node admission): every planted fault named, nothing else.
func TestSimulateQuickNamesEachFaultSmall(t *testing.T) {
	racebuild.SkipLongModelRun(t)
	for seed := uint64(7); seed <= 9; seed++ {
		m := model(t, 32, seed)
		ws := plantAll(m, seed)
		rep, _ := simulate(t, m, true)
		checkNamed(t, fmt.Sprintf("32 hosts, quick, seed %d", seed), rep, quickWants(ws))
	}
}

// TestSimulateQuickAt1024 is the quick run at 1,024 hosts: every fault
// kind planted, 10 seeds, and 10 clean seeds with noise on.
func TestSimulateQuickAt1024(t *testing.T) {
	simulateScale(t)
	for seed := uint64(1); seed <= 10; seed++ {
		m := model(t, 1024, seed)
		ws := plantAll(m, seed)
		rep, took := simulate(t, m, true)
		checkNamed(t, fmt.Sprintf("quick, seed %d", seed), rep, quickWants(ws))
		t.Logf("1,024 hosts, quick, seed %d, every fault kind planted: %d findings, %.1f s modelled, %.1f s real", seed, len(rep.Findings), rep.Seconds, took.Seconds())
	}
	for seed := uint64(101); seed <= 110; seed++ {
		rep, took := simulate(t, model(t, 1024, seed), true)
		checkNamed(t, fmt.Sprintf("quick, clean seed %d", seed), rep, nil)
		t.Logf("1,024 clean hosts, quick, seed %d: %d findings, %.1f s real", seed, len(rep.Findings), took.Seconds())
	}
}

// TestSimulateBusyFabric: another job's traffic on the fabric is no part's
// fault. On 8 hosts, a fabric at 30% of the NICs' rate from the start or
// from 4 s into the run is named as the fabric, and no NIC, uplink or host;
// one at 70% from 5 s (above the least the NICs should carry) makes the
// pairs of the last rounds suspects, 64 pairs named before the healthy
// pairs measured beside them when measured again: now they clear them, and
// a warning says the fabric slowed; no part is named.
func TestSimulateBusyFabric(t *testing.T) {
	racebuild.SkipLongModelRun(t)
	at := func(s float64) *float64 { return &s }
	for _, tc := range []struct {
		name   string
		fault  cluster.Fault
		wanted []want
	}{
		{"30% from the start", cluster.Fault{Kind: cluster.BusyFabric, Factor: 0.3, FromS: at(0), ForS: 1000},
			[]want{{kind: "slow-fabric", rank: -1, fault: "the fabric named"}}},
		{"30% from 4 s", cluster.Fault{Kind: cluster.BusyFabric, Factor: 0.3, FromS: at(4), ForS: 1000},
			[]want{{kind: "slow-fabric", rank: -1, fault: "the fabric named"}, {kind: "busy-fabric", rank: -1, fault: "the fabric's slowing warned of"}}},
		{"70% from 5 s", cluster.Fault{Kind: cluster.BusyFabric, Factor: 0.7, FromS: at(5), ForS: 1000},
			[]want{{kind: "busy-fabric", rank: -1, fault: "the fabric's slowing warned of"}}},
	} {
		for _, quick := range []bool{true, false} {
			m := model(t, 8, 3, tc.fault)
			m.Fabric.HostsPerLeaf = 2
			rep, _ := simulate(t, m, quick)
			checkNamed(t, fmt.Sprintf("%s, quick %v", tc.name, quick), rep, tc.wanted)
		}
	}
}

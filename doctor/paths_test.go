package doctor

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"collbench/doctor/internal/facts"
	"collbench/doctor/internal/record"
	"collbench/doctor/internal/rules"
	"collbench/results"
	"collbench/topology"
)

// railSearch is rank 0's search over hosts of gpus ranks each, with the
// network steps of one allreduce over every rank as NCCL's proxy reports
// them with a ring per rail: GPU x of host h sends to GPU x of host h+1,
// on the wire at 48 GB/s with a 2% wobble; nic[r] scales both paths of
// rank r, path[{a, b}] the one path from a to b.
func railSearch(hosts, gpus int, nic map[int]float64, path map[[2]int]float64, portGbps float64) *handRun {
	n := hosts * gpus
	var names []string
	for h := 0; h < hosts; h++ {
		for g := 0; g < gpus; g++ {
			names = append(names, fmt.Sprintf("node-%02d", h))
		}
	}
	d := newHandRun(n, Options{Backend: "nccl", Hosts: names, Thresholds: rules.Thresholds{Default: rules.DefaultRules}})
	d.o.Who = func(r int) string { return fmt.Sprintf("rank %d (%s)", r, d.host(r)) }
	if portGbps > 0 {
		d.o.Facts = []facts.HostFacts{{Host: "node-00", NICs: []topology.NIC{{Name: "mlx5_0", Kind: "infiniband", RateGbps: portGbps, State: "ACTIVE"}}}}
		d.peak = slowestNICPort(d.o.Facts)
	}
	for r, h := range names {
		if len(d.members[h]) == 0 {
			d.hostList = append(d.hostList, h)
		}
		d.members[h] = append(d.members[h], r)
	}
	const bytes = 1 << 28
	k := &results.KernelTimes{Net: make([][]results.NetSteps, n)}
	group := make([]int, n)
	for r := range group {
		group[r] = r
		to := (r + gpus) % n
		rate := 48 * (1 + 0.02*math.Sin(float64(r)))
		for _, x := range []int{r, to} {
			if f, ok := nic[x]; ok {
				rate *= f
			}
		}
		if f, ok := path[[2]int{r, to}]; ok {
			rate *= f
		}
		wire := bytes / (rate * 1e3)
		k.Net[r] = append(k.Net[r], results.NetSteps{Peer: to, Send: true, Steps: 64, Bytes: bytes, BusyUS: wire * 1.2, WireUS: wire})
		k.Net[to] = append(k.Net[to], results.NetSteps{Peer: r, Steps: 64, Bytes: bytes, BusyUS: wire * 1.2})
	}
	d.notePaths("world", group, k)
	return d
}

// TestSlowPathsNamed plants slow NICs and paths at several places of a
// rail-aligned allreduce over 16 hosts of 8 GPUs: a rank at both ends of
// slow paths is named by its network path, a lone slow path end to end, a
// part another finding names is left to it, and a clean run gives nothing.
func TestSlowPathsNamed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		nic      map[int]float64
		path     map[[2]int]float64
		port     float64 // the NICs' rate in Gb/s; 0: unknown
		named    int     // a rank another stage named already; -1 none
		kind     string
		ranks    []int
		slowSeen int
	}{
		{"clean", nil, nil, 0, -1, "", nil, 0},
		{"NIC of the first host's GPU 0", map[int]float64{0: 0.5}, nil, 0, -1, "slow-nic", []int{0}, 2},
		{"NIC of a middle host's GPU 5", map[int]float64{61: 0.4}, nil, 0, -1, "slow-nic", []int{61}, 2},
		{"NIC of the last host's GPU 7", map[int]float64{127: 0.5}, nil, 0, -1, "slow-nic", []int{127}, 2},
		{"one path, one way", nil, map[[2]int]float64{{20, 28}: 0.5}, 0, -1, "slow-path", []int{20, 28}, 1},
		{"the last host's path back to the first", nil, map[[2]int]float64{{123, 3}: 0.3}, 0, -1, "slow-path", []int{123, 3}, 1},
		{"clean, at the NICs' rate", nil, nil, 400, -1, "", nil, 0},
		{"every path at a third of the NICs' rate", nil, nil, 1200, -1, "slow-network", nil, 64},
		{"a NIC the stage across hosts named", map[int]float64{61: 0.4}, nil, 0, 61, "", nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := railSearch(16, 8, tc.nic, tc.path, tc.port)
			if tc.named >= 0 {
				d.found = append(d.found, record.Finding{Severity: "FAIL", Stage: "host", Kind: "slow-nic", Part: d.o.Who(tc.named) + " network path",
					Host: d.host(tc.named), Ranks: []int{tc.named}, Msg: "slow with 8 of the 8 ranks it met"})
			}
			d.assemble()
			if len(d.rep.PathsSeen) != 1 || d.rep.PathsSeen[0].Paths != 128 || min(d.rep.PathsSeen[0].Slow, maxSlowPaths) != tc.slowSeen {
				t.Errorf("paths seen %+v, want the 128 between hosts, %d slow", d.rep.PathsSeen, tc.slowSeen)
			}
			if len(d.rep.SlowPaths) != tc.slowSeen {
				t.Errorf("slow paths %+v, want %d", d.rep.SlowPaths, tc.slowSeen)
			}
			var ours []record.Finding
			for _, f := range d.rep.Findings {
				if f.Stage == "world" {
					ours = append(ours, f)
				}
			}
			if tc.kind == "" {
				if len(ours) != 0 {
					t.Fatalf("findings from the paths %v, want none", ours)
				}
				return
			}
			if len(ours) != 1 {
				t.Fatalf("findings %v, want one", d.rep.Findings)
			}
			f := ours[0]
			if f.Kind != tc.kind || fmt.Sprint(f.Ranks) != fmt.Sprint(tc.ranks) || f.Severity != "FAIL" {
				t.Errorf("finding %+v, want %s of ranks %v", f, tc.kind, tc.ranks)
			}
			if !strings.Contains(f.Msg, "inside one collective") {
				t.Errorf("message %q", f.Msg)
			}
		})
	}
}

// TestPathsFromRealRecords reads what collbench's plugin recorded inside
// NCCL 2.28.3 on an H200 (two processes on one GPU as two hosts, NCCL's
// socket transport; scripts/gpu-test.sh, section profiler): every row of
// 1 MiB and more has each send's time on the wire within its steps' time,
// and two paths are too few to judge against each other, so nothing is
// flagged without a NIC rate to hold them to.
func TestPathsFromRealRecords(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "nccl-2.28.3-two-processes.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := results.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	big := 0
	for _, row := range doc.Results {
		k := row.OutOfPlace.Kernels
		if k == nil || len(k.DurationUS) != 2 || k.Source != "NCCL profiler plugin" {
			t.Fatalf("%s %d: kernels %+v", row.Collective, row.SizeBytes, k)
		}
		if row.SizeBytes < 1<<20 {
			continue
		}
		big++
		d := railSearch(2, 1, nil, nil, 0)
		d.seen.paths = nil
		d.notePaths("world", []int{0, 1}, k)
		sends := 0
		for _, steps := range k.Net {
			for _, s := range steps {
				if s.Send {
					sends++
					if s.WireUS <= 0 || s.WireUS > s.BusyUS*1.001 {
						t.Errorf("%s %d: send to %d: wire %.1f us, steps %.1f us", row.Collective, row.SizeBytes, s.Peer, s.WireUS, s.BusyUS)
					}
				}
			}
		}
		if len(d.seen.paths) != sends || sends == 0 {
			t.Errorf("%s %d: %d paths noted of %d sends", row.Collective, row.SizeBytes, len(d.seen.paths), sends)
		}
		d.assemble()
		if len(d.rep.Findings) != 0 {
			t.Errorf("%s %d: findings %v from two paths", row.Collective, row.SizeBytes, d.rep.Findings)
		}
	}
	if big < 3 {
		t.Errorf("%d rows of 1 MiB and more in the recording, want 3", big)
	}
}

// TestSlowestNICPort: the slowest active InfiniBand or RoCE port over every
// host, in GB/s; Ethernet, ports down and ports of unknown rate left out; 0
// where none is known.
func TestSlowestNICPort(t *testing.T) {
	ib := func(gbps float64, state string) topology.NIC {
		return topology.NIC{Name: "mlx5_0", Kind: "infiniband", RateGbps: gbps, State: state}
	}
	for _, tc := range []struct {
		name  string
		hosts []facts.HostFacts
		want  float64
	}{
		{"no facts", nil, 0},
		{"one port", []facts.HostFacts{{NICs: []topology.NIC{ib(400, "ACTIVE")}}}, 50},
		{"the slowest of two hosts", []facts.HostFacts{{NICs: []topology.NIC{ib(400, "ACTIVE")}}, {NICs: []topology.NIC{ib(400, "active"), ib(200, "ACTIVE")}}}, 25},
		{"down, unknown and ethernet left out", []facts.HostFacts{{NICs: []topology.NIC{ib(100, "DOWN"), ib(0, "ACTIVE"), {Name: "eth0", Kind: "ethernet", RateGbps: 25, State: "ACTIVE"}, ib(400, "ACTIVE")}}}, 50},
		{"none active", []facts.HostFacts{{NICs: []topology.NIC{ib(400, "DOWN")}}}, 0},
	} {
		if got := slowestNICPort(tc.hosts); got != tc.want {
			t.Errorf("%s: %g GB/s, want %g", tc.name, got, tc.want)
		}
		if got := newSite(Options{Facts: tc.hosts}, 1).nicPeak(); got != tc.want {
			t.Errorf("%s: the site's %g GB/s, want %g", tc.name, got, tc.want)
		}
	}
}

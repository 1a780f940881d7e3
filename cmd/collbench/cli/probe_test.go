package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"collbench/engine"
)

// The algorithm probe runs on NCCL; COLLBENCH_ALGORITHM_PROBE=always runs
// it on the cpu backend, so its process handling, the relay of control
// rounds through the parents and its faults are exercised here.

func TestAlgorithmProbeAcrossProcesses(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "r.json")
	p := startSelf(t, []string{engine.EnvProbe + "=always"}, "launch", "-n", "4", "--", "sweep", "--collectives", "allreduce,alltoall",
		"--backend", "cpu", "--sizes", "1K,256K", "-n", "2", "-w", "1", "-q", "--rank-list", "[[0,1],[2,3]]", "-o", out, "--explain")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, p.out, p.errb)
	}
	d := readRows(t, out)
	if len(d.Results) != 4 {
		t.Fatalf("%d rows, want 4", len(d.Results))
	}
	for _, r := range d.Results {
		if r.Algorithm == nil || r.Algorithm.Source != "cpu backend (probe)" {
			t.Errorf("%s %d B: algorithm %+v, want one from the probe", r.Collective, r.SizeBytes, r.Algorithm)
		}
		for _, g := range r.Groups {
			if g.Algorithm == nil || !strings.HasSuffix(g.Algorithm.Source, "(probe)") {
				t.Errorf("%s %d B group %d: algorithm %+v, want one from the probe", r.Collective, r.SizeBytes, g.ID, g.Algorithm)
			}
		}
		want := map[string]string{"allreduce": "RING", "alltoall": "PAIRWISE"}[r.Collective]
		if r.Algorithm != nil && r.Algorithm.Algo != want {
			t.Errorf("%s: algorithm %s, want %s", r.Collective, r.Algorithm.Algo, want)
		}
	}
	if !strings.Contains(p.out.String(), "RING/TCP") {
		t.Errorf("--explain table has no algorithm column:\n%s", p.out)
	}
	noneLeft(t)
}

// TestNoProbeOffNCCL: across processes on the cpu backend nothing is
// probed and no note blames a rank for it (every process has no NCCL).
func TestNoProbeOffNCCL(t *testing.T) {
	t.Parallel()
	p := startSelf(t, nil, "launch", "-n", "2", "--", "allreduce", "--backend", "cpu", "--sizes", "1K", "-n", "1", "-w", "0")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, p.out, p.errb)
	}
	if !strings.Contains(p.out.String(), "wrong elements:    0 (OK)") {
		t.Fatalf("no verified table:\n%s", p.out)
	}
	if strings.Contains(p.out.String()+p.errb.String(), "algorithm per row") {
		t.Errorf("a note about the algorithm probe on the cpu backend:\n%s%s", p.out, p.errb)
	}
	noneLeft(t)
}

// TestAlgorithmProbeFaults plants a probe that exits and one that hangs, in
// one process and under a launcher: the run goes on without algorithms,
// says why and names the rank, within the probe's bound.
func TestAlgorithmProbeFaults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		fault   string
		launch  bool
		timeout string // the probe's bound: short where it is what ends the probe, loose where a loaded host must not reach it
		want    []string
	}{
		{"exit alone", "probe-exit:0", false, "40s", []string{"the algorithm probe failed", "exit status 3"}},
		{"exit rank 0", "probe-exit:0", true, "40s", []string{"ended on rank 0", "exit status 3"}}, // every other rank waits for it to dial
		{"exit rank 2", "probe-exit:2", true, "40s", []string{"ended on rank 2", "exit status 3"}},
		{"exit rank 3", "probe-exit:3", true, "40s", []string{"ended on rank 3", "exit status 3"}}, // every other rank dials it
		{"hang rank 1", "probe-hang:1", true, "8s", []string{"ended on rank 1", "took longer than 8s", "before its first operation"}},
		// The others' probes held as NCCL holds them, never noticing the
		// peer gone: their parents hear of the exit and stop them.
		{"exit rank 2, the others held", "probe-exit:2;probe-hang:0;probe-hang:1;probe-hang:3", true, "40s", []string{"ended on rank 2", "exit status 3"}},
		{"exit rank 0, the others held", "probe-exit:0;probe-hang:1;probe-hang:2;probe-hang:3", true, "40s", []string{"ended on rank 0", "exit status 3"}},
		// Rank 0's child not held: its parent is in a round when the word
		// comes, and the round must name rank 3, not a rank stopped on its word.
		{"exit rank 3, ranks 1 and 2 held", "probe-exit:3;probe-hang:1;probe-hang:2", true, "40s", []string{"ended on rank 3", "exit status 3"}},
		// A child gone between asking for a round and reading the answer:
		// its parent still joins the last round, or every exchange after
		// the probe is misread.
		{"drop rank 1", "probe-drop:1", true, "40s", []string{"ended on rank 1", "exit status 3"}},
		{"drop rank 0", "probe-drop:0", true, "40s", []string{"ended on rank 0", "exit status 3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // child processes of their own, mostly waiting
			args := []string{"allreduce", "--backend", "cpu", "--sizes", "1K,64K", "-n", "2", "-w", "1", "-q"}
			if tc.launch {
				args = append([]string{"launch", "-n", "4", "--"}, args...)
			}
			start := time.Now()
			p := startSelf(t, []string{engine.EnvProbe + "=always", engine.EnvProbeTimeout + "=" + tc.timeout, "COLLBENCH_FAULTS=" + tc.fault}, args...)
			if code := p.wait(t, 60*time.Second); code != 0 {
				t.Fatalf("exit %d, want 0 (a failed probe costs only the algorithms)\n%s\n%s", code, p.out, p.errb)
			}
			out := p.out.String()
			var note string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "# note:") && strings.Contains(l, "probe") {
					note = l
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(note, w) {
					t.Errorf("note %q lacks %q", note, w)
				}
			}
			if !strings.Contains(out, "wrong elements:    0 (OK)") {
				t.Errorf("the benchmark did not run after the failed probe:\n%s", out)
			}
			bound, _ := time.ParseDuration(tc.timeout)
			el := time.Since(start)
			if el > bound+20*time.Second {
				t.Errorf("took %v: the probe's %s bound was not kept", el, tc.timeout)
			}
			if (strings.Contains(tc.fault, "exit") || strings.Contains(tc.fault, "drop")) && (el > bound || strings.Contains(note, "took longer")) {
				// The other ranks learn of the exit; they do not wait
				// out the bound.
				t.Errorf("took %v (note %q): a rank's exit was only noticed at the probe's %s bound", el, note, tc.timeout)
			}
			noneLeft(t)
		})
	}
}

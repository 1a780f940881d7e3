package cli

import (
	"strings"
	"testing"

	"collbench/backend/cpu"
	"collbench/engine"
	"collbench/measure"
	"collbench/results"
)

func TestEnvCommand(t *testing.T) {
	f, out, _ := testFactory()
	if code := run(t, f, "env"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"backend:       cpu", "nccl:          unavailable: this build has no NCCL backend", "default ranks: 4", "NCCL_DEBUG=WARN"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("env output lacks %q:\n%s", want, out)
		}
	}
	f, out, _ = testFactory()
	if code := run(t, f, "env", "--format", "json"); code != 0 || !strings.Contains(out.String(), `"selected": "cpu"`) {
		t.Fatalf("env json: %d %s", code, out)
	}
}

func TestVersion(t *testing.T) {
	f, out, _ := testFactory()
	if code := run(t, f, "version"); code != 0 || !strings.HasPrefix(out.String(), "collbench "+Version) {
		t.Fatalf("version: %d %q", code, out)
	}
}

// TestOptionsReachRunF checks flag parsing without running anything.
func TestOptionsReachRunF(t *testing.T) {
	f, _, _ := testFactory()
	var got *BenchOptions
	cmd := NewCmdCollective(f, measure.Broadcast, func(o *BenchOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"-b", "8", "-e", "1M", "-f", "4", "-g", "2", "-d", "bf16", "-r", "all", "-n", "7", "-w", "3", "-c", "2", "-a", "max"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	p, err := got.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sizes) != 9 || p.Sizes[1] != 32 || p.Roots != nil || p.Iters != 7 || p.Warmup != 3 || p.Check != 2 ||
		p.Average != measure.AvgMax || got.Ranks != 2 || p.DTypes[0].String() != "bfloat16" {
		t.Fatalf("plan %+v", p)
	}
}

func TestRankListResultsPerGroup(t *testing.T) {
	f, out, errOut := testFactory()
	code := run(t, f, "allreduce", "--backend", "cpu", "--sizes", "4K", "-n", "2", "--rank-list", "[[1,2,3],[0]]", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	d, err := results.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if d.Config.RankList != "[[1,2,3],[0]]" || len(d.Config.Groups) != 2 || len(d.Communicators) != 4 {
		t.Fatalf("config %+v, communicators %+v", d.Config, d.Communicators)
	}
	if c := d.Communicators[0]; c.GroupID != 1 || c.Size != 1 || c.Rank != 0 {
		t.Fatalf("rank 0 communicator %+v", c)
	}
	r := d.Results[0]
	if len(r.Groups) != 2 || r.Groups[0].Count != 1024 || !r.Groups[1].NoBandwidth || r.Groups[1].OutOfPlace.BusBW != 0 {
		t.Fatalf("groups %+v", r.Groups)
	}
	if r.OutOfPlace.BusBW != r.Groups[0].OutOfPlace.BusBW {
		t.Fatalf("aggregate busbw %v should equal the only multi-rank group's %v", r.OutOfPlace.BusBW, r.Groups[0].OutOfPlace.BusBW)
	}
}

func TestRankListBadInput(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"allreduce", "--rank-list", "[[0,1],[1,2]]"}, "rank 1 appears in groups 0 and 1"},
		{[]string{"allreduce", "--rank-list", "[[0,7]]"}, "rank 7 in group 0 is outside the world of 4 ranks"},
		{[]string{"allreduce", "--rank-list", "[[0,-1]]"}, "rank -1 in group 0 is negative"},
		{[]string{"allreduce", "--rank-list", "[[0],[]]"}, "group 1 is empty"},
		{[]string{"allreduce", "--rank-list", "[[0,1]"}, "at position"},
		{[]string{"sweep", "--rank-list", "thirds"}, "nor a preset"},
		{[]string{"broadcast", "--rank-list", "pairs", "--root", "3"}, "the smallest group of --rank-list pairs has 2 ranks"},
		{[]string{"verify-groups", "--rank-list", "[[0,0]]"}, "rank 0 appears twice in group 0"},
		{[]string{"verify-groups", "--sizes", "0"}, "positive"},
		{[]string{"verify-groups", "--format", "csv"}, "unknown --format"},
	}
	for _, c := range cases {
		f, out, errOut := testFactory()
		code := run(t, f, append(c.args, "--backend", "cpu")...)
		if code != engine.ExitUsage || out.Len() != 0 || strings.Count(errOut.String(), "\n") != 1 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q (want %q)", c.args, code, out, errOut, c.want)
		}
	}
}

func TestVerifyGroupsCommand(t *testing.T) {
	f, out, errOut := testFactory()
	if code := run(t, f, "verify-groups", "-g", "4", "--backend", "cpu", "--sizes", "1K"); code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	s := out.String()
	for _, want := range []string{"# layout reversed: [[1,2,3],[0]]", "# layout uneven: [[0,1,2],[3]]", "reduce-scatter", "# PASS: every value matched"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(s, "FAIL") {
		t.Errorf("a failure on the CPU backend:\n%s", s)
	}
}

func TestVerifyGroupsCatchesCorruption(t *testing.T) {
	f, out, _ := testFactory()
	f.CPUOptions = cpu.Options{AfterOp: func(rank int, c measure.Call, data []byte) {
		if rank == 3 && c.Coll == measure.AllGather {
			data[0] ^= 0x40
		}
	}}
	code := run(t, f, "verify-groups", "-g", "4", "--backend", "cpu", "--sizes", "1K", "--rank-list", "pairs")
	if code != engine.ExitCheckFailed {
		t.Fatalf("exit %d, want 1", code)
	}
	s := out.String()
	if !strings.Contains(s, "# mismatch: layout pairs, allgather, rank 3, element 0: expected") || !strings.Contains(s, "FAIL(") {
		t.Errorf("mismatch not reported:\n%s", s)
	}
}

package cli

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"collbench/backend/cpu"
	"collbench/engine"
	"collbench/measure"
	"collbench/results"
)

// testFactory returns a factory with fixed host and clock and no NCCL.
func testFactory() (*Factory, *bytes.Buffer, *bytes.Buffer) {
	io, out, errOut := TestIO()
	f := NewFactory(io)
	f.Hostname = func() (string, error) { return "testhost", nil }
	f.Now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	f.Environ = func() []string { return []string{"NCCL_DEBUG=WARN", "HOME=/root"} }
	f.NCCL = nil
	return f, out, errOut
}

func run(t *testing.T, f *Factory, args ...string) int {
	t.Helper()
	return Run(context.Background(), f, args)
}

func TestAllreduceTableOnCPU(t *testing.T) {
	f, out, errOut := testFactory()
	code := run(t, f, "allreduce", "--sizes", "8,4K", "-n", "2", "-w", "1")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	s := out.String()
	for _, want := range []string{"# collbench", "# backend:  cpu", "# ranks:    4", "testhost", "out-of-place", "in-place",
		"4 KiB", "1024", "float", "sum", "# wrong elements:    0 (OK)", "avg bus bandwidth"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "HOME=") || strings.Contains(s, "NCCL_DEBUG=WARN") {
		t.Error("unrelated environment variables (or NCCL's, on the cpu backend) leaked into the header")
	}
	if !strings.Contains(errOut.String(), "backend cpu (auto; NCCL unavailable") {
		t.Errorf("auto did not say why it chose cpu: %q", errOut)
	}
}

// TestExplainOnOneRankSaysWhy: on one rank no row has an algorithm (1x
// H200: NCCL logs none and runs no collective kernel); a note says so,
// and says nothing of the kind with 2 ranks.
func TestExplainOnOneRankSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		ranks string
		note  bool
	}{{"1", true}, {"2", false}} {
		f, out, errOut := testFactory()
		if code := run(t, f, "allreduce", "--backend", "cpu", "-g", tc.ranks, "--sizes", "8,1M", "-n", "1", "-w", "0", "--explain"); code != 0 {
			t.Fatalf("-g %s: exit %d: %s", tc.ranks, code, errOut)
		}
		if got := strings.Contains(out.String(), "a world of one rank moves nothing between ranks"); got != tc.note {
			t.Errorf("-g %s: note of one rank shown %v, want %v:\n%s", tc.ranks, got, tc.note, out)
		}
	}
}

func TestAliasesRunTheSameCollective(t *testing.T) {
	for _, alias := range []string{"all-reduce", "all_reduce", "reducescatter", "reduce_scatter", "all_gather", "bcast", "a2a", "send_recv"} {
		f, _, errOut := testFactory()
		if code := run(t, f, alias, "--sizes", "64", "-n", "1", "-w", "0", "--backend", "cpu"); code != 0 {
			t.Errorf("%s: exit %d: %s", alias, code, errOut)
		}
	}
}

func TestJSONOutputAndFile(t *testing.T) {
	dir := t.TempDir()
	f, out, _ := testFactory()
	path := filepath.Join(dir, "run.json")
	code := run(t, f, "sweep", "--collectives", "allreduce,broadcast", "--sizes", "1K", "-n", "1", "-w", "0",
		"--backend", "cpu", "-g", "3", "-o", path)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out.String(), "# broadcast") {
		t.Errorf("stdout should carry the table when -o names a JSON file:\n%s", out)
	}
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	d, err := results.Read(fh)
	if err != nil {
		t.Fatal(err)
	}
	if d.Config.Ranks != 3 || len(d.Results) != 2 || d.Results[1].Collective != "broadcast" || d.Results[1].Root != 0 {
		t.Fatalf("unexpected document: %+v", d)
	}
	if d.Environment.Backend.Name != "cpu" || d.Environment.Host != "testhost" || len(d.Environment.Backend.Devices) != 3 {
		t.Fatalf("environment not recorded: %+v", d.Environment)
	}
	if !d.Summary.OK || d.Summary.WrongTotal != 0 {
		t.Fatalf("summary: %+v", d.Summary)
	}
	if got := d.Results[0].OutOfPlace.RankTimeUS; len(got) != 3 {
		t.Fatalf("per-rank times: %v", got)
	}
}

func TestFormatsOnStdout(t *testing.T) {
	f, out, _ := testFactory()
	if code := run(t, f, "reduce-scatter", "--sizes", "4K", "-n", "1", "--format", "json", "--backend", "cpu"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if _, err := results.Read(out); err != nil {
		t.Fatalf("stdout is not a result document: %v", err)
	}
	f, out, _ = testFactory()
	if code := run(t, f, "alltoall", "--sizes", "4K,8K", "-n", "1", "--format", "csv", "--backend", "cpu"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	recs, err := csv.NewReader(out).ReadAll()
	// alltoall runs out-of-place only: a header and one line per size.
	if err != nil || len(recs) != 3 || recs[1][0] != "alltoall" || recs[2][7] != "out-of-place" {
		t.Fatalf("csv: %v %v", recs, err)
	}
}

// TestBadInputIsOneLineExit2 covers every bad input the tool must refuse
// before doing anything.
func TestBadInputIsOneLineExit2(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"allreduce", "--sizes", "0"}, "positive"},
		{[]string{"allreduce", "--sizes", "-8"}, "invalid size"},
		{[]string{"allreduce", "--sizes", "1Q"}, "invalid size \"1Q\""},
		{[]string{"allreduce", "--sizes", "8:4"}, "start 8 is larger than end 4"},
		{[]string{"allreduce", "--dtype", "float128"}, "unknown dtype \"float128\" (valid: int8"},
		{[]string{"allreduce", "--op", "xor"}, "unknown op \"xor\" (valid: sum"},
		{[]string{"allscatter"}, "unknown command \"allscatter\""},
		{[]string{"sweep", "--collectives", "allreduce,allscatter"}, "unknown collective \"allscatter\""},
		{[]string{"broadcast", "--root", "9"}, "invalid --root 9: must be between 0 and 3"},
		{[]string{"broadcast", "--root", "x"}, "invalid --root \"x\""},
		{[]string{"allreduce", "--iters", "0"}, "invalid --iters 0"},
		{[]string{"allreduce", "--iters", "abc"}, "invalid --iters \"abc\": it takes a whole number"},
		{[]string{"allreduce", "--dtype", "e4m3", "--op", "prod"}, "op prod on dtype f8e4m3"},
		{[]string{"allreduce", "--dtype", "e5m2", "--op", "avg"}, "op avg on dtype f8e5m2"},
		{[]string{"alltoall", "--mode", "in-place"}, "alltoall run out-of-place only"},
		{[]string{"sendrecv", "--cuda-graph", "10"}, "--cuda-graph needs the nccl backend"},
		{[]string{"allreduce", "--mode", "sideways"}, "unknown --mode"},
		{[]string{"allreduce", "--average", "median"}, "unknown --average"},
		{[]string{"allreduce", "--format", "xml"}, "unknown --format"},
		{[]string{"allreduce", "--backend", "tpu"}, "unknown --backend"},
		{[]string{"allreduce", "--backend", "nccl"}, "the nccl backend is not available"},
		{[]string{"allreduce", "--sizes", "8", "-b", "8"}, "either --sizes or -b"},
		{[]string{"allreduce", "--check", "-1"}, "invalid --check"},
		{[]string{"allreduce", "-g", "-2"}, "invalid --ranks"},
		{[]string{"allreduce", "extra"}, "takes no arguments"},
		{[]string{"allreduce", "--no-such-flag"}, "unknown flag"},
		{[]string{"allreduce", "-o", "/nonexistent-dir/x.json"}, "cannot write --output"},
	}
	for _, c := range cases {
		f, out, errOut := testFactory()
		code := run(t, f, c.args...)
		if code != engine.ExitUsage {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", c.args, code, errOut)
		}
		if out.Len() != 0 {
			t.Errorf("%v: printed on stdout: %q", c.args, out)
		}
		msg := errOut.String()
		if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "collbench: ") {
			t.Errorf("%v: want one line on stderr, got %q", c.args, msg)
		}
		if !strings.Contains(msg, c.want) {
			t.Errorf("%v: stderr %q does not mention %q", c.args, msg, c.want)
		}
	}
}

// TestCorruptionFailsTheRun flips one element of one rank's output and
// expects #wrong 1 and exit code 1.
func TestCorruptionFailsTheRun(t *testing.T) {
	f, out, errOut := testFactory()
	flipped := false
	f.CPUOptions = cpu.Options{AfterOp: func(rank int, c measure.Call, data []byte) {
		if rank == 2 && !flipped && len(data) >= 4 {
			data[1] ^= 0x40
			flipped = true
		}
	}}
	code := run(t, f, "allreduce", "--sizes", "1K", "-n", "1", "-w", "0", "--mode", "out-of-place", "--backend", "cpu", "--format", "json")
	if code != engine.ExitCheckFailed {
		t.Fatalf("exit %d, want 1; stderr %q", code, errOut)
	}
	d, err := results.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if w := *d.Results[0].OutOfPlace.Wrong; w != 1 {
		t.Fatalf("#wrong = %d, want 1", w)
	}
	if ms := d.Results[0].OutOfPlace.Mismatches; len(ms) != 1 || ms[0].Rank != 2 || ms[0].Index != 0 || ms[0].Want == ms[0].Got {
		t.Fatalf("mismatch not located: %+v", ms)
	}
	if d.Summary.OK || d.Summary.WrongTotal != 1 {
		t.Fatalf("summary %+v", d.Summary)
	}
	if !strings.Contains(errOut.String(), "verification failed: 1 wrong elements") {
		t.Errorf("stderr: %q", errOut)
	}
}

// TestSizesThatCannotFitAreRefused gives the CPU backend a memory cap and
// asks for sizes beyond it: the run is refused before anything is
// allocated, with one line naming every such size, what a rank needs and
// may have, and the largest size that fits.
func TestSizesThatCannotFitAreRefused(t *testing.T) {
	f, out, errOut := testFactory()
	f.CPUOptions = cpu.Options{MemoryLimit: 3 * 2 * (2 << 20)} // 3 ranks, two 2 MiB buffers each
	code := run(t, f, "allreduce", "--sizes", "1K,2M,4M,16M", "-n", "1", "-g", "3", "--backend", "cpu", "--format", "json")
	if code != engine.ExitUsage {
		t.Fatalf("exit %d, want 2; stderr %q", code, errOut)
	}
	msg := errOut.String()
	for _, want := range []string{"sizes 4M, 16M cannot fit", "rank 0 needs two buffers", "32.0 MiB for 16M", "may allocate 4.0 MiB",
		"memory limit of 12.0 MiB", "shared by 3 ranks", "largest requested size that fits is 2M"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr lacks %q: %q", want, msg)
		}
	}
	if strings.Count(msg, "\n") != 1 || out.Len() != 0 {
		t.Errorf("want one line and no results: stdout %q, stderr %q", out, msg)
	}
}

func TestInterruptedRunKeepsRows(t *testing.T) {
	f, out, errOut := testFactory()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	code := Run(ctx, f, []string{"allreduce", "--sizes", "8", "--backend", "cpu"})
	if code != engine.ExitInterrupted {
		t.Fatalf("exit %d, want 130; stderr %q", code, errOut)
	}
	if !strings.Contains(out.String(), "# stopped early") {
		t.Errorf("partial table missing: %q", out)
	}
}

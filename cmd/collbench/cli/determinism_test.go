package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"collbench/backend/nccl/fakegpu"
	"collbench/determinism"
	"collbench/tunefile"
)

// TestDeterminismFindsTheCPUAlgorithmsDisagree: on the cpu backend across
// 4 processes, ring and recursive doubling each give the same bits run to
// run on fresh communicators and on every rank, and disagree with each
// other; the ring (whose chunks move as a message grows) is not size
// invariant, recursive doubling is. The record has every cell and the
// tuner file pins recursive doubling where the ring is not stable.
func TestDeterminismFindsTheCPUAlgorithmsDisagree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	js, csv := filepath.Join(dir, "det.json"), filepath.Join(dir, "det.csv")
	code, out, errOut := launchSelf(t, "-n", "4", "--", "determinism", "--backend", "cpu", "--collectives", "allreduce", "--dtype", "float,bfloat16",
		"--sizes", "8:32K:x8", "-q", "-o", js, "--tuner-file", csv)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	rep := readJSON[determinism.Report](t, js)
	if rep.Schema != determinism.Schema || rep.Ranks != 4 || rep.Runs != 3 || !rep.Complete || len(rep.Cells) != 2*3*5 {
		t.Fatalf("report: schema %q, %d ranks, %d runs, complete %v, %d cells", rep.Schema, rep.Ranks, rep.Runs, rep.Complete, len(rep.Cells))
	}
	digest := map[[3]any]string{}
	ringVariant := false
	for _, c := range rep.Cells {
		if c.RunToRun != determinism.Same || c.Ranks != determinism.Same {
			t.Errorf("%s %s %d B %s: run to run %s, ranks %s, want the same bits", c.Collective, c.DType, c.Size, c.Choice, c.RunToRun, c.Ranks)
		}
		if c.Choice == "recursive_doubling" && c.SizeInvariant == determinism.Differs {
			t.Errorf("recursive doubling not size invariant at %s %d B: %+v", c.DType, c.Size, c.Divergences)
		}
		if c.Choice == "ring" && c.SizeInvariant == determinism.Differs {
			ringVariant = true
			if len(c.Divergences) == 0 || c.Divergences[0].Element < 0 || c.Divergences[0].Bits == "" {
				t.Errorf("a size divergence without its element and bits: %+v", c.Divergences)
			}
		}
		digest[[3]any{c.DType, c.Size, c.Choice}] = c.Digest
	}
	differ := 0
	for _, ty := range []string{"float", "bfloat16"} {
		for _, s := range []int64{512, 4096, 32768} {
			if digest[[3]any{ty, s, "ring"}] != digest[[3]any{ty, s, "recursive_doubling"}] {
				differ++
			}
		}
	}
	if !ringVariant || differ < 4 {
		t.Errorf("ring size-variant %v; ring and recursive doubling differ at %d of 6 sizes from 512 B, want most", ringVariant, differ)
	}
	for _, want := range []string{"## allreduce float", "default |   ring | recursive_doubling", "# choices: recursive_doubling differs from default", "# first size divergence"} {
		if !strings.Contains(out, want) {
			t.Errorf("the matrix lacks %q:\n%s", want, out)
		}
	}
	f, err := os.Open(csv) //nolint:gosec // G304: the test's own file
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	es, err := tunefile.ReadFor(f, csv, tunefile.CPU)
	if err != nil || len(es) == 0 {
		t.Fatalf("the tuner file: %v (%d entries)", err, len(es))
	}
	for _, e := range es {
		if e.MaxBytes >= 512 && e.Algorithm != "recursive_doubling" {
			t.Errorf("the file pins %s at %d B, where only recursive doubling was stable", e.Algorithm, e.MaxBytes)
		}
	}
	// The pinned file passes --check over 20 fresh runs; a file pinning
	// the ring, which moves its chunks as a message grows, fails.
	code, out, errOut = launchSelf(t, "-n", "4", "--", "determinism", "--backend", "cpu", "--collectives", "allreduce", "--dtype", "float,bfloat16",
		"--sizes", "8:32K:x8", "-q", "--runs", "20", "--check", csv)
	if code != 0 || !strings.Contains(out, "# 10 of 10 cells stable") {
		t.Errorf("--check of the pinned file: exit %d\n%s\n%s", code, out, errOut)
	}
	ring := filepath.Join(dir, "ring.csv")
	if err := os.WriteFile(ring, []byte("allreduce,1,1048576,ring,tcp,-1,-1,4,-1,-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = launchSelf(t, "-n", "4", "--", "determinism", "--backend", "cpu", "--collectives", "allreduce", "--dtype", "float",
		"--sizes", "8:32K:x8", "-q", "--check", ring)
	if code != 1 || !strings.Contains(errOut, "determinism --check "+ring+": ") || !strings.Contains(errOut, "diverged") {
		t.Errorf("--check of a file pinning the ring: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestDeterminismBadInput: what determinism cannot judge is refused in one
// line, exit 2, before any backend starts.
func TestDeterminismBadInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"determinism", "--backend", "cpu", "--dtype", "int32"}, "int32 is an integer type: its sums are exact in any order"},
		{[]string{"determinism", "--backend", "cpu", "--runs", "1"}, "--runs 1: run to run needs at least 2 runs"},
		{[]string{"determinism", "--backend", "cpu", "--collectives", "allgather"}, "allgather moves data without reducing it"},
		{[]string{"determinism", "--backend", "cpu", "--dtype", "float,nope"}, `unknown dtype "nope"`},
		{[]string{"determinism", "--backend", "cpu", "--sizes", "1Q"}, "1Q"},
		{[]string{"determinism", "--backend", "cpu", "--budget", "-1s"}, "--budget -1s: give the run some time"},
		{[]string{"determinism", "--backend", "cpu", "--check", "/nonexistent.csv"}, "--check /nonexistent.csv"},
		{[]string{"determinism", "--backend", "cpu", "--check", "a.csv", "--tuner-file", "b.csv"}, "--check and --tuner-file cannot go together"},
	} {
		f, outB, errB := testFactory()
		code := run(t, f, c.args...)
		errOut := errB.String()
		if code != 2 || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 || outB.Len() > 0 {
			t.Errorf("%v: exit %d, stderr %q (want one line with %q), stdout %q", c.args, code, errOut, c.want, outB.String())
		}
	}
}

// TestDeterminismOnTheFakeGPUMachine: the fake machine's NCCL reduces in
// each algorithm's order (the ring by chunks that move with the size, the
// tree down a chain), so determinism on it sees what it would on GPUs:
// every forced ring size-variant from 512 B, every tree stable and giving
// the default's bits where NCCL's own rule takes the tree (to 64 KiB), the
// default size-variant where it takes the ring; nothing differs run to
// run or between ranks. The tuner file it writes pins a tree up to 256
// KiB, where the default takes the ring from 128 KiB, and passes --check
// over 5 fresh runs.
func TestDeterminismOnTheFakeGPUMachine(t *testing.T) {
	f, out, errOut := fakeGPUFactory(4, fakegpu.Options{})
	js := filepath.Join(t.TempDir(), "det.json")
	if code := run(t, f, "determinism", "--backend", "nccl", "--sizes", "8:256K:x8", "--dtype", "float", "--collectives", "allreduce", "-q", "-o", js); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	rep := readJSON[determinism.Report](t, js)
	digest := map[[2]any]string{}
	for _, c := range rep.Cells {
		digest[[2]any{c.Size, c.Choice}] = c.Digest
		ring, tree := strings.HasPrefix(c.Choice, "ring/"), strings.HasPrefix(c.Choice, "tree/")
		switch {
		case c.RunToRun != determinism.Same || c.Ranks != determinism.Same:
			t.Errorf("%d B %s: run %s, ranks %s", c.Size, c.Choice, c.RunToRun, c.Ranks)
		case tree && !c.Stable(), ring && c.Size >= 512 && c.Stable():
			t.Errorf("%d B %s: stable %v (size %s)", c.Size, c.Choice, c.Stable(), c.SizeInvariant)
		case c.Choice == determinism.Default && c.Stable() != (c.Size <= 64<<10):
			t.Errorf("the default at %d B: stable %v, want stable where NCCL's rule takes the tree", c.Size, c.Stable())
		}
	}
	if len(rep.Cells) != 6*7 || digest[[2]any{int64(4096), "tree/ll"}] != digest[[2]any{int64(4096), determinism.Default}] ||
		digest[[2]any{int64(4096), "ring/simple"}] == digest[[2]any{int64(4096), "tree/simple"}] {
		t.Errorf("%d cells; at 4 KiB the tree should give the default's bits and the ring others:\n%s", len(rep.Cells), out)
	}
	csv := filepath.Join(t.TempDir(), "t.csv")
	f, out, errOut = fakeGPUFactory(4, fakegpu.Options{})
	if code := run(t, f, "determinism", "--backend", "nccl", "--sizes", "8:256K:x8", "--dtype", "float", "--collectives", "allreduce", "-q", "--tuner-file", csv); code != 0 {
		t.Fatalf("--tuner-file on NCCL: exit %d\n%s\n%s", code, out, errOut)
	}
	data, err := os.ReadFile(csv) //nolint:gosec // G304: the test's own file
	if err != nil || !strings.Contains(string(data), ",262144,tree,") || !strings.Contains(string(data), "keeps NCCL's own count and choice") {
		t.Fatalf("tuner file (%v):\n%s", err, data)
	}
	f, out, errOut = fakeGPUFactory(4, fakegpu.Options{})
	if code := run(t, f, "determinism", "--backend", "nccl", "--sizes", "8:256K:x8", "--dtype", "float", "--collectives", "allreduce", "-q", "--runs", "5", "--check", csv); code != 0 {
		t.Errorf("--check with the pinned file: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestDeterminismSeesHistory: on a fake machine whose reductions start
// where the communicator's previous collective left them (the class of
// NCCL's NVLS results that depend on what ran before), every run on a
// fresh communicator still gives the same bits, and the history run (the
// sizes largest first, each after another call) names its divergence.
func TestDeterminismSeesHistory(t *testing.T) {
	f, out, errOut := fakeGPUFactory(4, fakegpu.Options{OrderByPast: true})
	code := run(t, f, "determinism", "--backend", "nccl", "--default-only", "--sizes", "64:4K:x4", "--dtype", "float", "--collectives", "allreduce", "-q")
	if code != 0 || strings.Contains(out.String(), "run+") || !strings.Contains(out.String(), "history") ||
		!strings.Contains(out.String(), "# first history divergence at") {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestDeterminismBudget: a spent budget starts nothing more, keeps what was
// measured, says so, and is no error.
func TestDeterminismBudget(t *testing.T) {
	t.Parallel()
	js := filepath.Join(t.TempDir(), "det.json")
	code, out, errOut := launchSelf(t, "-n", "2", "--", "determinism", "--backend", "cpu", "--budget", "1ns", "-q", "-o", js)
	if code != 0 || !strings.Contains(out, "# note: --budget 1ns spent: allreduce float with default and what follows were not run") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	data, err := os.ReadFile(js) //nolint:gosec // G304: the test's own file
	if err != nil || !strings.Contains(string(data), `"complete": false`) {
		t.Errorf("the record (%v) does not say it was cut short:\n%s", err, data)
	}
}

// TestDeterminismLeavesOutWhatCannotRun: where NCCL's table says a forced
// pair cannot run (LL128 over NCCL's network transport, as two ranks
// sharing one H200 as two hosts showed: the cells named ring/ll128 held
// what NCCL ran instead, and the tuner file pinned LL128 there), the
// choice's cells are left out with a note, and no line pins it.
func TestDeterminismLeavesOutWhatCannotRun(t *testing.T) {
	f, out, errOut := fakeGPUFactory(4, fakegpu.Options{NoLL128: true})
	dir := t.TempDir()
	js, csv := filepath.Join(dir, "det.json"), filepath.Join(dir, "t.csv")
	if code := run(t, f, "determinism", "--backend", "nccl", "--sizes", "8:256K:x8", "--dtype", "float", "--collectives", "allreduce,reduce-scatter",
		"-q", "-o", js, "--tuner-file", csv); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	rep := readJSON[determinism.Report](t, js)
	choices := map[string]int{}
	for _, c := range rep.Cells {
		choices[c.Collective+" "+c.Choice]++
	}
	for _, want := range []string{"allreduce ring/ll", "allreduce tree/simple", "reduce-scatter ring/simple", "reduce-scatter default"} {
		if choices[want] != 6 {
			t.Errorf("%s: %d cells, want 6", want, choices[want])
		}
	}
	notes := strings.Join(rep.Notes, "\n")
	for _, ch := range []string{"allreduce ring/ll128", "allreduce tree/ll128", "reduce-scatter ring/ll128"} {
		if choices[ch] != 0 {
			t.Errorf("%s: %d cells of a pair NCCL cannot run here", ch, choices[ch])
		}
		c, algo, _ := strings.Cut(ch, " ")
		if !strings.Contains(notes, c+" float: "+algo+" cannot run here (NCCL cannot run it here") {
			t.Errorf("no note for %s:\n%s", ch, notes)
		}
	}
	data, err := os.ReadFile(csv) //nolint:gosec // G304: the test's own file
	if err != nil || strings.Contains(string(data), ",ll128,") {
		t.Errorf("tuner file (%v) pins LL128:\n%s", err, data)
	}
}

package engine

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"collbench/backend/nccl/fakegpu"
	"collbench/internal/racebuild"
	"collbench/measure"
	"collbench/tune"
	"collbench/tunefile"
)

// protocolMachine is a fake 2-GPU H100 whose NCCL's protocols cost what
// the model gives them (LL half the rate, LL128 +1 µs at 95%, Simple +4 µs)
// while its own rule runs LL up to 64 KiB and Simple above: a space whose
// best choice is known. NCCL_TUNER_PLUGIN is cleared for the test (and
// restored after it), as a user's shell would have it.
func protocolMachine(t *testing.T, version int) *System {
	t.Setenv("NCCL_TUNER_PLUGIN", "")
	m := fakegpu.HealthyModel(7)
	m.Protocols, m.LatencyUS = true, 5
	return gpuSystem(2, fakegpu.Options{Model: m, NCCLVersion: version})
}

func ncclTune(sizes ...int64) Tune {
	p := DefaultBench().Plan
	p.Collectives = []measure.Collective{measure.AllReduce, measure.AllGather}
	p.Sizes, p.Iters, p.Warmup = sizes, 4, 1
	// The budget is wall time, and the search refines and confirms only
	// while some is left: on a loaded 2-core host under -race a minute ran
	// out before a gain was confirmed ("best tree/ll (gain 0.00)"). These
	// tests are of what is found, not of the budget: 10 minutes bounds
	// them without noise crossing it.
	return Tune{Plan: p, Backend: "nccl", Budget: 10 * time.Minute, Repeats: 3, Tool: "test", RunFlags: DefaultRunFlags()}
}

// TestTuneForcesNCCLThroughItsTunerPlugin tunes allreduce and allgather on
// the fake machine through collbench's tuner plugin, which the machine's
// NCCL calls as NCCL does: at 256 KiB and 1 MiB the default (Simple) loses
// to LL and LL128 by the model's margins, and tune finds them; at 8 B the
// default (LL) is best or within noise; every forced cell ran what the
// profiler recorded, the default's own choice is in the report, PAT (which
// the machine's table marks as unable to run) is left out with a note,
// and the tuner file names channels on every line and covers every size.
// Then --check with that file reproduces each gain.
func TestTuneForcesNCCLThroughItsTunerPlugin(t *testing.T) {
	racebuild.SkipLongModelRun(t) // 26 s under -race, 1.7 s without
	sys := protocolMachine(t, 0)
	tn := ncclTune(8, 256<<10, 1<<20)
	rep, err := sys.RunTune(context.Background(), tn)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Backend != "nccl" || rep.Ranks != 2 || !rep.Complete || len(rep.Collectives) != 2 {
		t.Fatalf("report %+v", rep)
	}
	// The model runs tree and ring alike: the protocol is what is known.
	want := map[int64]string{256 << 10: "ll", 1 << 20: "ll128"}
	defaults := map[int64]string{8: "tree/ll/2ch", 256 << 10: "ring/simple/4ch", 1 << 20: "ring/simple/4ch"}
	for _, res := range rep.Collectives[0].Results {
		if res.Default.Ran == nil || res.Default.Ran.String() != defaults[res.Size] {
			t.Errorf("allreduce %d B: the default ran %v, want %s", res.Size, res.Default.Ran, defaults[res.Size])
		}
		for _, c := range res.Cells {
			if c.Choice.Default {
				continue
			}
			if c.Ran == nil || c.Ran.Algorithm != c.Choice.Algorithm || c.Ran.Protocol != c.Choice.Protocol {
				t.Errorf("allreduce %d B: %s forced, the profiler saw %v", res.Size, c.Choice, c.Ran)
			}
		}
		if w := want[res.Size]; w != "" {
			if res.Best.Choice.Protocol != w || res.Gain <= 0 {
				t.Errorf("allreduce %d B: best %s (gain %.2f), want %s beyond noise", res.Size, res.Best.Choice, res.Gain, w)
			}
			if d := res.Default.Time() / res.Best.Time(); d < 1.3 {
				t.Errorf("allreduce %d B: the best is %.2fx the default, the model gives it more", res.Size, d)
			}
		} else if res.Gain > 0 && res.Best.Choice.Protocol != "ll" {
			t.Errorf("allreduce %d B: a gain of %.2f for %s where the default (LL) is as good as any", res.Size, res.Gain, res.Best.Choice)
		}
	}
	// The leader's channels on the grid: at 1 MiB the leader ran on 4
	// channels, so 2 was tried, and ran on 2.
	at1M := rep.Collectives[0].Results[2]
	var two *tune.Cell
	for i, c := range at1M.Cells {
		if c.Choice.Channels == 2 {
			two = &at1M.Cells[i]
		}
	}
	if two == nil || two.Ran == nil || two.Ran.Channels != 2 || two.Ran.Protocol != two.Choice.Protocol {
		t.Errorf("allreduce 1 MiB: no cell of the leader on 2 channels that ran so: %+v", at1M.Cells)
	}
	notes := strings.Join(rep.Notes, "\n")
	if !strings.Contains(notes, "allgather: pat/simple cannot run here at 3 of the sizes") {
		t.Errorf("notes:\n%s", notes)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "default ran") || !strings.Contains(table.String(), "ring/simple/4ch") {
		t.Errorf("table:\n%s", table.String())
	}
	es := rep.Entries()
	var covered int
	for _, e := range es {
		if e.Channels <= 0 {
			t.Errorf("line %+v leaves the channels to NCCL's example plugin (one channel)", e)
		}
		if e.Collective == "allreduce" {
			covered += int(min(e.MaxBytes, 1<<20) - e.MinBytes + 1)
		}
	}
	if covered != 1<<20+1 {
		t.Errorf("allreduce lines cover %d of the %d sizes up to 1 MiB: %+v", covered, 1<<20+1, es)
	}
	var file bytes.Buffer
	if err := rep.WriteTunerFile(&file); err != nil {
		t.Fatal(err)
	}
	back, err := tunefile.Read(strings.NewReader(file.String()), "tuner.csv")
	if err != nil || len(back) != len(es) {
		t.Fatalf("the file reads back as %d lines (%v), want %d:\n%s", len(back), err, len(es), file.String())
	}

	// --check: the file, forced by the plugin, reproduces each gain.
	path := t.TempDir() + "/tuner.csv"
	if err := os.WriteFile(path, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	tn.Check, tn.Plan.Collectives = path, tn.Plan.Collectives[:1]
	chk, err := protocolMachine(t, 0).RunTune(context.Background(), tn)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range chk.Collectives[0].Results {
		v := chk.Verdict(res)
		if want[res.Size] != "" && !strings.HasPrefix(v, "reproduced") {
			t.Errorf("check %d B: %s", res.Size, v)
		}
	}
}

// TestTuneCheckRunsLinesAsNCCLsExamplePlugin: a line that names no
// channels is measured on one channel, as NCCL's example plugin runs it,
// and a note names it; a size no line covers is named too.
func TestTuneCheckRunsLinesAsNCCLsExamplePlugin(t *testing.T) {
	path := t.TempDir() + "/tuner.csv"
	if err := os.WriteFile(path, []byte("allreduce,0,262144,ring,ll,-1,-1,-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tn := ncclTune(8, 256<<10, 1<<20)
	tn.Check, tn.Plan.Collectives = path, tn.Plan.Collectives[:1]
	rep, err := protocolMachine(t, 0).RunTune(context.Background(), tn)
	if err != nil && ExitCode(err) != 1 {
		t.Fatal(err)
	}
	for _, res := range rep.Collectives[0].Results[:2] {
		f := res.Cells[1]
		if f.Choice.Channels != 1 || f.Ran == nil || f.Ran.Channels != 1 {
			t.Errorf("%d B: the file's cell %+v (ran %v), want ring/ll on one channel", res.Size, f.Choice, f.Ran)
		}
	}
	notes := strings.Join(rep.Notes, "\n")
	if !strings.Contains(notes, "2 sizes have a line of channels -1") || !strings.Contains(notes, "1 sizes have no line") || !strings.Contains(notes, "allreduce 1 MiB") {
		t.Errorf("notes:\n%s", notes)
	}
}

// TestTuneOnAnNCCLWithoutTunerLookup: an NCCL that cannot load a tuner
// from the process (2.25), or a tuner of the user's own, is a usage error
// that says so, before any measurement.
func TestTuneOnAnNCCLWithoutTunerLookup(t *testing.T) {
	_, err := protocolMachine(t, 22503).RunTune(context.Background(), ncclTune(8))
	if ExitCode(err) != 2 || !strings.Contains(err.Error(), "nothing to tune: NCCL's choices cannot be forced: NCCL 2.25.3 cannot load a tuner from the process") {
		t.Errorf("exit %d: %v", ExitCode(err), err)
	}
	sys := protocolMachine(t, 0)
	t.Setenv("NCCL_TUNER_PLUGIN", "/opt/mine.so")
	_, err = sys.RunTune(context.Background(), ncclTune(8))
	if ExitCode(err) != 2 || !strings.Contains(err.Error(), "NCCL_TUNER_PLUGIN=/opt/mine.so is the user's own tuner") {
		t.Errorf("exit %d: %v", ExitCode(err), err)
	}
}

// TestTuneLeavesOutSizesThatMoveNothing: on 4 GPUs an allgather of 8 B is
// under one element per rank, NCCL discards it, and tune leaves it out
// with a note instead of judging a choice that nothing ran (on 4x H200 it
// reported "0.5 us, the default is best").
func TestTuneLeavesOutSizesThatMoveNothing(t *testing.T) {
	t.Setenv("NCCL_TUNER_PLUGIN", "")
	m := fakegpu.HealthyModel(7)
	m.Protocols = true
	sys := gpuSystem(4, fakegpu.Options{Model: m})
	tn := ncclTune(8, 4096)
	rep, err := sys.RunTune(context.Background(), tn)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Collectives {
		var sizes []int64
		for _, r := range c.Results {
			sizes = append(sizes, r.Size)
		}
		want := []int64{8, 4096}
		if c.Name == "allgather" {
			want = want[1:]
		}
		if !slices.Equal(sizes, want) {
			t.Errorf("%s: results at %v, want %v", c.Name, sizes, want)
		}
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool {
		return strings.HasPrefix(n, "allgather: nothing moves at 8 B on 4 ranks")
	}) {
		t.Errorf("no note names the size left out: %q", rep.Notes)
	}
	// Nor is ring, which runs at every size that moves data, said to be
	// refused at one (it was, at the empty size).
	if slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "ring/ll cannot run here") }) {
		t.Errorf("a note says ring/LL cannot run: %q", rep.Notes)
	}
}

// TestTuneClaimsNoGainForTheDefaultItself: on 2x H200 a choice forced to
// what NCCL runs anyway (allreduce 128 KiB: ring/LL, on the 16 channels
// of NCCL's own choice) ran faster than NCCL unforced in 4 of 5 pairs, and
// tune claimed it as a gain that its file, naming NCCL's own choice,
// could not reproduce. The fake machine forces that way too
// (ForcedFactor): a forced cell that the profiler saw run what the
// default ran is the default, measured once, never a gain.
func TestTuneClaimsNoGainForTheDefaultItself(t *testing.T) {
	t.Setenv("NCCL_TUNER_PLUGIN", "")
	m := fakegpu.HealthyModel(7)
	m.Protocols, m.LatencyUS, m.ForcedFactor = true, 5, 0.85
	sys := gpuSystem(2, fakegpu.Options{Model: m})
	rep, err := sys.RunTune(context.Background(), ncclTune(8, 4<<10, 256<<10))
	if err != nil {
		t.Fatal(err)
	}
	same := 0
	for _, col := range rep.Collectives {
		for _, res := range col.Results {
			for _, c := range res.Cells {
				if c.Choice.Default || c.Ran == nil || res.Default.Ran == nil || *c.Ran != *res.Default.Ran {
					continue
				}
				same++
				t.Errorf("%s %d B: %s forced ran %s, as the default: a cell of its own (best %s, gain %.2f)",
					col.Name, res.Size, c.Choice, c.Ran, res.Best.Choice, res.Gain)
			}
		}
	}
	notes := strings.Join(rep.Notes, "\n")
	if same == 0 && !strings.Contains(notes, "is what the default runs") {
		t.Errorf("no note of the choices that are the default:\n%s", notes)
	}
}

// TestTuneFirstStepIsWarm: a communicator's first operations run slow on
// the GPUs (the fake: its first 20 take 20 µs more), and tune's first step
// ran them in its timed loop: its first repeat was the cold start's, not
// the size's (4x H200: allreduce of 8 B 30.5 µs, then 10.9-12.4). The
// first step now warms the world first, so every repeat of the first size
// is within 10% of its best.
func TestTuneFirstStepIsWarm(t *testing.T) {
	t.Setenv("NCCL_TUNER_PLUGIN", "")
	m := fakegpu.HealthyModel(7)
	m.Protocols, m.LatencyUS, m.ColdOps, m.ColdUS = true, 5, 20, 20
	sys := gpuSystem(2, fakegpu.Options{Model: m})
	rep, err := sys.RunTune(context.Background(), ncclTune(8<<10, 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	for _, col := range rep.Collectives {
		if len(col.Results) == 0 {
			t.Fatalf("%s: no results", col.Name)
		}
		first := col.Results[0]
		ts := first.Default.TimesUS
		if len(ts) == 0 {
			t.Fatalf("%s %d B: the default has no times", col.Name, first.Size)
		}
		best := slices.Min(ts)
		for i, v := range ts {
			if v > 1.1*best {
				t.Errorf("%s %d B: the default's repeat %d took %.1f us, its best %.1f: the cold start is in it (times %v)", col.Name, first.Size, i+1, v, best, ts)
			}
		}
	}
}

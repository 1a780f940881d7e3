package engine

import (
	"context"
	"os"
	"strings"
	"testing"

	"collbench/backend/nccl/fakegpu"
	"collbench/internal/racebuild"
	"collbench/measure"
	"collbench/tunefile"
)

// chunkMachine is protocolMachine whose chunk size matters where its NCCL
// asks the tuner for it (version 2.30 and later): from 1 MiB up a
// transfer in NCCL's own chunks takes 1.3 times what it takes in chunks
// twice as large, the best.
func chunkMachine(t *testing.T, version int) *System {
	t.Setenv("NCCL_TUNER_PLUGIN", "")
	m := fakegpu.HealthyModel(7)
	m.Protocols, m.LatencyUS, m.ChunkCost = true, 5, 0.3
	return gpuSystem(2, fakegpu.Options{Model: m, NCCLVersion: version})
}

// TestTuneFindsTheChunkSize: on an NCCL that asks its tuner for the chunk
// size (2.30), tune tries the leader's algorithm and protocol with chunks
// of a quarter to four times NCCL's, finds twice NCCL's best from 1 MiB up
// (the model's best: LL128, whose chunk the model's NCCL makes 128 KiB, so
// 256 KiB) and nothing below, and writes the bytes it ran with on the
// file's line; --check with that file gets the gain back. On 2.28, which
// asks no tuner for the chunk, no chunk is tried, and a file's chunk is
// refused by name.
func TestTuneFindsTheChunkSize(t *testing.T) {
	racebuild.SkipLongModelRun(t) // 21 s under -race, 2.2 s without
	tn := ncclTune(256<<10, 4<<20)
	tn.Plan.Collectives = []measure.Collective{measure.AllGather}
	tn.Plan.Iters, tn.Plan.Warmup = 2, 0 // the model's clock: no noise to average away
	rep, err := chunkMachine(t, 23007).RunTune(context.Background(), tn)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range rep.Collectives[0].Results {
		best := res.Best.Choice
		switch res.Size {
		case 4 << 20:
			if best.Protocol != "ll128" || best.ChunkX != 2 || res.Gain < 0.15 || res.Best.ChunkBytes != 256<<10 {
				t.Errorf("allgather 4 MiB: best %s (gain %.2f, ran with %d B chunks), want ring/ll128/chunk×2 (256 KiB) beyond noise", best, res.Gain, res.Best.ChunkBytes)
			}
		default:
			if best.ChunkX != 0 && res.Gain > 0 {
				t.Errorf("allgather %d B: best %s (gain %.2f): the chunk matters only from 1 MiB", res.Size, best, res.Gain)
			}
		}
	}
	var file strings.Builder
	es := rep.Entries()
	if err := tunefile.Write(&file, es); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(file.String(), ",ring,ll128,") || !strings.Contains(file.String(), ",262144\n") || !strings.Contains(file.String(), "chunkBytes") {
		t.Fatalf("the file has no line with the chunk:\n%s", file.String())
	}
	path := t.TempDir() + "/tuner.csv"
	if err := os.WriteFile(path, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ck := ncclTune(4 << 20)
	ck.Check, ck.Plan.Collectives, ck.Plan.Iters, ck.Plan.Warmup = path, tn.Plan.Collectives, 2, 0
	got, err := chunkMachine(t, 23007).RunTune(context.Background(), ck)
	if err != nil {
		t.Fatalf("--check: %v", err)
	}
	if r := got.Collectives[0].Results[0]; !r.Confirmed || r.Gain < 0.15 {
		t.Errorf("--check at 4 MiB: gain %.2f (confirmed %v), want the chunk's gain back", r.Gain, r.Confirmed)
	}
	// NCCL 2.28: no chunk tried; the file's chunk refused, by name.
	one := ncclTune(4 << 20)
	one.Plan.Collectives, one.Repeats, one.Plan.Iters, one.Plan.Warmup = tn.Plan.Collectives, 1, 2, 0
	old, err := chunkMachine(t, 22803).RunTune(context.Background(), one)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range old.Collectives[0].Results {
		for _, c := range res.Cells {
			if c.Choice.ChunkX > 0 || c.Choice.Chunk > 0 {
				t.Errorf("NCCL 2.28, allgather %d B: %s tried", res.Size, c.Choice)
			}
		}
	}
	refused, err := chunkMachine(t, 22803).RunTune(context.Background(), ck)
	if err != nil && ExitCode(err) != 1 {
		t.Fatal(err)
	}
	if notes := strings.Join(refused.Notes, "\n"); !strings.Contains(notes, "asks no tuner for the chunk size") {
		t.Errorf("--check of a chunk on NCCL 2.28: notes:\n%s", notes)
	}
}

package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/backend/nccl"
	"collbench/backend/nccl/driver"
	"collbench/backend/nccl/fakegpu"
	"collbench/measure"
)

// gpuSystem is testSystem on a fake HGX H100 of gpus GPUs (NCCL and NVML),
// the algorithm probe off.
func gpuSystem(gpus int, opts fakegpu.Options) *System {
	return machineSystem(fakegpu.HGX("H100", gpus, opts))
}

// machineSystem is testSystem on the fake machine given (NCCL and NVML),
// the algorithm probe off.
func machineSystem(machine *fakegpu.Driver) *System {
	sys, _ := testSystem(EnvProbe + "=off")
	sys.NCCL = func(lib string) (measure.Backend, error) {
		return nccl.Open(nccl.Options{Lib: lib, Driver: machine})
	}
	sys.NVML = func() nvml.Interface { return machine.Machine().NVML() }
	return sys
}

// TestRunBenchOnGPUs runs the engine from Go on the NCCL backend: one rank
// per GPU, every row verified, the GPUs named in the document; a failed
// NCCL call is a run error naming the rank's GPU, with the rows before it
// kept in the document.
func TestRunBenchOnGPUs(t *testing.T) {
	b := testBench(8, 4096, 64<<10)
	b.Backend, b.Ranks = "nccl", 0
	doc, err := gpuSystem(4, fakegpu.Options{}).RunBench(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) != 6 || doc.Summary.WrongTotal != 0 || doc.Environment.Backend.Name != "nccl" || len(doc.Environment.Backend.Devices) != 4 {
		t.Fatalf("%d rows, %d wrong, backend %+v", len(doc.Results), doc.Summary.WrongTotal, doc.Environment.Backend)
	}
	fault := fakegpu.Options{Faults: []fakegpu.Fault{{Call: "ncclBroadcast", Device: 2, Skip: 12, Code: driver.InternalError}}}
	doc, err = gpuSystem(4, fault).RunBench(context.Background(), b)
	var re *RunError
	if !errors.As(err, &re) || ExitCode(err) != 3 || !strings.Contains(err.Error(), "rank 2 (GPU 2, 0000:3a:00.0): ncclBroadcast: internal error") {
		t.Fatalf("exit %d: %v", ExitCode(err), err)
	}
	if doc == nil || len(doc.Results) == 0 || len(doc.Results) >= 6 {
		t.Errorf("rows kept: %v", doc)
	}
}

// TestSweepFirstRowIsWarm: on a machine whose communicators run their first
// operations slow (the fake: the first 20 take 20 µs more, as the GPUs'
// first did), the sweep's first row costs what its last does, both small
// messages of the same latency: the world's warm-up runs before it.
func TestSweepFirstRowIsWarm(t *testing.T) {
	m := fakegpu.HealthyModel(3)
	m.LatencyUS, m.ColdOps, m.ColdUS = 5, 20, 20
	b := testBench(8, 16, 32, 64, 128, 256, 512, 1024)
	b.Backend, b.Ranks = "nccl", 0
	b.Plan.Collectives = []measure.Collective{measure.AllReduce}
	doc, err := gpuSystem(2, fakegpu.Options{Model: m}).RunBench(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) != 8 {
		t.Fatalf("%d rows", len(doc.Results))
	}
	first, last := doc.Results[0].OutOfPlace.TimeUS, doc.Results[7].OutOfPlace.TimeUS
	if first > 1.1*last {
		t.Errorf("the first row took %.1f us, the last %.1f: the cold start is in it", first, last)
	}
}

package cli

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"collbench/backend/cpu"
	"collbench/engine"
	"collbench/measure"
	"collbench/results"
)

// TestBitwiseDivergenceFailsTheRun flips one bit of rank 1's output in the
// second of its --bitwise runs only (a random reduction's output: the
// checks' sums are whole numbers): #wrong stays 0, the table names the
// row, run, rank and element, the JSON file keeps every half's verdict,
// and the run fails (exit 1).
func TestBitwiseDivergenceFailsTheRun(t *testing.T) {
	f, out, errOut := testFactory()
	var seen atomic.Int32
	f.CPUOptions = cpu.Options{AfterOp: func(rank int, c measure.Call, data []byte) {
		if rank != 1 || len(data) < 8 {
			return
		}
		v := math.Float32frombits(binary.LittleEndian.Uint32(data))
		if v != float32(math.Trunc(float64(v))) && seen.Add(1) == 2 {
			data[4] ^= 0x01
		}
	}}
	file := filepath.Join(t.TempDir(), "bits.json")
	code := run(t, f, "allreduce", "--sizes", "4K", "-n", "1", "-w", "0", "--mode", "out-of-place", "--backend", "cpu",
		"--bitwise", "3", "-o", file)
	if code != engine.ExitCheckFailed {
		t.Fatalf("exit %d, want 1; stderr %q", code, errOut)
	}
	for _, want := range []string{"# wrong elements:    0 (OK)", "# bitwise:           other bits in 1 of 1 halves (3 runs each) (FAILED)",
		"# bitwise differs:   allreduce float sum size 4 KiB out-of-place: run 2 on rank 1 differs from run 1 from element 1 (bits XOR 0x00000001)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut.String(), "bitwise: 1 of the rows' halves gave other bits") {
		t.Errorf("stderr: %q", errOut)
	}
	d := readRows(t, file)
	b := d.Results[0].OutOfPlace.Bitwise
	if d.Config.Bitwise != 3 || b == nil || b.Same || b.First == nil || b.First.Rank != 1 || b.First.Run != 2 || b.First.Element != 1 ||
		d.Summary.OK || d.Summary.BitsDiffer != 1 {
		t.Fatalf("config bitwise %d, row %+v, summary %+v", d.Config.Bitwise, b, d.Summary)
	}
}

// TestBitwiseAcrossProcesses runs --bitwise 2 in three processes: every
// rank's digests reach rank 0, and every half is judged the same.
func TestBitwiseAcrossProcesses(t *testing.T) {
	t.Parallel()
	code, out, errOut := launchSelf(t, "-n", "3", "--", "sweep", "--backend", "cpu", "--collectives", "allreduce,reduce,reducescatter",
		"--dtype", "float,bfloat16", "--sizes", "8,4K", "-n", "1", "-w", "0", "--bitwise", "2", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	d, err := results.Read(strings.NewReader(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	halves := 0
	for _, r := range d.Results {
		for _, h := range r.Halves() {
			if b := h.Bitwise; b == nil || !b.Same || b.Runs != 2 {
				t.Errorf("%s %s %d: bitwise %+v", r.Collective, r.DType, r.SizeBytes, b)
			}
			halves++
		}
	}
	if halves != 3*2*2*2 || d.Config.Processes != 3 {
		t.Errorf("%d halves over %d processes, want 24 over 3", halves, d.Config.Processes)
	}
}

// TestBitwiseInASuite: a suite's bitwise key is --bitwise for its rows
// (its command line says so); a suite without it compares nothing.
func TestBitwiseInASuite(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bits.yaml")
	yaml := "name: bits\nbackend: cpu\niterations: 1\nwarmup: 0\nsuites:\n  - collectives: [allreduce]\n    sizes: 4K\n    dtypes: [bf16]\n    bitwise: 2\n" +
		"  - collectives: [allgather]\n    sizes: 4K\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	f, out, errOut := testFactory()
	if code := run(t, f, "run", "--config", cfg, "--output", filepath.Join(dir, "out")); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out.String(), "--dtype bf16 --op sum --mode both -n 1 -w 0 --check 1 --backend cpu --bitwise 2") {
		t.Errorf("the suite's command line does not say --bitwise 2:\n%s", out)
	}
	for _, r := range readRows(t, filepath.Join(dir, "out", "results.json")).Results {
		for _, h := range r.Halves() {
			if compared := h.Bitwise != nil; compared != (r.Collective == "allreduce") || (compared && !h.Bitwise.Same) {
				t.Errorf("%s: bitwise %+v", r.Collective, h.Bitwise)
			}
		}
	}
}

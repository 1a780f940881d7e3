package engine

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"collbench/measure"
	"collbench/results"
)

// testSystem is a machine with a fixed host and clock, the cpu backend
// and no NCCL; only the variables given are set.
func testSystem(env ...string) (*System, *bytes.Buffer) {
	var stderr bytes.Buffer
	return &System{Stderr: &stderr, Args: []string{"collbench", "test"},
		Hostname: func() (string, error) { return "testhost", nil },
		Now:      func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) },
		Environ:  func() []string { return env },
	}, &stderr
}

// testBench is the default benchmark, shortened, on the cpu backend:
// allreduce and broadcast at the sizes given.
func testBench(sizes ...int64) Bench {
	b := DefaultBench()
	b.Backend, b.Ranks, b.Tool = "cpu", 4, "test"
	b.Plan.Collectives = []measure.Collective{measure.AllReduce, measure.Broadcast}
	b.Plan.Sizes, b.Plan.Iters, b.Plan.Warmup = sizes, 2, 1
	return b
}

// TestRunBenchWithoutACommandLine: the engine runs a verified sweep from Go
// alone, hands every row to its hook as it is measured, and returns the
// document with every row checked.
func TestRunBenchWithoutACommandLine(t *testing.T) {
	sys, _ := testSystem()
	b := testBench(8, 4096, 1<<20)
	var seen []int
	ready := false
	b.OnReady = func(c BackendChoice, rank0 bool) error {
		ready = rank0 && c.Backend.Name() == "cpu"
		return nil
	}
	b.OnDocument = func(doc *results.Document, i int, row results.Row) { seen = append(seen, i) }
	doc, err := sys.RunBench(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if !ready {
		t.Error("OnReady was not told this process is rank 0 on the cpu backend")
	}
	if len(doc.Results) != 6 || len(seen) != 6 {
		t.Fatalf("%d rows, %d handed to the hook; want 6 each", len(doc.Results), len(seen))
	}
	for _, r := range doc.Results {
		for _, h := range r.Halves() {
			if h.Wrong == nil || *h.Wrong != 0 || h.TimeUS <= 0 {
				t.Errorf("%s %d B: wrong %v, time %v", r.Collective, r.SizeBytes, h.Wrong, h.TimeUS)
			}
		}
	}
	if doc.Environment.Host != "testhost" || doc.Tool.Version != "test" || doc.Summary.WrongTotal != 0 {
		t.Errorf("document: host %q, tool %q, wrong %d", doc.Environment.Host, doc.Tool.Version, doc.Summary.WrongTotal)
	}
}

// TestRunBenchClassifiesWhatGoesWrong: bad input is a usage error before
// anything runs; a rank that corrupts its output is a failed check, with
// every row kept.
func TestRunBenchClassifiesWhatGoesWrong(t *testing.T) {
	sys, _ := testSystem()
	b := testBench(8)
	b.RankList = "[[0,1],[2,9]]"
	doc, err := sys.RunBench(context.Background(), b)
	var ue *UsageError
	if !errors.As(err, &ue) || doc != nil || ExitCode(err) != ExitUsage {
		t.Fatalf("a rank list naming rank 9 of 4: %v (doc %v)", err, doc != nil)
	}

	sys, _ = testSystem("COLLBENCH_FAULTS=corrupt:2")
	doc, err = sys.RunBench(context.Background(), testBench(4096))
	var ce *CheckFailedError
	if !errors.As(err, &ce) || ExitCode(err) != ExitCheckFailed {
		t.Fatalf("a corrupting rank: %v", err)
	}
	if doc == nil || len(doc.Results) != 2 || doc.Summary.WrongTotal == 0 {
		t.Fatalf("the rows of a failed check are kept: %+v", doc)
	}
}

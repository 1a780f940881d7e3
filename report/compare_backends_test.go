package report

import (
	"strings"
	"testing"

	"collbench/results"
)

// TestCompareTwoBackends checks that runs of two backends side by side say
// which side's rows came from which backend, and that one backend at two
// library versions keeps the version warning.
func TestCompareTwoBackends(t *testing.T) {
	doc := func(name, version string) *results.Document {
		return &results.Document{Environment: results.Environment{Backend: results.Backend{Name: name, Version: version}},
			Results: []results.Row{{Collective: "allreduce", DType: "float", Op: "sum", Root: -1, SizeBytes: 1 << 20, Count: 1 << 18}}}
	}
	c, err := Compare(doc("mpi", "Open MPI v4.1.4"), doc("nccl", "2.28.3"), "mpi.json", "nccl.json", DefaultThresholds())
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(c.Warnings, "\n"); !strings.Contains(w, "the baseline column's rows came from the mpi backend") ||
		!strings.Contains(w, "the current column's from the nccl backend") {
		t.Fatalf("warnings: %q", w)
	}
	c, err = Compare(doc("nccl", "2.27.3"), doc("nccl", "2.28.3"), "a.json", "b.json", DefaultThresholds())
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(c.Warnings, "\n"); !strings.Contains(w, "backend or library version differs") {
		t.Fatalf("warnings: %q", w)
	}
}

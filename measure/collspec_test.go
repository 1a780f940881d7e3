package measure

import (
	"os"
	"strings"
	"testing"
)

// TestEveryCollectiveDescribedOnce: each collective's description is whole
// (names, outcome, shape, bus factor, expected values in a sweep and in
// verify-groups) and lives in a file of its own, coll_<name>.go, so that
// adding one to collbench's measuring is that file, its constant and its
// line in specs.
func TestEveryCollectiveDescribedOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range AllCollectives() {
		s := specs[c]
		if s == nil || s.name == "" || s.outcome == "" || s.bus == nil || s.want == nil || s.groupWant == nil {
			t.Errorf("%d: description incomplete: %+v", c, s)
			continue
		}
		if seen[s.name] {
			t.Errorf("%s described twice", s.name)
		}
		seen[s.name] = true
		file := "coll_" + strings.ReplaceAll(s.name, "-", "") + ".go"
		src, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: no file of its own: %v", s.name, err)
			continue
		}
		if !strings.Contains(string(src), "Spec = collSpec{") || strings.Count(string(src), "collSpec{") != 1 {
			t.Errorf("%s: %s should declare its one description", s.name, file)
		}
	}
}

// TestBusFactorsAsNCCLsBenchmark: the bus factors, from the descriptions,
// are NCCL's benchmark's.
func TestBusFactorsAsNCCLsBenchmark(t *testing.T) {
	for _, tc := range []struct {
		c    Collective
		n    int
		want float64
	}{
		{AllReduce, 4, 1.5}, {AllGather, 4, 0.75}, {ReduceScatter, 8, 0.875}, {Broadcast, 4, 1}, {Reduce, 4, 1},
		{AllToAll, 2, 0.5}, {SendRecv, 4, 1}, {Gather, 4, 0.75}, {Scatter, 4, 0.75}, {AllToAllV, 4, 0.75}, {HyperCube, 8, 0.875},
	} {
		if got := tc.c.BusFactor(tc.n); got != tc.want {
			t.Errorf("%s on %d: %v, want %v", tc.c, tc.n, got, tc.want)
		}
	}
}

package measure

import (
	"math"
	"testing"
)

// TestBandwidthsAreTheReferences: every collective's algbw and busbw, from
// a row's size and time, as NCCL's benchmark computes them (its GetBw of
// each test, from the count it passes the collective): baseBw is
// count × type size (× ranks where it counts every rank's part, × (ranks
// − 1) for hypercube) over the time; busBw is baseBw times the
// collective's factor.
func TestBandwidthsAreTheReferences(t *testing.T) {
	type ref struct{ base, factor func(n float64) float64 }
	one := func(float64) float64 { return 1 }
	all := func(n float64) float64 { return n }
	parts := func(n float64) float64 { return (n - 1) / n }
	refs := map[Collective]ref{
		AllReduce:     {one, func(n float64) float64 { return 2 * (n - 1) / n }},
		AllGather:     {all, parts},
		ReduceScatter: {all, parts},
		Broadcast:     {one, one},
		Reduce:        {one, one},
		AllToAll:      {all, parts},
		SendRecv:      {one, one},
		Gather:        {all, parts},
		Scatter:       {all, parts},
		HyperCube:     {func(n float64) float64 { return n - 1 }, one},
	}
	for c, r := range refs {
		for _, n := range []int{2, 4, 8} {
			for _, size := range []int64{1 << 10, 3<<20 + 12, 1 << 30} {
				const us, esz = 250.0, 4
				count := GeometryFor(c, size, esz, n, 0).Count
				base := float64(count) * esz * r.base(float64(n)) / (us * 1e3)
				alg, bus := Bandwidths(c, size, esz, n, us)
				if math.Abs(alg-base) > 1e-9*base || math.Abs(bus-base*r.factor(float64(n))) > 1e-9*base {
					t.Errorf("%s on %d ranks, %d B: algbw %.6f busbw %.6f, the reference %.6f and %.6f", c, n, size, alg, bus, base, base*r.factor(float64(n)))
				}
			}
		}
	}
	if len(refs) != len(AllCollectives())-1 {
		t.Errorf("%d collectives checked of %d (alltoallv, with uneven parts, has no reference)", len(refs), len(AllCollectives()))
	}
}

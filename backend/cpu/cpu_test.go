package cpu

import (
	"context"
	"fmt"
	"testing"

	"collbench/dtype"
	"collbench/internal/racebuild"
	"collbench/internal/words"
	"collbench/measure"
	"collbench/results"
)

// fewTypes and fewOps are the types and reductions a test over all of
// them takes in make test's race run (racebuild.Few): a float, a 16-bit
// float and an integer; a sum and a comparison.
var (
	fewTypes = []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Int64}
	fewOps   = []measure.ReduceOp{measure.Sum, measure.Max}
)

func runPlan(t *testing.T, b *Backend, n int, p measure.Plan) []results.Row {
	t.Helper()
	w, err := b.Open(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := p.Validate(n); err != nil {
		t.Fatal(err)
	}
	cases, err := p.Cases(b, n)
	if err != nil {
		t.Fatal(err)
	}
	rn := &measure.Runner{World: w, Plan: p, Cases: cases}
	rows, err := rn.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestEveryCollectiveTypeAndOpVerifies runs every combination on several
// rank counts, in both modes, with sizes that do not divide evenly (in
// make test's race run a few types and reductions: racebuild.Few).
func TestEveryCollectiveTypeAndOpVerifies(t *testing.T) {
	counts := []int{1, 2, 3, 4, 5}
	if testing.Short() {
		counts = []int{1, 3, 4} // make test: one rank, an odd count, a power of two; make test-long every count
	}
	for _, n := range counts {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			p := measure.Plan{
				Collectives: runnable(n), DTypes: racebuild.Few(dtype.All(), fewTypes), Ops: racebuild.Few(measure.AllOps(), fewOps),
				Sizes: []int64{8, 1000, 4096 + 24}, Iters: 1, Warmup: 0, Check: 2,
				OutOfPlace: true, InPlace: true, SkipUnsupported: true,
			}
			rows := runPlan(t, New(Options{}), n, p)
			for _, r := range rows {
				for _, h := range r.Halves() {
					if h.Wrong == nil || *h.Wrong != 0 {
						t.Errorf("%s %s %s root %d size %d: wrong %v", r.Collective, r.DType, r.Op, r.Root, r.SizeBytes, h.Wrong)
					}
				}
			}
		})
	}
}

// TestOneRankWorldReportsBandwidth follows the reference benchmark on one
// GPU: algbw is size/time and busbw follows the collective's factor (0 for
// allreduce, algbw for broadcast); only a group of one inside a split has
// no bandwidth.
func TestOneRankWorldReportsBandwidth(t *testing.T) {
	p := measure.Plan{Collectives: []measure.Collective{measure.AllReduce, measure.Broadcast}, DTypes: []dtype.DType{dtype.Float32},
		Ops: []measure.ReduceOp{measure.Sum}, Sizes: []int64{1 << 16}, Iters: 2, Check: 1, OutOfPlace: true, Roots: []int{0}}
	rows := runPlan(t, New(Options{}), 1, p)
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		h := r.OutOfPlace
		if h.TimeUS <= 0 || h.AlgBW != float64(r.SizeBytes)/(h.TimeUS*1e3) {
			t.Fatalf("%s: algbw %v for %d bytes in %v us", r.Collective, h.AlgBW, r.SizeBytes, h.TimeUS)
		}
		want := h.AlgBW // broadcast: factor 1
		if r.Collective == measure.AllReduce.String() {
			want = 0 // 2(n-1)/n with n = 1
		}
		if h.BusBW != want {
			t.Fatalf("%s: busbw %v, want %v", r.Collective, h.BusBW, want)
		}
	}
}

// TestVerifierCatchesOneFlippedElement proves a single corrupted output
// element is counted, in both modes.
func TestVerifierCatchesOneFlippedElement(t *testing.T) {
	for _, mode := range []string{"out-of-place", "in-place"} {
		flips := 0
		b := New(Options{AfterOp: func(rank int, c measure.Call, out []byte) {
			if rank == 1 && flips == 0 {
				out[len(out)-1] ^= 0x01
				flips++
			}
		}})
		p := measure.Plan{Collectives: []measure.Collective{measure.AllGather}, DTypes: []dtype.DType{dtype.Int32},
			Ops: []measure.ReduceOp{measure.Sum}, Sizes: []int64{4096}, Iters: 1, Check: 1,
			OutOfPlace: mode == "out-of-place", InPlace: mode == "in-place"}
		rows := runPlan(t, b, 4, p)
		h := rows[0].Halves()[0]
		if h.Wrong == nil || *h.Wrong != 1 {
			t.Fatalf("%s: #wrong = %v, want 1", mode, h.Wrong)
		}
	}
}

func TestUnsupportedPairs(t *testing.T) {
	b := New(Options{})
	if err := b.Supports(measure.AllReduce, dtype.Float8E4M3, measure.Prod); err == nil {
		t.Error("prod on fp8 accepted")
	}
	if err := b.Supports(measure.AllGather, dtype.Float8E4M3, measure.NoOp); err != nil {
		t.Error(err)
	}
}

// BenchmarkAllReduce measures the CPU backend's allreduce cost; it reports
// busbw in GB/s beside Go's bytes/s.
func BenchmarkAllReduce(b *testing.B) {
	for _, size := range []int64{8, 64 << 10, 4 << 20} {
		for _, n := range []int{2, 4} {
			b.Run(fmt.Sprintf("%s/ranks=%d", words.SizeArg(size), n), func(b *testing.B) {
				w, err := New(Options{}).Open(context.Background(), n)
				if err != nil {
					b.Fatal(err)
				}
				bufs := make([][2]measure.Buffer, n)
				_ = w.Run(func(r measure.Rank) error {
					s, _ := r.Alloc(size)
					d, _ := r.Alloc(size)
					bufs[r.Rank()] = [2]measure.Buffer{s, d}
					return nil
				})
				b.SetBytes(size)
				b.ResetTimer()
				err = w.Run(func(r measure.Rank) error {
					c := measure.Call{Coll: measure.AllReduce, DType: dtype.Float32, Op: measure.Sum, Count: size / 4,
						Send: measure.View{Buf: bufs[r.Rank()][0]}, Recv: measure.View{Buf: bufs[r.Rank()][1]}}
					for i := 0; i < b.N; i++ {
						if err := r.Launch(c); err != nil {
							return err
						}
					}
					return nil
				})
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(size)/sec/1e9*measure.AllReduce.BusFactor(n), "busbw-GB/s")
			})
		}
	}
}

// TestGroupsVerifyAndAggregate runs every collective in several layouts and
// checks the per-group results and the aggregate line.
func TestGroupsVerifyAndAggregate(t *testing.T) {
	b := New(Options{})
	for _, spec := range []string{"pairs", "[[0,1,2],[3]]", "[[1,2,3],[0]]", "stride:2", "singletons", "[[3,0]]"} {
		t.Run(spec, func(t *testing.T) {
			w, err := b.Open(context.Background(), 4)
			if err != nil {
				t.Fatal(err)
			}
			l, err := measure.ParseLayout(spec, 4, nil)
			if err != nil {
				t.Fatal(err)
			}
			colls := measure.AllCollectives()
			if measure.CheckGroups([]measure.Collective{measure.HyperCube}, l.Groups) != nil {
				colls = runnable(3) // a group is not a power of two
			}
			p := measure.Plan{Collectives: colls, DTypes: []dtype.DType{dtype.Float32, dtype.Int8},
				Ops: []measure.ReduceOp{measure.Sum, measure.Min}, Sizes: []int64{1024, 4096 + 12}, Iters: 2, Check: 2,
				OutOfPlace: true, InPlace: true, Roots: []int{0}}
			cases, err := p.Cases(b, 1)
			if err != nil {
				t.Fatal(err)
			}
			rn := &measure.Runner{World: w, Plan: p, Cases: cases, Layout: l}
			rows, err := rn.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if len(r.Groups) != len(l.Groups) {
					t.Fatalf("%d group results for %d groups", len(r.Groups), len(l.Groups))
				}
				for _, h := range r.Halves() {
					if h.Wrong == nil || *h.Wrong != 0 {
						t.Fatalf("%s %s %s: wrong %v", r.Collective, r.DType, r.Op, h.Wrong)
					}
				}
				var sum, slowest float64
				for _, g := range r.Groups {
					h := g.OutOfPlace
					if g.NoBandwidth != (len(g.Ranks) == 1) {
						t.Fatalf("group %v: NoBandwidth %v", g.Ranks, g.NoBandwidth)
					}
					if g.NoBandwidth {
						if h.BusBW != 0 || h.AlgBW != 0 {
							t.Fatalf("a group of one reported bandwidth %+v", h)
						}
						continue
					}
					sum += h.BusBW
					slowest = max(slowest, h.TimeUS)
				}
				if allSingletons(l) {
					continue
				}
				if r.OutOfPlace.BusBW != sum || r.OutOfPlace.TimeUS != slowest {
					t.Fatalf("aggregate %+v, want busbw %v time %v", r.OutOfPlace, sum, slowest)
				}
			}
		})
	}
}

func allSingletons(l measure.Layout) bool {
	for _, g := range l.Groups {
		if len(g) > 1 {
			return false
		}
	}
	return true
}

// TestVerifyGroupsReproducesTheReferenceTable checks the Groups table of the
// measurement conventions: rank r contributes r+1, allreduce sum, 4 ranks.
func TestVerifyGroupsReproducesTheReferenceTable(t *testing.T) {
	b := New(Options{})
	w, err := b.Open(context.Background(), 4)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]float64{
		"[[0,1,2,3]]":   {10, 10, 10, 10},
		"[[0,1],[2,3]]": {3, 3, 7, 7},
		"[[0,1,2],[3]]": {6, 6, 6, 4},
		"[[1,2,3],[0]]": {1, 9, 9, 9},
	}
	var layouts []measure.Layout
	for spec := range want {
		l, err := measure.ParseLayout(spec, 4, nil)
		if err != nil {
			t.Fatal(err)
		}
		layouts = append(layouts, l)
	}
	lvs, err := measure.VerifyGroups(context.Background(), b, w, layouts, nil,
		measure.VerifyOptions{Sizes: []int64{1024}, DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum}})
	if err != nil {
		t.Fatal(err)
	}
	for _, lv := range lvs {
		for _, x := range lv.AllReduce {
			if x.After != want[lv.Name][x.WorldRank] || x.Want != x.After || x.Before != float64(x.WorldRank+1) {
				t.Errorf("%s rank %d: %+v, want after %v", lv.Name, x.WorldRank, x, want[lv.Name][x.WorldRank])
			}
		}
		if len(lv.Collectives) != len(measure.AllCollectives()) {
			t.Fatalf("%s: %d collectives", lv.Name, len(lv.Collectives))
		}
		for _, c := range lv.Collectives {
			if !c.Pass {
				t.Errorf("%s %s failed: %+v", lv.Name, c.Collective, c)
			}
		}
	}
}

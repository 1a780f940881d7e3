package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"collbench/backend/nccl/fakegpu"
	"collbench/dtype"
	"collbench/internal/racebuild"
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

// onMachines runs test on the backend over a fake 4-GPU HGX H100 (with
// opts) and, where this machine has GPUs and NCCL, over them too.
func onMachines(t *testing.T, opts fakegpu.Options, test func(t *testing.T, b *Backend)) {
	t.Run("fake", func(t *testing.T) {
		b, err := Open(Options{Driver: fakegpu.HGX("H100", 4, opts)})
		if err != nil {
			t.Fatal(err)
		}
		test(t, b)
	})
	t.Run("gpu", func(t *testing.T) {
		if os.Getenv("NCCL_NVLS_ENABLE") == "" {
			os.Setenv("NCCL_NVLS_ENABLE", "0")
		}
		b, err := Open(Options{})
		if err != nil {
			t.Skipf("no GPU backend here: %v", err)
		}
		test(t, b)
	})
}

// big is sizes on GPUs; on the fake machine, which computes in Go on the
// host, each size over 64 KiB becomes a sixteenth of itself.
func big(b *Backend, sizes ...int64) []int64 {
	if !fake(b) {
		return sizes
	}
	out := make([]int64, len(sizes))
	for i, s := range sizes {
		out[i] = s
		if s > 64<<10 {
			out[i] = s / 16
		}
	}
	return out
}

// fake reports whether b runs on the fake machine.
func fake(b *Backend) bool {
	_, ok := b.drv.(*fakegpu.Driver)
	return ok
}

func rankCounts(b *Backend) []int {
	var out []int
	for _, n := range []int{1, 2, 4, 8} {
		if n <= b.DefaultRanks() {
			out = append(out, n)
		}
	}
	return out
}

func runOn(t *testing.T, b *Backend, n int, p measure.Plan) {
	t.Helper()
	w, err := b.Open(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rows := runIn(t, b, w, n, p, measure.Layout{})
	t.Logf("%d ranks: %d rows verified", n, len(rows))
}

// runIn runs plan p (its cases for n ranks) on w, split by l, and checks
// that every row was verified with no wrong element.
func runIn(t *testing.T, b *Backend, w measure.World, n int, p measure.Plan, l measure.Layout) []results.Row {
	t.Helper()
	cases, err := p.Cases(b, n)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := (&measure.Runner{World: w, Plan: p, Cases: cases, Layout: l}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, rows)
	return rows
}

// checkRows fails the test where a row was not verified or has wrong
// elements.
func checkRows(t *testing.T, rows []results.Row) {
	t.Helper()
	if len(rows) == 0 {
		t.Fatal("no rows")
	}
	bad := 0
	for _, r := range rows {
		for _, h := range r.Halves() {
			if h.Wrong == nil || *h.Wrong != 0 {
				bad++
				if bad < 20 {
					w := "unchecked"
					if h.Wrong != nil {
						w = fmt.Sprint(*h.Wrong)
					}
					t.Errorf("%s %s %s root %d size %d: #wrong %s", r.Collective, r.DType, r.Op, r.Root, r.SizeBytes, w)
				}
			}
		}
	}
}

// TestGPUEveryCollectiveDTypeOp verifies every collective, dtype and op in
// both modes at sizes that do and do not divide evenly, on 1, 2, 4 (and 8)
// GPUs; the fake machine, which computes in Go on the host, at the small
// sizes only.
//
// In make test's race run it takes a few types and reductions
// (racebuild.Few); unit-model runs the whole matrix without the detector.
func TestGPUEveryCollectiveDTypeOp(t *testing.T) {
	onMachines(t, fakegpu.Options{}, func(t *testing.T, b *Backend) {
		sizes := []int64{8, 1000, 1 << 20, 3<<20 + 12}
		if fake(b) {
			sizes = []int64{8, 1000, 12<<10 + 12}
		}
		for _, n := range rankCounts(b) {
			t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
				p := measure.Plan{Collectives: measure.AllCollectives(), DTypes: racebuild.Few(dtype.All(), fewTypes), Ops: racebuild.Few(measure.AllOps(), fewOps),
					Sizes: sizes, Iters: 1, Warmup: 0, Check: 1,
					OutOfPlace: true, InPlace: true, SkipUnsupported: true}
				if n > 1 {
					p.Roots = []int{n - 1}
				} else {
					// NCCL 2.28.3 on one rank leaves the last elements of an
					// out-of-place avg on float types unwritten when the count
					// is not a multiple of 16 bytes; collbench reports that as
					// #wrong (see TestGPUSingleRankAvgIsChecked), so the sweep
					// here leaves avg out on one rank.
					p.Ops = racebuild.Few([]measure.ReduceOp{measure.Sum, measure.Prod, measure.Max, measure.Min}, fewOps)
				}
				runOn(t, b, n, p)
			})
		}
	})
}

// TestGPUGraphsAndIterStats runs the CUDA-graph and per-iteration paths.
func TestGPUGraphsAndIterStats(t *testing.T) {
	onMachines(t, fakegpu.Options{}, func(t *testing.T, b *Backend) {
		n := b.DefaultRanks()
		p := measure.Plan{Collectives: measure.AllCollectives(), DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
			Sizes: big(b, 8, 1<<20), Iters: 5, Warmup: 1, Check: 1, OutOfPlace: true, InPlace: true,
			IterStats: true, GraphReplays: 3, Roots: []int{0}}
		runOn(t, b, n, p)
	})
}

// TestGPUVerifierCatchesCorruption corrupts one element of one rank's output
// on the device and expects the kernel check to count exactly one.
func TestGPUVerifierCatchesCorruption(t *testing.T) {
	onMachines(t, fakegpu.Options{}, func(t *testing.T, b *Backend) {
		n := min(b.DefaultRanks(), 2)
		w, err := b.Open(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		const count = 1 << 16
		dt := dtype.Float32
		g := measure.GeometryFor(measure.AllReduce, count*4, 4, n, 0)
		dom := measure.DomainFor(measure.AllReduce, dt, measure.Sum, n)
		wrong := make([]int64, n)
		hostWrong := make([]int64, n)
		err = w.Run(func(sr measure.Rank) error {
			r := sr.(*rank)
			send, err := r.Alloc(count * 4)
			if err != nil {
				return err
			}
			recv, err := r.Alloc(count * 4)
			if err != nil {
				return err
			}
			defer func() { _ = r.Free(send) }()
			defer func() { _ = r.Free(recv) }()
			e := measure.Expectation{Coll: measure.AllReduce, DType: dt, Op: measure.Sum, Ranks: n, Rank: r.id, Geom: g, Domain: dom, Seed: 42}
			if err := r.Fill(measure.View{Buf: send}, count, e.InputPattern(r.id)); err != nil {
				return err
			}
			c := measure.Call{Coll: measure.AllReduce, DType: dt, Op: measure.Sum, Count: count, Send: measure.View{Buf: send}, Recv: measure.View{Buf: recv}}
			if err := r.Launch(c); err != nil {
				return err
			}
			if err := r.Sync(); err != nil {
				return err
			}
			if r.id == n-1 {
				// Overwrite element 1000 with NaN bytes.
				if err := r.drv.MemsetAsync(recv.(*devBuf).ptr+4000, 0xff, 4, r.stream); err != nil {
					return err
				}
			}
			if wrong[r.id], err = r.Check(measure.View{Buf: recv}, e); err != nil {
				return err
			}
			// The bounded host-copy fallback must agree with the kernel.
			hostWrong[r.id], err = r.checkViaHost(recv.(*devBuf).ptr, e.OutputCount(), e)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for q := 0; q < n; q++ {
			want := int64(0)
			if q == n-1 {
				want = 1
			}
			if wrong[q] != want || hostWrong[q] != want {
				t.Errorf("rank %d: kernel counted %d, host %d, want %d", q, wrong[q], hostWrong[q], want)
			}
		}
	})
}

// TestGPUOutOfMemoryIsReported asks for more memory than the GPU has.
func TestGPUOutOfMemoryIsReported(t *testing.T) {
	onMachines(t, fakegpu.Options{}, func(t *testing.T, b *Backend) {
		w, err := b.Open(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		err = w.Run(func(r measure.Rank) error {
			_, err := r.Alloc(1 << 50)
			return err
		})
		var oom *measure.OutOfMemoryError
		if !errors.As(err, &oom) || oom.Free <= 0 {
			t.Fatalf("want an out-of-memory error with the free memory, got %v", err)
		}
		t.Log(err)
	})
}

// TestGPUGroups runs every collective inside several layouts and runs
// verify-groups' checks through the library.
func TestGPUGroups(t *testing.T) {
	onMachines(t, fakegpu.Options{}, func(t *testing.T, b *Backend) {
		n := b.DefaultRanks()
		if n < 2 {
			t.Skip("needs two GPUs")
		}
		w, err := b.Open(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		layouts := measure.DefaultLayouts(n, nil)
		lvs, err := measure.VerifyGroups(context.Background(), b, w, layouts, nil,
			measure.VerifyOptions{Sizes: big(b, 1000, 1<<20), DTypes: []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Int64},
				Ops: []measure.ReduceOp{measure.Sum, measure.Min}})
		if err != nil {
			t.Fatal(err)
		}
		for _, lv := range lvs {
			for _, c := range lv.Collectives {
				if !c.Pass {
					t.Errorf("layout %s %s: %+v", lv.Name, c.Collective, c)
				}
			}
			t.Logf("layout %s %v: %d collectives checked", lv.Name, lv.Groups, len(lv.Collectives))
		}
	})
}

// TestGPUSingleRankAvgIsChecked runs single-rank avg on an aligned count,
// which NCCL gets right, and checks it verifies.
func TestGPUSingleRankAvgIsChecked(t *testing.T) {
	onMachines(t, fakegpu.Options{}, func(t *testing.T, b *Backend) {
		p := measure.Plan{Collectives: []measure.Collective{measure.AllReduce, measure.ReduceScatter, measure.Reduce},
			DTypes: []dtype.DType{dtype.Float32, dtype.Float16, dtype.BFloat16, dtype.Float64, dtype.Int32},
			Ops:    []measure.ReduceOp{measure.Avg}, Sizes: big(b, 1<<20, 3<<20), Iters: 1, Check: 1,
			OutOfPlace: true, InPlace: true}
		runOn(t, b, 1, p)
	})
}

// TestGPUAllToAllFallback runs alltoall through grouped send/recv, the path
// taken on libraries without ncclAlltoAll, and verifies it.
func TestGPUAllToAllFallback(t *testing.T) {
	onMachines(t, fakegpu.Options{}, func(t *testing.T, b *Backend) {
		forceGroupedAllToAll = true
		defer func() { forceGroupedAllToAll = false }()
		p := measure.Plan{Collectives: []measure.Collective{measure.AllToAll}, DTypes: []dtype.DType{dtype.Float32, dtype.Int8, dtype.BFloat16},
			Sizes: big(b, 1000, 1<<20), Iters: 2, Check: 2, OutOfPlace: true}
		runOn(t, b, b.DefaultRanks(), p)
	})
}

// TestGPUFeatures runs the features of NCCL's benchmark (-m, -z, -u, -C,
// -N, -R) on every collective and verifies every row.
func TestGPUFeatures(t *testing.T) {
	onMachines(t, fakegpu.Options{}, func(t *testing.T, b *Backend) {
		n := b.DefaultRanks()
		base := measure.Plan{Collectives: measure.AllCollectives(), DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
			Sizes: big(b, 8, 1000, 1<<20), Iters: 3, Warmup: 1, Check: 1, OutOfPlace: true, InPlace: true, Roots: []int{0}}
		if n&(n-1) != 0 {
			base.Collectives = []measure.Collective{measure.AllReduce, measure.Gather, measure.Scatter, measure.AllToAllV}
		}
		for _, tc := range []struct {
			name string
			set  func(*measure.Plan)
		}{
			{"agg 4", func(p *measure.Plan) { p.Agg = 4 }},
			{"blocking 1", func(p *measure.Plan) { p.Blocking = 1 }},
			{"blocking 2", func(p *measure.Plan) { p.Blocking = 2 }},
			{"blocking 3", func(p *measure.Plan) { p.Blocking = 3 }},
			{"misalign 3", func(p *measure.Plan) { p.Misalign = 3 }},
			{"cputime", func(p *measure.Plan) { p.CPUTime = true }},
			{"cycles 3", func(p *measure.Plan) { p.Cycles = 3 }},
			{"register local", func(p *measure.Plan) { p.Register = 1 }},
			{"register symmetric", func(p *measure.Plan) { p.Register = 2 }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := base
				tc.set(&p)
				if p.Register == 2 && !b.lib.Features.Windows {
					t.Skipf("NCCL %s has no symmetric windows", FormatVersion(b.lib.Version))
				}
				runOn(t, b, n, p)
			})
		}
	})
}

// TestGPUProbeRows issues one operation per row, as the algorithm probe
// does, and checks every row was issued in order.
func TestGPUProbeRows(t *testing.T) {
	onMachines(t, fakegpu.Options{}, func(t *testing.T, b *Backend) {
		n := b.DefaultRanks()
		w, err := b.Open(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		p := measure.Plan{Collectives: []measure.Collective{measure.AllReduce, measure.Broadcast, measure.AllToAll}, DTypes: []dtype.DType{dtype.Float32},
			Ops: []measure.ReduceOp{measure.Sum}, Sizes: []int64{8, 1 << 20}, Iters: 1, OutOfPlace: true, Roots: []int{0}}
		cases, err := p.Cases(b, n)
		if err != nil {
			t.Fatal(err)
		}
		var seen []int
		issued, err := measure.ProbeRows(context.Background(), w, p, cases, measure.Layout{}, nil, func(i int) { seen = append(seen, i) })
		if err != nil || issued != 6 || len(seen) != 6 || seen[5] != 5 {
			t.Fatalf("issued %d rows (%v), err %v", issued, seen, err)
		}
	})
}

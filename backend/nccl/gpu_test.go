package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"collbench/dtype"
	"collbench/backend/nccl/fakegpu"
	"collbench/results"
	"collbench/suites"
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

func runOn(t *testing.T, b *Backend, n int, p suites.Plan) {
	t.Helper()
	w, err := b.Open(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rows := runIn(t, b, w, n, p, suites.Layout{})
	t.Logf("%d ranks: %d rows verified", n, len(rows))
}

// runIn runs plan p (its cases for n ranks) on w, split by l, and checks
// that every row was verified with no wrong element.
func runIn(t *testing.T, b *Backend, w suites.World, n int, p suites.Plan, l suites.Layout) []results.Row {
	t.Helper()
	cases, err := p.Cases(b, n)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := (&suites.Runner{World: w, Plan: p, Cases: cases, Layout: l}).Run(context.Background())
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
func TestGPUEveryCollectiveDTypeOp(t *testing.T) {
	onMachines(t, fakegpu.Options{}, func(t *testing.T, b *Backend) {
		sizes := []int64{8, 1000, 1 << 20, 3<<20 + 12}
		if fake(b) {
			sizes = []int64{8, 1000, 12<<10 + 12}
		}
		for _, n := range rankCounts(b) {
			t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
				p := suites.Plan{Collectives: suites.AllCollectives(), DTypes: dtype.All(), Ops: suites.AllOps(),
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
					p.Ops = []suites.ReduceOp{suites.Sum, suites.Prod, suites.Max, suites.Min}
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
		p := suites.Plan{Collectives: suites.AllCollectives(), DTypes: []dtype.DType{dtype.Float32}, Ops: []suites.ReduceOp{suites.Sum},
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
		g := suites.GeometryFor(suites.AllReduce, count*4, 4, n, 0)
		dom := suites.DomainFor(suites.AllReduce, dt, suites.Sum, n)
		wrong := make([]int64, n)
		hostWrong := make([]int64, n)
		err = w.Run(func(sr suites.Rank) error {
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
			e := suites.Expectation{Coll: suites.AllReduce, DType: dt, Op: suites.Sum, Ranks: n, Rank: r.id, Geom: g, Domain: dom, Seed: 42}
			if err := r.Fill(suites.View{Buf: send}, count, e.InputPattern(r.id)); err != nil {
				return err
			}
			c := suites.Call{Coll: suites.AllReduce, DType: dt, Op: suites.Sum, Count: count, Send: suites.View{Buf: send}, Recv: suites.View{Buf: recv}}
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
			if wrong[r.id], err = r.Check(suites.View{Buf: recv}, e); err != nil {
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
		err = w.Run(func(r suites.Rank) error {
			_, err := r.Alloc(1 << 50)
			return err
		})
		var oom *suites.OutOfMemoryError
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
		layouts := suites.DefaultLayouts(n, nil)
		lvs, err := suites.VerifyGroups(context.Background(), b, w, layouts, nil,
			suites.VerifyOptions{Sizes: big(b, 1000, 1<<20), DTypes: []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Int64},
				Ops: []suites.ReduceOp{suites.Sum, suites.Min}})
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
		p := suites.Plan{Collectives: []suites.Collective{suites.AllReduce, suites.ReduceScatter, suites.Reduce},
			DTypes: []dtype.DType{dtype.Float32, dtype.Float16, dtype.BFloat16, dtype.Float64, dtype.Int32},
			Ops:    []suites.ReduceOp{suites.Avg}, Sizes: big(b, 1<<20, 3<<20), Iters: 1, Check: 1,
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
		p := suites.Plan{Collectives: []suites.Collective{suites.AllToAll}, DTypes: []dtype.DType{dtype.Float32, dtype.Int8, dtype.BFloat16},
			Sizes: big(b, 1000, 1<<20), Iters: 2, Check: 2, OutOfPlace: true}
		runOn(t, b, b.DefaultRanks(), p)
	})
}

// TestGPUFeatures runs the features of NCCL's benchmark (-m, -z, -u, -C,
// -N, -R) on every collective and verifies every row.
func TestGPUFeatures(t *testing.T) {
	onMachines(t, fakegpu.Options{}, func(t *testing.T, b *Backend) {
		n := b.DefaultRanks()
		base := suites.Plan{Collectives: suites.AllCollectives(), DTypes: []dtype.DType{dtype.Float32}, Ops: []suites.ReduceOp{suites.Sum},
			Sizes: big(b, 8, 1000, 1<<20), Iters: 3, Warmup: 1, Check: 1, OutOfPlace: true, InPlace: true, Roots: []int{0}}
		if n&(n-1) != 0 {
			base.Collectives = []suites.Collective{suites.AllReduce, suites.Gather, suites.Scatter, suites.AllToAllV}
		}
		for _, tc := range []struct {
			name string
			set  func(*suites.Plan)
		}{
			{"agg 4", func(p *suites.Plan) { p.Agg = 4 }},
			{"blocking 1", func(p *suites.Plan) { p.Blocking = 1 }},
			{"blocking 2", func(p *suites.Plan) { p.Blocking = 2 }},
			{"blocking 3", func(p *suites.Plan) { p.Blocking = 3 }},
			{"misalign 3", func(p *suites.Plan) { p.Misalign = 3 }},
			{"cputime", func(p *suites.Plan) { p.CPUTime = true }},
			{"cycles 3", func(p *suites.Plan) { p.Cycles = 3 }},
			{"register local", func(p *suites.Plan) { p.Register = 1 }},
			{"register symmetric", func(p *suites.Plan) { p.Register = 2 }},
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
		p := suites.Plan{Collectives: []suites.Collective{suites.AllReduce, suites.Broadcast, suites.AllToAll}, DTypes: []dtype.DType{dtype.Float32},
			Ops: []suites.ReduceOp{suites.Sum}, Sizes: []int64{8, 1 << 20}, Iters: 1, OutOfPlace: true, Roots: []int{0}}
		cases, err := p.Cases(b, n)
		if err != nil {
			t.Fatal(err)
		}
		var seen []int
		issued, err := suites.ProbeRows(context.Background(), w, p, cases, suites.Layout{}, nil, func(i int) { seen = append(seen, i) })
		if err != nil || issued != 6 || len(seen) != 6 || seen[5] != 5 {
			t.Fatalf("issued %d rows (%v), err %v", issued, seen, err)
		}
	})
}

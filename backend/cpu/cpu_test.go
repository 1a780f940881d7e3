package cpu

import (
	"context"
	"fmt"
	"testing"

	"collbench/dtype"
	"collbench/results"
	"collbench/suites"
)

func runPlan(t *testing.T, b *Backend, n int, p suites.Plan) []results.Row {
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
	rn := &suites.Runner{World: w, Plan: p, Cases: cases}
	rows, err := rn.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestEveryCollectiveTypeAndOpVerifies runs every combination on several
// rank counts, in both modes, with sizes that do not divide evenly.
func TestEveryCollectiveTypeAndOpVerifies(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			p := suites.Plan{
				Collectives: suites.AllCollectives(), DTypes: dtype.All(), Ops: suites.AllOps(),
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

// TestVerifierCatchesOneFlippedElement proves a single corrupted output
// element is counted, in both modes.
func TestVerifierCatchesOneFlippedElement(t *testing.T) {
	for _, mode := range []string{"out-of-place", "in-place"} {
		flips := 0
		b := New(Options{AfterOp: func(rank int, c suites.Call, out []byte) {
			if rank == 1 && flips == 0 {
				out[len(out)-1] ^= 0x01
				flips++
			}
		}})
		p := suites.Plan{Collectives: []suites.Collective{suites.AllGather}, DTypes: []dtype.DType{dtype.Int32},
			Ops: []suites.ReduceOp{suites.Sum}, Sizes: []int64{4096}, Iters: 1, Check: 1,
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
	if err := b.Supports(suites.AllReduce, dtype.Float8E4M3, suites.Prod); err == nil {
		t.Error("prod on fp8 accepted")
	}
	if err := b.Supports(suites.AllGather, dtype.Float8E4M3, suites.NoOp); err != nil {
		t.Error(err)
	}
}

// BenchmarkAllReduce measures the CPU backend's allreduce cost; it reports
// busbw in GB/s beside Go's bytes/s.
func BenchmarkAllReduce(b *testing.B) {
	for _, size := range []int64{8, 64 << 10, 4 << 20} {
		for _, n := range []int{2, 4} {
			b.Run(fmt.Sprintf("%s/ranks=%d", suites.FormatSize(size), n), func(b *testing.B) {
				w, err := New(Options{}).Open(context.Background(), n)
				if err != nil {
					b.Fatal(err)
				}
				bufs := make([][2]suites.Buffer, n)
				_ = w.Run(func(r suites.Rank) error {
					s, _ := r.Alloc(size)
					d, _ := r.Alloc(size)
					bufs[r.Rank()] = [2]suites.Buffer{s, d}
					return nil
				})
				b.SetBytes(size)
				b.ResetTimer()
				err = w.Run(func(r suites.Rank) error {
					c := suites.Call{Coll: suites.AllReduce, DType: dtype.Float32, Op: suites.Sum, Count: size / 4,
						Send: suites.View{Buf: bufs[r.Rank()][0]}, Recv: suites.View{Buf: bufs[r.Rank()][1]}}
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
				b.ReportMetric(float64(size)/sec/1e9*suites.AllReduce.BusFactor(n), "busbw-GB/s")
			})
		}
	}
}

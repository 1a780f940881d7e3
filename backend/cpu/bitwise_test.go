package cpu

import (
	"encoding/binary"
	"math"
	"sync"
	"testing"

	"collbench/dtype"
	"collbench/measure"
	"collbench/results"
)

// TestBitwiseSameOnEveryReduction runs --bitwise 3 over the reductions of
// the floating-point types, in both modes: the cpu backend's sums are
// taken in one order per size, so every half gives the same bits, and the
// cases --bitwise does not compare carry nothing.
func TestBitwiseSameOnEveryReduction(t *testing.T) {
	p := measure.Plan{Collectives: []measure.Collective{measure.AllReduce, measure.ReduceScatter, measure.Reduce, measure.AllGather},
		DTypes: []dtype.DType{dtype.Float32, dtype.Float16, dtype.BFloat16, dtype.Int32}, Ops: []measure.ReduceOp{measure.Sum},
		Roots: []int{1}, Sizes: []int64{8, 4096 + 24}, Iters: 1, Check: 1, OutOfPlace: true, InPlace: true, Bitwise: 3}
	rows := runPlan(t, New(Options{}), 4, p)
	compared := 0
	for _, r := range rows {
		c, _ := measure.ParseCollective(r.Collective)
		ty, _ := dtype.Parse(r.DType)
		for _, h := range r.Halves() {
			b := h.Bitwise
			switch {
			case !measure.BitwiseApplies(c, ty):
				if b != nil {
					t.Errorf("%s %s: compared bits of a case --bitwise leaves alone", r.Collective, r.DType)
				}
			case b == nil || !b.Same || b.Runs != 3:
				t.Errorf("%s %s %d: bitwise %+v, want the same bits in 3 runs", r.Collective, r.DType, r.SizeBytes, b)
			default:
				compared++
			}
		}
	}
	if compared != 3*3*2*2 {
		t.Errorf("%d halves compared, want 36", compared)
	}
}

// randomOutput says whether a float output holds a random reduction (a
// --bitwise run): the checks' inputs are small integers, whose sums are.
func randomOutput(out []byte) bool {
	if len(out) < 4 {
		return false
	}
	v := math.Float32frombits(binary.LittleEndian.Uint32(out))
	return v != float32(math.Trunc(float64(v)))
}

// TestBitwiseNamesAPlantedDivergence plants, at several ranks and
// collectives, an output bit that flips in one run only (the run-to-run
// check) and one that differs on one rank in every run (the ranks check),
// and finds each where it was planted.
func TestBitwiseNamesAPlantedDivergence(t *testing.T) {
	cases := []struct {
		name       string
		coll       measure.Collective
		rank, elem int
		everyRun   bool
		want       results.BitDivergence
	}{
		{"allreduce rank 0 run 2", measure.AllReduce, 0, 0, false, results.BitDivergence{Check: "run", Run: 2, Rank: 0, Element: 0, XOR: "0x00000001"}},
		{"allreduce rank 3 run 2", measure.AllReduce, 3, 1023, false, results.BitDivergence{Check: "run", Run: 2, Rank: 3, Element: 1023, XOR: "0x00000001"}},
		{"reduce-scatter rank 2 run 2", measure.ReduceScatter, 2, 100, false, results.BitDivergence{Check: "run", Run: 2, Rank: 2, Element: 100, XOR: "0x00000001"}},
		{"reduce root 1 run 2", measure.Reduce, 1, 7, false, results.BitDivergence{Check: "run", Run: 2, Rank: 1, Element: 7, XOR: "0x00000001"}},
		{"allreduce rank 2 every run", measure.AllReduce, 2, 5, true, results.BitDivergence{Check: "ranks", Rank: 2, Other: 0, Element: 5, XOR: "0x00000001"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			seen := 0
			b := New(Options{AfterOp: func(rank int, c measure.Call, out []byte) {
				if rank != tc.rank || !randomOutput(out) {
					return
				}
				mu.Lock()
				seen++
				flip := tc.everyRun || seen == 2
				mu.Unlock()
				if flip {
					out[tc.elem*4] ^= 0x01
				}
			}})
			p := measure.Plan{Collectives: []measure.Collective{tc.coll}, DTypes: []dtype.DType{dtype.Float32},
				Ops: []measure.ReduceOp{measure.Sum}, Roots: []int{1}, Sizes: []int64{16384}, Iters: 1, Check: 1,
				OutOfPlace: true, Bitwise: 3}
			rows := runPlan(t, b, 4, p)
			h := rows[0].OutOfPlace
			if h.Bitwise == nil || h.Bitwise.Same || h.Bitwise.First == nil {
				t.Fatalf("bitwise %+v, want the planted divergence", h.Bitwise)
			}
			if got := *h.Bitwise.First; got != tc.want {
				t.Errorf("first divergence %+v, want %+v", got, tc.want)
			}
			if h.Wrong == nil || *h.Wrong != 0 {
				t.Errorf("#wrong %v: the plant touched a checked output", h.Wrong)
			}
		})
	}
}

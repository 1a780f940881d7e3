package nccl

import (
	"context"
	"testing"

	"collbench/backend/nccl/fakegpu"
	"collbench/dtype"
	"collbench/measure"
)

// crossingsOfARow is how many times each driver entry that crosses from Go
// into C in the real binding was made for one verified row of c at iters
// timed iterations on 4 GPUs of the fake machine.
func crossingsOfARow(t *testing.T, c measure.Collective, iters int) map[string]int64 {
	t.Helper()
	b, drv := openMode(t, 4, measure.ThreadsPerGPU, fakegpu.Options{})
	w, err := b.Open(context.Background(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p := measure.Plan{Collectives: []measure.Collective{c}, DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
		Sizes: []int64{4096}, Iters: iters, Warmup: 2, Check: 1, OutOfPlace: true, Roots: []int{0}}
	cases, err := p.Cases(b, 4)
	if err != nil {
		t.Fatal(err)
	}
	before := drv.Crossings()
	rn := &measure.Runner{World: w, Plan: p, Cases: cases}
	if _, err := rn.Run(context.Background()); err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	after := drv.Crossings()
	for k, v := range before {
		after[k] -= v
	}
	return after
}

// TestCrossingsPerRowDoNotGrowWithIterations pins the NCCL backend's issue
// path for small messages, whose time is the host's: a timed loop is
// handed to C whole (one NCCL call loop, one group loop, and for the
// hypercube one loop of its copy and a group per round), so a row of 100
// timed iterations makes exactly as many crossings from Go into C as a
// row of 10, for every collective. Adding a crossing per operation (an
// event, a group call, a synchronize, the hypercube's rounds issued from
// Go again: 3 per operation on each of 4 ranks) fails here.
func TestCrossingsPerRowDoNotGrowWithIterations(t *testing.T) {
	for _, c := range measure.AllCollectives() {
		few, many := crossingsOfARow(t, c, 10), crossingsOfARow(t, c, 100)
		for k, v := range many {
			if v != few[k] {
				t.Errorf("%s: %d %s crossings for 100 timed iterations, %d for 10: want as many", c, v, k, few[k])
			}
		}
		if total := sum(few); total == 0 || total > 200 {
			t.Errorf("%s: %d crossings for one row of 10 iterations (%v)", c, total, few)
		}
	}
}

func sum(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

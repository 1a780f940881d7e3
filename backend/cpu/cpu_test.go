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

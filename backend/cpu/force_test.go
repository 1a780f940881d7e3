package cpu

import (
	"context"
	"sync"
	"testing"

	"collbench/dtype"
	"collbench/measure"
	"collbench/results"
	"collbench/watchdog"
)

// TestForcedAllReduceRunsAndIsRecorded forces each of allreduce's
// algorithms on 3 and 4 processes (a folded rank and none) at sizes on
// both sides of the default rule's threshold: every element is right and
// every row names the algorithm forced; "" returns to the default rule;
// an algorithm the backend lacks is refused.
func TestForcedAllReduceRunsAndIsRecorded(t *testing.T) {
	names := map[string]string{algoRing: "RING", algoRecursiveDoubling: "RECURSIVE_DOUBLING", "": "RING"}
	for _, n := range []int{3, 4} {
		p := measure.Plan{Collectives: []measure.Collective{measure.AllReduce}, DTypes: []dtype.DType{dtype.Float32},
			Ops: []measure.ReduceOp{measure.Sum}, Sizes: []int64{8, 4 << 10, 1 << 20},
			Iters: 2, Check: 1, OutOfPlace: true, InPlace: true, Seed: 5}
		var mu sync.Mutex
		got := map[string][]results.Row{}
		errs := distRun(t, n, Options{}, nil, func(ctx context.Context, w measure.World) error {
			f := w.(measure.Forcer)
			if cs := f.Choices(measure.AllReduce, n); len(cs) != 2 {
				t.Errorf("allreduce choices %v", cs)
			}
			if cs := f.Choices(measure.Broadcast, n); cs != nil {
				t.Errorf("broadcast has one algorithm, got choices %v", cs)
			}
			if f.Force(measure.AllReduce, "tree") == nil || f.Force(measure.Broadcast, algoRing) == nil {
				t.Error("an algorithm the backend lacks was accepted")
			}
			cases, err := p.Cases(New(Options{}), n)
			if err != nil {
				return err
			}
			for _, algo := range []string{algoRecursiveDoubling, algoRing, ""} {
				if err := f.Force(measure.AllReduce, algo); err != nil {
					return err
				}
				rn := &measure.Runner{World: w, Plan: p, Cases: cases, Board: watchdog.BoardFrom(ctx)}
				rows, err := rn.Run(ctx)
				if err != nil {
					return err
				}
				if w.Ranks()[0].WorldRank() == 0 {
					for i := range rows {
						rows[i].Algorithm = w.(measure.Explainer).Algorithm(measure.AllReduce, rows[i].SizeBytes, n)
					}
					mu.Lock()
					got[algo] = rows
					mu.Unlock()
				}
			}
			return nil
		})
		noErrors(t, errs)
		for algo, rows := range got {
			if len(rows) != 3 || wrongTotal(rows) != 0 {
				t.Fatalf("%d ranks, forced %q: %d rows, %d wrong", n, algo, len(rows), wrongTotal(rows))
			}
			for _, r := range rows {
				if r.Algorithm == nil || r.Algorithm.Algo != names[algo] {
					t.Errorf("%d ranks, %d B, forced %q: the row says %+v", n, r.SizeBytes, algo, r.Algorithm)
				}
			}
		}
		if len(got) != 3 {
			t.Errorf("%d ranks: %d of 3 choices ran", n, len(got))
		}
	}
}

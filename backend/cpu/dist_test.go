package cpu

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"collbench/dtype"
	"collbench/internal/faults"
	"collbench/internal/memcontrol"
	"collbench/internal/racebuild"
	"collbench/measure"
	"collbench/results"
	"collbench/watchdog"
)

// distRun runs fn as every rank of a distributed world of n processes and
// returns each rank's error.
func distRun(t *testing.T, n int, opts Options, hosts []string, fn func(ctx context.Context, w measure.World) error) []error {
	t.Helper()
	ctls := memcontrol.New(n, hosts)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := watchdog.WithBoard(context.Background(), watchdog.NewBoard())
			w, err := New(opts).OpenDistributed(ctx, ctls[r], 0)
			if err != nil {
				errs[r] = err
				return
			}
			defer w.Close()
			errs[r] = fn(ctx, w)
		}()
	}
	wg.Wait()
	return errs
}

// runnable lists the collectives that run on n ranks (hypercube needs a
// power of two).
func runnable(n int) []measure.Collective {
	var out []measure.Collective
	for _, c := range measure.AllCollectives() {
		if !c.PowerOfTwo() || n&(n-1) == 0 {
			out = append(out, c)
		}
	}
	return out
}

// sweepAll runs the plan on every rank of n processes and returns rank 0's rows.
func sweepAll(t *testing.T, n int, opts Options, p measure.Plan, layout measure.Layout) ([]results.Row, []error) {
	t.Helper()
	var rows []results.Row
	var mu sync.Mutex
	errs := distRun(t, n, opts, nil, func(ctx context.Context, w measure.World) error {
		cases, err := p.Cases(New(opts), n)
		if err != nil {
			return err
		}
		rn := &measure.Runner{World: w, Plan: p, Cases: cases, Layout: layout, Board: watchdog.BoardFrom(ctx)}
		rs, err := rn.Run(ctx)
		if w.Ranks()[0].WorldRank() == 0 {
			mu.Lock()
			rows = rs
			mu.Unlock()
		}
		return err
	})
	return rows, errs
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func wrongTotal(rows []results.Row) int64 {
	var w int64
	for _, r := range rows {
		for _, h := range r.Halves() {
			if h.Wrong != nil {
				w += *h.Wrong
			}
		}
	}
	return w
}

// TestDistributedEveryCollectiveVerifies runs every collective across
// processes: every type and op on 2 ranks, a spread of types on 3 to 5,
// and sizes that split unevenly and span several pieces (in make test's
// race run the first type and two reductions of each: racebuild.Few).
func TestDistributedEveryCollectiveVerifies(t *testing.T) {
	type run struct {
		n     int
		types []dtype.DType
		ops   []measure.ReduceOp
		sizes []int64
	}
	runs := []run{
		{2, dtype.All(), measure.AllOps(), []int64{8, 1000, 4096}},
		{3, []dtype.DType{dtype.Int8, dtype.Float16, dtype.Float32, dtype.Float8E4M3}, measure.AllOps(), []int64{8, 1000}},
		{4, []dtype.DType{dtype.BFloat16, dtype.Int64}, measure.AllOps(), []int64{8, 1000}},
		{5, []dtype.DType{dtype.Float64, dtype.Uint8}, []measure.ReduceOp{measure.Sum, measure.Avg, measure.Min}, []int64{8, 1000}},
		{3, []dtype.DType{dtype.Float32}, []measure.ReduceOp{measure.Sum}, []int64{pieceSize*2 + 36}},
	}
	for _, rr := range runs {
		p := measure.Plan{Collectives: runnable(rr.n), DTypes: racebuild.Few(rr.types, rr.types[:1]), Ops: racebuild.Few(rr.ops, rr.ops[:min(2, len(rr.ops))]), Sizes: rr.sizes,
			Iters: 1, Warmup: 0, Check: 1, OutOfPlace: true, InPlace: true, SkipUnsupported: true, Seed: 7}
		rows, errs := sweepAll(t, rr.n, Options{}, p, measure.Layout{})
		noErrors(t, errs)
		if len(rows) == 0 || wrongTotal(rows) != 0 {
			t.Fatalf("n=%d: %d rows, %d wrong", rr.n, len(rows), wrongTotal(rows))
		}
	}
}

// TestRecursiveDoublingVerifies covers small allreduces on more than eight
// ranks, power of two or not.
func TestRecursiveDoublingVerifies(t *testing.T) {
	for _, n := range []int{9, 12, 16} {
		p := measure.Plan{Collectives: []measure.Collective{measure.AllReduce}, DTypes: []dtype.DType{dtype.Float32, dtype.Int32},
			Ops: []measure.ReduceOp{measure.Sum, measure.Avg, measure.Max}, Sizes: []int64{8, 4096, smallAllReduce},
			Iters: 1, Check: 1, OutOfPlace: true, InPlace: true, Seed: 3}
		rows, errs := sweepAll(t, n, Options{}, p, measure.Layout{})
		noErrors(t, errs)
		if len(rows) != 18 || wrongTotal(rows) != 0 {
			t.Fatalf("n=%d: %d rows, %d wrong", n, len(rows), wrongTotal(rows))
		}
	}
}

// TestAlgorithmsByTheirTraffic proves the algorithms by the bytes each rank
// sends per operation, against the bandwidth-optimal bounds for S the
// row's size: 2(n-1)/n·S for allreduce, (n-1)/n·S for allgather,
// reduce-scatter and alltoall, S for broadcast, reduce and sendrecv, each
// plus 1 % for framing.
func TestAlgorithmsByTheirTraffic(t *testing.T) {
	racebuild.SkipLongModelRun(t) // 18 s under -race, 2.4 s without
	bound := map[measure.Collective]func(n float64) float64{
		measure.AllReduce:     func(n float64) float64 { return 2 * (n - 1) / n },
		measure.AllGather:     func(n float64) float64 { return (n - 1) / n },
		measure.ReduceScatter: func(n float64) float64 { return (n - 1) / n },
		measure.AllToAll:      func(n float64) float64 { return (n - 1) / n },
		measure.Broadcast:     func(float64) float64 { return 1 },
		measure.Reduce:        func(float64) float64 { return 1 },
		measure.SendRecv:      func(float64) float64 { return 1 },
		measure.Gather:        func(n float64) float64 { return (n - 1) / n },
		measure.Scatter:       func(n float64) float64 { return (n - 1) / n },
		measure.HyperCube:     func(n float64) float64 { return (n - 1) / n },
	}
	// alltoallv is left out: its parts differ per peer by design.
	step := 1
	if testing.Short() {
		step = 3 // make test: 2, 5 and 8 processes; make test-long every count
	}
	for n := 2; n <= 8; n += step {
		var colls []measure.Collective
		for _, c := range runnable(n) {
			if bound[c] != nil {
				colls = append(colls, c)
			}
		}
		p := measure.Plan{Collectives: colls, DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
			Roots: []int{n - 1}, Sizes: []int64{64 << 10, 1<<20 + 4*12345}, Iters: 2, Warmup: 1, Check: 1, OutOfPlace: true, InPlace: true, Seed: 1}
		rows, errs := sweepAll(t, n, Options{}, p, measure.Layout{})
		noErrors(t, errs)
		if wrongTotal(rows) != 0 {
			t.Fatalf("n=%d: wrong elements", n)
		}
		for _, row := range rows {
			c, _ := measure.ParseCollective(row.Collective)
			limit := bound[c](float64(n)) * float64(row.SizeBytes) * 1.01
			for _, h := range row.Halves() {
				if len(h.RankBytesSent) != n {
					t.Fatalf("n=%d %s: no per-rank byte counts: %+v", n, row.Collective, h)
				}
				var total int64
				for r, b := range h.RankBytesSent {
					if float64(b) > limit {
						t.Errorf("n=%d %s %d B: rank %d sent %d B per operation, bound %.0f", n, row.Collective, row.SizeBytes, r, b, limit)
					}
					total += b
				}
				var recvd int64
				for _, b := range h.RankBytesRecv {
					recvd += b
				}
				if total == 0 || recvd != total {
					t.Errorf("n=%d %s: sent %d B in all, received %d B", n, row.Collective, total, recvd)
				}
			}
		}
	}
}

// TestDistributedGroups runs groups of a split world concurrently, each
// with its own peers, and checks each group's values.
func TestDistributedGroups(t *testing.T) {
	for i, spec := range []string{"[[0,1],[2,3]]", "[[1,2,3],[0]]", "[[0,2],[1],[3]]"} {
		sizes := []int64{4096, 1 << 20}
		if testing.Short() && i > 0 {
			sizes = sizes[:1] // make test: 1 MiB in the first layout only; make test-long in every one
		}
		l, err := measure.ParseLayout(spec, 4, nil)
		if err != nil {
			t.Fatal(err)
		}
		colls := measure.AllCollectives()
		if measure.CheckGroups([]measure.Collective{measure.HyperCube}, l.Groups) != nil {
			colls = colls[:len(colls)-1] // hypercube is the last one
		}
		p := measure.Plan{Collectives: colls, DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
			Roots: []int{0}, Sizes: sizes, Iters: 2, Check: 2, OutOfPlace: true, InPlace: true, Seed: 5}
		rows, errs := sweepAll(t, 4, Options{}, p, l)
		noErrors(t, errs)
		if len(rows) != len(sizes)*len(colls) || wrongTotal(rows) != 0 || len(rows[0].Groups) != len(l.Groups) {
			t.Fatalf("%s: %d rows, %d wrong", spec, len(rows), wrongTotal(rows))
		}
	}
}

// TestCorruptingRankIsCaught plants a rank that flips a bit in everything
// it sends; the ranks that receive from it count wrong elements.
func TestCorruptingRankIsCaught(t *testing.T) {
	fs, err := faults.Parse("corrupt:1")
	if err != nil {
		t.Fatal(err)
	}
	p := measure.Plan{Collectives: []measure.Collective{measure.SendRecv}, DTypes: []dtype.DType{dtype.Int32}, Ops: []measure.ReduceOp{measure.Sum},
		Sizes: []int64{4096}, Iters: 1, Check: 1, OutOfPlace: true, Seed: 2}
	rows, errs := sweepAll(t, 3, Options{Faults: fs}, p, measure.Layout{})
	noErrors(t, errs)
	h := rows[0].OutOfPlace
	if h.Wrong == nil || *h.Wrong == 0 || len(h.Mismatches) == 0 || h.Mismatches[0].Rank != 2 {
		t.Fatalf("rank 2 receives from the corrupting rank 1: %+v", h)
	}
}

// TestSlowLinkIsSlow plants a rate limit on one link and checks that a
// transfer across it takes as long as the rate says.
func TestSlowLinkIsSlow(t *testing.T) {
	fs, err := faults.Parse("slow-link:0-1:20MB/s")
	if err != nil {
		t.Fatal(err)
	}
	p := measure.Plan{Collectives: []measure.Collective{measure.SendRecv}, DTypes: []dtype.DType{dtype.Float32}, Ops: []measure.ReduceOp{measure.Sum},
		Sizes: []int64{2 << 20}, Iters: 2, Check: 1, OutOfPlace: true, Seed: 2}
	rows, errs := sweepAll(t, 2, Options{Faults: fs}, p, measure.Layout{})
	noErrors(t, errs)
	// 2 MiB at 20 MB/s is 105 ms.
	if got := rows[0].OutOfPlace.TimeUS; got < 80e3 {
		t.Fatalf("a 2 MiB send over a 20 MB/s link took %.0f µs", got)
	}
}

// TestHungRankIsAbortable plants a collective that never returns and
// checks that aborting the world releases every rank.
func TestHungRankIsAbortable(t *testing.T) {
	fs, err := faults.Parse("hang:1@3")
	if err != nil {
		t.Fatal(err)
	}
	ctls := memcontrol.New(2, nil)
	worlds := make([]measure.World, 2)
	var wg sync.WaitGroup
	for r := range worlds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := New(Options{Faults: fs}).OpenDistributed(context.Background(), ctls[r], 0)
			if err != nil {
				t.Error(err)
			}
			worlds[r] = w
		}()
	}
	wg.Wait()
	done := make(chan []error)
	go func() {
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r, w := range worlds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rk := w.Ranks()[0]
				b, _ := rk.Alloc(1024)
				call := measure.Call{Coll: measure.AllReduce, DType: dtype.Float32, Op: measure.Sum, Count: 256, Send: measure.View{Buf: b}, Recv: measure.View{Buf: b}}
				for k := 0; k < 10 && errs[r] == nil; k++ {
					errs[r] = rk.Launch(call)
				}
			}()
		}
		wg.Wait()
		done <- errs
	}()
	select {
	case <-done:
		t.Fatal("a hung collective returned before the abort")
	case <-time.After(300 * time.Millisecond):
	}
	for _, w := range worlds {
		w.(measure.Aborter).Abort(fmt.Errorf("watchdog"))
	}
	select {
	case errs := <-done:
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "watchdog") {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("abort did not release the ranks")
	}
}

// TestPeerGoneBeforeConnecting ends one rank's world before any data
// connection exists, at several ranks: the ranks that wait for it to dial
// learn it is gone from its refused port, well before linkTimeout, and an
// error names it.
func TestPeerGoneBeforeConnecting(t *testing.T) {
	t.Parallel()
	const n = 4
	for _, gone := range []int{0, 1, 2} {
		t.Run(fmt.Sprint("rank ", gone), func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			errs := distRun(t, n, Options{}, nil, func(ctx context.Context, w measure.World) error {
				rk := w.Ranks()[0]
				if rk.WorldRank() == gone {
					return w.Close() // its port closes; it never dials
				}
				b, err := rk.Alloc(4096)
				if err != nil {
					return err
				}
				call := measure.Call{Coll: measure.AllReduce, DType: dtype.Float32, Op: measure.Sum, Count: 1024, Send: measure.View{Buf: b}, Recv: measure.View{Buf: b}}
				if err := rk.Launch(call); err != nil {
					return err
				}
				return rk.Sync()
			})
			if el := time.Since(start); el > linkTimeout/4 {
				t.Errorf("the ranks took %v to give up on rank %d (linkTimeout %v)", el, gone, linkTimeout)
			}
			named := false
			for r, err := range errs {
				if r == gone {
					continue
				}
				if err == nil {
					t.Errorf("rank %d finished an allreduce without rank %d", r, gone)
					continue
				}
				named = named || strings.Contains(err.Error(), fmt.Sprintf("rank %d ", gone))
			}
			if !named {
				t.Errorf("no error names rank %d: %v", gone, errs)
			}
		})
	}
}

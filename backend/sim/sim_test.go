package sim

import (
	"context"
	"errors"
	"math"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"collbench/backend/sim/cluster"
	"collbench/dtype"
	"collbench/measure"
	"collbench/results"
)

func newWorld(t *testing.T, faults ...cluster.Fault) (*World, *cluster.Model) {
	t.Helper()
	m := cluster.Defaults()
	m.Hosts, m.GPUsPerHost, m.Fabric.HostsPerLeaf, m.Faults = 4, 4, 2, faults
	w, err := New(&m).Open(context.Background(), m.Ranks())
	if err != nil {
		t.Fatal(err)
	}
	return w.(*World), &m
}

// run measures c on l with every element checked and returns the wrong
// elements of each group.
func run(t *testing.T, w *World, l measure.Layout, c measure.Collective, size int64) []int64 {
	t.Helper()
	rows := measureRows(t, w, l, c, size)
	var out []int64
	if len(rows[0].Groups) == 0 {
		return []int64{*rows[0].OutOfPlace.Wrong}
	}
	for _, g := range rows[0].Groups {
		out = append(out, *g.OutOfPlace.Wrong)
	}
	return out
}

// measureRows measures c on l at size, every element checked and every
// iteration timed (its modelled time).
func measureRows(t *testing.T, w *World, l measure.Layout, c measure.Collective, size int64) []results.Row {
	t.Helper()
	op, root := measure.Sum, -1
	if !c.Reduces() {
		op = measure.NoOp
	}
	if c.Rooted() {
		root = 0
	}
	rn := &measure.Runner{World: w, Layout: l, Plan: measure.Plan{Collectives: []measure.Collective{c}, DTypes: []dtype.DType{dtype.Float32},
		Ops: []measure.ReduceOp{measure.Sum}, Sizes: []int64{size}, Iters: 3, Warmup: 1, Check: 1, OutOfPlace: true, Average: measure.AvgMean, Seed: 3, IterStats: true},
		Cases: []measure.Case{{Coll: c, DType: dtype.Float32, Op: op, Root: root}}}
	rows, err := rn.Run(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	return rows
}

// TestDataIsRight: every collective the model runs computes its held
// elements for real, on the world and on groups; a 64 MiB message holds
// 256 bytes of each buffer.
func TestDataIsRight(t *testing.T) {
	w, _ := newWorld(t)
	pairs := measure.Layout{Spec: "pairs", Groups: [][]int{{0, 4}, {1, 5}, {2, 3}, {6, 7}, {8, 12}, {9, 13}, {10, 11}, {14, 15}}}
	for _, c := range []measure.Collective{measure.AllReduce, measure.Broadcast, measure.SendRecv} {
		for _, l := range []measure.Layout{{}, pairs} {
			for gi, wrong := range run(t, w, l, c, 64<<20) {
				if wrong != 0 {
					t.Errorf("%s on %q group %d: %d wrong elements", c, l.Spec, gi, wrong)
				}
			}
		}
	}
	if _, err := w.Ranks()[0].Alloc(1 << 40); err != nil {
		t.Errorf("a 1 TiB modelled buffer: %v", err)
	}
}

// TestWrongData: a rank that returns wrong data is caught at the ranks it
// delivers to, in each group it is in, and nowhere else.
func TestWrongData(t *testing.T) {
	h, g := 1, 2 // rank 6
	w, _ := newWorld(t, cluster.Fault{Kind: cluster.WrongData, Host: &h, GPU: &g})
	pairs := measure.Layout{Spec: "pairs", Groups: [][]int{{6, 7}, {0, 1}, {2, 3}, {4, 5}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}}
	got := run(t, w, pairs, measure.SendRecv, 4096)
	if got[0] == 0 {
		t.Error("the pair with rank 6: no wrong element")
	}
	for gi, wrong := range got[1:] {
		if wrong != 0 {
			t.Errorf("group %d without rank 6: %d wrong", gi+1, wrong)
		}
	}
	if got := run(t, w, measure.Layout{}, measure.AllReduce, 4096); got[0] == 0 {
		t.Error("the world's allreduce with rank 6: no wrong element")
	}
}

// TestWrongDataMismatchesAreExact: the wrong elements each rank lists after
// an allreduce that rank 6 spoils (in what it delivers: its own output is
// right) are those, with the values, that the
// expectation finds element by element (the model computes a group's
// wanted values once, not once a rank: at 8,192 ranks, once a rank made a
// world's check 8,192 times as long as its operation).
func TestWrongDataMismatchesAreExact(t *testing.T) {
	h, g := 1, 2
	w, m := newWorld(t, cluster.Fault{Kind: cluster.WrongData, Host: &h, GPU: &g})
	n := m.Ranks()
	const count = 1024
	geom := measure.GeometryFor(measure.AllReduce, count*4, 4, n, 0)
	var listed atomic.Int64
	err := w.Run(func(r measure.Rank) error {
		e := measure.Expectation{Coll: measure.AllReduce, DType: dtype.Float32, Op: measure.Sum, Root: -1, Ranks: n, Rank: r.Rank(),
			Geom: geom, Domain: measure.DomainFor(measure.AllReduce, dtype.Float32, measure.Sum, n), Seed: 11}
		send, err := r.Alloc(count * 4)
		if err != nil {
			return err
		}
		recv, err := r.Alloc(count * 4)
		if err != nil {
			return err
		}
		if err := r.Fill(measure.View{Buf: send}, count, e.InputPattern(r.Rank())); err != nil {
			return err
		}
		call := measure.Call{Coll: measure.AllReduce, DType: dtype.Float32, Op: measure.Sum, Root: -1, Count: count, Send: measure.View{Buf: send}, Recv: measure.View{Buf: recv}}
		if err := r.Launch(call); err != nil {
			return err
		}
		wrong, err := r.Check(call.Recv, e)
		if err != nil {
			return err
		}
		got, err := r.(*rank).FindMismatches(call.Recv, e, 1000)
		if err != nil {
			return err
		}
		b := held(call.Recv, e.OutputCount(), 4)
		if want := e.FindMismatches(b, 0, int64(len(b))/4, 1000); (wrong == 0) != (r.Rank() == 6) || int64(len(got)) != wrong || !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d: %d wrong, listed %v, element by element %v", r.Rank(), wrong, got, want)
		}
		listed.Add(int64(len(got)))
		return nil
	})
	if err != nil || listed.Load() == 0 {
		t.Fatalf("%v, %d listed", err, listed.Load())
	}
}

// TestModelledTime: time is the model's, not the host's, and splitting
// the world costs the model's split time.
func TestModelledTime(t *testing.T) {
	w, m := newWorld(t)
	took := func(size int64) float64 {
		t0 := w.Elapsed()
		run(t, w, measure.Layout{}, measure.AllReduce, size)
		return w.Elapsed() - t0
	}
	small, big := took(4096), took(256<<20)
	if small < m.Costs.MeasureS || big <= small {
		t.Errorf("allreduce measurements took %v s (4 KiB) and %v s (256 MiB) modelled: want at least the measurement's cost %v s, and longer for more bytes",
			small, big, m.Costs.MeasureS)
	}
	before := w.Elapsed()
	sw, err := w.Split(measure.Layout{Groups: [][]int{{0, 1}, {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	if d := w.Elapsed() - before; math.Abs(d-m.Costs.SplitS) > 1e-9 {
		t.Errorf("a split cost %v s modelled, want %v", d, m.Costs.SplitS)
	}
}

// TestWaitsEnd: a rank waiting for a member that never comes returns
// when the context ends, and when another rank fails.
func TestWaitsEnd(t *testing.T) {
	m := cluster.Defaults()
	m.Hosts = 1
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	w, err := New(&m).Open(ctx, m.Ranks())
	if err != nil {
		t.Fatal(err)
	}
	call := func(r measure.Rank) measure.Call {
		b, _ := r.Alloc(64)
		return measure.Call{Coll: measure.AllReduce, DType: dtype.Float32, Op: measure.Sum, Count: 16, Send: measure.View{Buf: b}, Recv: measure.View{Buf: b}}
	}
	err = w.Run(func(r measure.Rank) error {
		if r.Rank() == 3 {
			return nil // never joins
		}
		return r.Launch(call(r))
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting for a rank that never came: %v, want the context's deadline", err)
	}
	w2, _ := New(&m).Open(context.Background(), m.Ranks())
	boom := errors.New("rank 5 failed")
	err = w2.Run(func(r measure.Rank) error {
		if r.Rank() == 5 {
			return boom
		}
		return r.Launch(call(r))
	})
	if !errors.Is(err, boom) {
		t.Errorf("a rank failed: %v, want its error", err)
	}
}

// TestBusyFabric: a busy fabric slows what crosses hosts while its window
// lasts, and nothing else: a sendrecv between two hosts in the window
// takes 1/factor of the time it takes before; one within a host, and one
// between hosts after the window, take what they did.
func TestBusyFabric(t *testing.T) {
	timeOf := func(w *World, pair []int) float64 {
		// The pair, and every other rank on its own (as doctor lays out a
		// round); the modelled time of one operation.
		l := measure.Layout{Groups: [][]int{pair}}
		for r := range w.n {
			if r != pair[0] && r != pair[1] {
				l.Groups = append(l.Groups, []int{r})
			}
		}
		return measureRows(t, w, l, measure.SendRecv, 64<<20)[0].Groups[0].OutOfPlace.Iter.P50US
	}
	clean, _ := newWorld(t)
	across, within := timeOf(clean, []int{0, 4}), timeOf(clean, []int{0, 1})
	from := 0.0
	busy, _ := newWorld(t, cluster.Fault{Kind: cluster.BusyFabric, Factor: 0.25, FromS: &from, ForS: 1})
	if got := timeOf(busy, []int{0, 4}); math.Abs(got/across-4) > 0.2 {
		t.Errorf("between hosts in the window: %.1f us against %.1f clean (x%.2f), want x4", got, across, got/across)
	}
	if got := timeOf(busy, []int{0, 1}); math.Abs(got/within-1) > 0.1 {
		t.Errorf("within a host in the window: %.1f us against %.1f clean (x%.2f), want x1", got, within, got/within)
	}
	late := 1e-3
	after, _ := newWorld(t, cluster.Fault{Kind: cluster.BusyFabric, Factor: 0.25, FromS: &late, ForS: 1e-6})
	timeOf(after, []int{0, 1}) // the ranks' clocks pass the window's start
	timeOf(after, []int{0, 1})
	if got := timeOf(after, []int{0, 4}); math.Abs(got/across-1) > 0.1 {
		t.Errorf("between hosts after the window: %.1f us against %.1f clean (x%.2f), want x1", got, across, got/across)
	}
}

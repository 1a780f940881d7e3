package measure

import (
	"fmt"
	"math"
	"testing"

	"collbench/dtype"
)

// TestExpectedValuesExact checks, for every dtype, op and rank count, that
// inputs and expected outputs are exactly representable and that every
// partial reduction in any order stays exact, so results cannot depend on
// the order a library adds in.
func TestExpectedValuesExact(t *testing.T) {
	for _, dt := range dtype.All() {
		for _, op := range AllOps() {
			for _, n := range []int{1, 2, 3, 4, 7, 8, 16, 64} {
				t.Run(fmt.Sprintf("%v/%v/n%d", dt, op, n), func(t *testing.T) {
					d := DomainFor(AllReduce, dt, op, n)
					buf := make([]byte, 8)
					for idx := int64(0); idx < 500; idx++ {
						// forward and backward partial reductions
						fwd, bwd := math.NaN(), math.NaN()
						for r := 0; r < n; r++ {
							v := d.Value(3, r, n, idx)
							if rt := roundTrip(dt, buf, v); rt != v {
								t.Fatalf("input %v not representable as %v", v, dt)
							}
							fwd = combine(op, fwd, v)
							w := d.Value(3, n-1-r, n, idx)
							bwd = combine(op, bwd, w)
							if op != Avg {
								if rt := roundTrip(dt, buf, fwd); rt != fwd {
									t.Fatalf("partial %v not exact in %v (domain %+v)", fwd, dt, d)
								}
							}
						}
						e := Expectation{Coll: AllReduce, DType: dt, Op: op, Ranks: n, Domain: d, Seed: 3,
							Geom: Geometry{Count: 500, SendCount: 500, RecvCount: 500}}
						want, tol := e.Want(idx)
						if op == Avg {
							if !dt.IsFloat() && want != math.Trunc(fwd/float64(n)) {
								t.Fatalf("int avg want %v, sum %v", want, fwd)
							}
							continue
						}
						if tol != 0 || want != fwd || want != bwd {
							t.Fatalf("want %v (tol %v), forward %v, backward %v", want, tol, fwd, bwd)
						}
						if rt := roundTrip(dt, buf, want); rt != want {
							t.Fatalf("expected %v not representable in %v", want, dt)
						}
					}
				})
			}
		}
	}
}

func roundTrip(dt dtype.DType, buf []byte, v float64) float64 {
	dt.Put(buf, 0, v)
	return dt.Get(buf, 0)
}

func combine(op ReduceOp, acc, v float64) float64 {
	if math.IsNaN(acc) {
		return v
	}
	switch op {
	case Prod:
		return acc * v
	case Max:
		return math.Max(acc, v)
	case Min:
		return math.Min(acc, v)
	}
	return acc + v
}

// TestExpectationsPerCollective checks where each collective's outputs come from.
func TestExpectationsPerCollective(t *testing.T) {
	n := 4
	dt := dtype.Int32
	size := int64(4 * 16 * 4) // 16 elements per rank part
	for _, c := range AllCollectives() {
		op := NoOp
		if c.Reduces() {
			op = Sum
		}
		d := DomainFor(c, dt, op, n)
		in := func(r int, i int64) float64 { return d.Value(9, r, n, i) }
		for q := 0; q < n; q++ {
			g := GeometryFor(c, size, dt.Size(), n, q)
			e := Expectation{Coll: c, DType: dt, Op: op, Root: 2, Ranks: n, Rank: q, Geom: g, Domain: d, Seed: 9}
			if (c == Reduce || c == Gather) && q != 2 {
				if e.Checked() || e.OutputCount() != 0 {
					t.Errorf("%v: non-root rank %d should not be checked", c, q)
				}
				continue
			}
			for i := int64(0); i < e.OutputCount(); i++ {
				var want float64
				switch c {
				case AllReduce, Reduce:
					for r := 0; r < n; r++ {
						want += in(r, i)
					}
				case ReduceScatter:
					for r := 0; r < n; r++ {
						want += in(r, int64(q)*g.RecvCount+i)
					}
				case Broadcast:
					want = in(2, i)
				case AllGather, Gather, HyperCube:
					want = in(int(i/g.SendCount), i%g.SendCount)
				case Scatter:
					want = in(2, int64(q)*g.RecvCount+i)
				case AllToAllV:
					// Walk the senders' parts in rank order.
					var off int64
					for p := 0; p < n; p++ {
						k := VCount(g.Count, dt.Size(), p, q, n)
						if i < off+k {
							want = in(p, VDispl(g.Count, dt.Size(), p, q, n)+i-off)
							break
						}
						off += k
					}
				case AllToAll:
					want = in(int(i/g.Count), int64(q)*g.Count+i%g.Count)
				case SendRecv:
					want = in((q+n-1)%n, i)
				}
				if got, _ := e.Want(i); got != want {
					t.Fatalf("%v rank %d element %d: want %v, expectation says %v", c, q, i, want, got)
				}
			}
		}
	}
}

func TestCountWrongFindsEachBadElement(t *testing.T) {
	dt := dtype.Float32
	n := 3
	g := GeometryFor(AllReduce, 400, dt.Size(), n, 0)
	e := Expectation{Coll: AllReduce, DType: dt, Op: Sum, Ranks: n, Geom: g, Domain: DomainFor(AllReduce, dt, Sum, n), Seed: 5}
	buf := make([]byte, g.RecvCount*4)
	for i := int64(0); i < g.RecvCount; i++ {
		w, _ := e.Want(i)
		dt.Put(buf, i, w)
	}
	if w := e.CountWrong(buf, 0, g.RecvCount); w != 0 {
		t.Fatalf("correct buffer has %d wrong", w)
	}
	dt.Put(buf, 7, 1e9)
	dt.Put(buf, 50, math.NaN())
	if w := e.CountWrong(buf, 0, g.RecvCount); w != 2 {
		t.Fatalf("two bad elements counted as %d", w)
	}
}

func TestAvgTolerance(t *testing.T) {
	e := Expectation{Coll: AllReduce, DType: dtype.Float16, Op: Avg, Ranks: 3,
		Domain: DomainFor(AllReduce, dtype.Float16, Avg, 3), Seed: 1, Geom: Geometry{RecvCount: 10}}
	want, tol := e.Want(0)
	if tol <= 0 {
		t.Fatal("float avg needs a tolerance")
	}
	if !e.Matches(0, want+tol) || e.Matches(0, want+tol*2+1) {
		t.Fatalf("tolerance %v around %v misapplied", tol, want)
	}
	ei := e
	ei.DType = dtype.Int32
	if _, tol := ei.Want(0); tol != 0 {
		t.Fatal("integer avg must be exact")
	}
}

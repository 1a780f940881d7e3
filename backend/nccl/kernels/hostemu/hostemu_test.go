package hostemu

import (
	"bytes"
	"fmt"
	"testing"

	"collbench/dtype"
	"collbench/measure"
)

// TestKernelsMatchGoReference fills buffers with the kernel and with Go and
// compares bytes, then checks correct and corrupted outputs with both.
func TestKernelsMatchGoReference(t *testing.T) {
	const size = 3000
	for _, c := range measure.AllCollectives() {
		for _, dt := range dtype.All() {
			ops := []measure.ReduceOp{measure.NoOp}
			if c.Reduces() {
				ops = measure.AllOps()
			}
			for _, op := range ops {
				if dt.IsFP8() && op == measure.Prod {
					continue
				}
				for _, n := range []int{1, 3, 4, 8} {
					t.Run(fmt.Sprintf("%v/%v/%v/n%d", c, dt, op, n), func(t *testing.T) {
						compareOne(t, c, dt, op, n, size)
					})
				}
			}
		}
	}
}

func compareOne(t *testing.T, c measure.Collective, dt dtype.DType, op measure.ReduceOp, n int, size int64) {
	dom := measure.DomainFor(c, dt, op, n)
	root := n - 1
	for q := 0; q < n; q++ {
		g := measure.GeometryFor(c, size, dt.Size(), n, q)
		e := measure.Expectation{Coll: c, DType: dt, Op: op, Root: root, Ranks: n, Rank: q, Geom: g, Domain: dom, Seed: 77}
		// Inputs: kernel and Go must write identical bytes.
		p := e.InputPattern(q)
		a := make([]byte, g.SendCount*int64(dt.Size()))
		b := make([]byte, len(a))
		Fill(a, g.SendCount, p)
		p.FillHost(b, g.SendCount)
		if !bytes.Equal(a, b) {
			t.Fatalf("rank %d: kernel fill differs from Go", q)
		}
		// Outputs: the exact expected values pass; one changed element fails.
		cnt := e.OutputCount()
		out := make([]byte, max(cnt, 1)*int64(dt.Size()))
		for i := int64(0); i < cnt; i++ {
			w, _ := e.Want(i)
			dt.Put(out, i, w)
		}
		if got, want := Check(out, e), e.CountWrong(out, 0, cnt); got != 0 || want != 0 {
			t.Fatalf("rank %d: correct output counted wrong: kernel %d, Go %d", q, got, want)
		}
		if cnt > 0 {
			i := cnt / 2
			w, tol := e.Want(i)
			dt.Put(out, i, w+4*tol+3)
			if d := dt.Get(out, i) - w; d >= -tol && d <= tol { // rounded away in a narrow type
				for k := int64(0); k < int64(dt.Size()); k++ {
					out[i*int64(dt.Size())+k] = 0xff // NaN for floats
				}
			}
			if got, want := Check(out, e), e.CountWrong(out, 0, cnt); got != want || got != 1 {
				t.Fatalf("rank %d: one bad element: kernel %d, Go %d", q, got, want)
			}
		}
	}
}

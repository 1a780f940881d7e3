package mpi

import (
	"errors"
	"testing"

	"collbench/dtype"
	"collbench/measure"
)

// TestSupports checks the mpi backend's rules: reductions on MPI's own
// types with sum, prod, max and min; no average; no reduction of a type MPI
// lacks; every collective that only moves data on every type, the types MPI
// lacks as raw bytes.
func TestSupports(t *testing.T) {
	cases := []struct {
		c     measure.Collective
		t     dtype.DType
		op    measure.ReduceOp
		ok    bool
		bytes bool
	}{
		{measure.AllReduce, dtype.Float32, measure.Sum, true, false},
		{measure.ReduceScatter, dtype.Int8, measure.Prod, true, false},
		{measure.Reduce, dtype.Uint64, measure.Min, true, false},
		{measure.AllReduce, dtype.Float64, measure.Avg, false, false},
		{measure.AllReduce, dtype.Float16, measure.Sum, false, true},
		{measure.Reduce, dtype.BFloat16, measure.Max, false, true},
		{measure.ReduceScatter, dtype.Float8E4M3, measure.Sum, false, true},
		{measure.AllGather, dtype.BFloat16, measure.NoOp, true, true},
		{measure.AllToAllV, dtype.Float8E5M2, measure.NoOp, true, true},
		{measure.Broadcast, dtype.Int32, measure.NoOp, true, false},
	}
	for _, c := range cases {
		err := Supports(c.c, c.t, c.op)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, measure.ErrUnsupported)) {
			t.Errorf("%s %s %s: %v, want supported=%v", c.c, c.t, c.op, err, c.ok)
		}
		if AsBytes(c.t) != c.bytes {
			t.Errorf("%s: as bytes %v, want %v", c.t, AsBytes(c.t), c.bytes)
		}
	}
	ms := Matrices("no GPU buffers here")
	if len(ms) != 2 || ms[0].Buffer != "host" || ms[1].Buffer != "device" || ms[1].Note == "" {
		t.Fatalf("matrices: %+v", ms)
	}
	cell := func(m measure.SupportMatrix, coll, ty string) string {
		for _, r := range m.Rows {
			if r.Collective == coll {
				for i, d := range m.DTypes {
					if d == ty {
						return r.Cells[i]
					}
				}
			}
		}
		return "?"
	}
	for _, c := range []struct{ coll, ty, want string }{
		{"allreduce", "float", "no avg"}, {"allreduce", "half", "-"}, {"allgather", "bfloat16", "bytes"},
		{"alltoall", "int8", "yes"}, {"hypercube", "double", "yes"},
	} {
		if got := cell(ms[0], c.coll, c.ty); got != c.want {
			t.Errorf("host %s %s: %q, want %q", c.coll, c.ty, got, c.want)
		}
		if got := cell(ms[1], c.coll, c.ty); got != "-" {
			t.Errorf("device %s %s: %q, want -", c.coll, c.ty, got)
		}
	}
}

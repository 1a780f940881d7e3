package mpi

import (
	"errors"
	"testing"

	"collbench/dtype"
	"collbench/suites"
)

// TestSupports checks the mpi backend's rules: reductions on MPI's own
// types with sum, prod, max and min; no average; no reduction of a type MPI
// lacks; every collective that only moves data on every type, the types MPI
// lacks as raw bytes.
func TestSupports(t *testing.T) {
	cases := []struct {
		c     suites.Collective
		t     dtype.DType
		op    suites.ReduceOp
		ok    bool
		bytes bool
	}{
		{suites.AllReduce, dtype.Float32, suites.Sum, true, false},
		{suites.ReduceScatter, dtype.Int8, suites.Prod, true, false},
		{suites.Reduce, dtype.Uint64, suites.Min, true, false},
		{suites.AllReduce, dtype.Float64, suites.Avg, false, false},
		{suites.AllReduce, dtype.Float16, suites.Sum, false, true},
		{suites.Reduce, dtype.BFloat16, suites.Max, false, true},
		{suites.ReduceScatter, dtype.Float8E4M3, suites.Sum, false, true},
		{suites.AllGather, dtype.BFloat16, suites.NoOp, true, true},
		{suites.AllToAllV, dtype.Float8E5M2, suites.NoOp, true, true},
		{suites.Broadcast, dtype.Int32, suites.NoOp, true, false},
	}
	for _, c := range cases {
		err := Supports(c.c, c.t, c.op)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, suites.ErrUnsupported)) {
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
	cell := func(m suites.SupportMatrix, coll, ty string) string {
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

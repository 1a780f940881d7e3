// Package mpi is the MPI backend: every collective collbench has, on host
// memory, through the MPI library the process was started with (Open MPI,
// over UCX where it runs). One rank per process under mpirun; the calls
// themselves are in mpi.go (build tag mpi); this file holds what every
// build needs: the backend's name and the rules of what it can run.
package mpi

import (
	"fmt"

	"collbench/dtype"
	"collbench/measure"
)

// Name is the backend's name, as --backend takes it.
const Name = "mpi"

// native reports whether MPI has a type for t: the C integer types of
// fixed width, float and double. Open MPI 4.1 has no half, bfloat16 or
// 8-bit float type.
func native(t dtype.DType) bool {
	switch t {
	case dtype.Int8, dtype.Uint8, dtype.Int32, dtype.Uint32, dtype.Int64, dtype.Uint64, dtype.Float32, dtype.Float64:
		return true
	}
	return false
}

// AsBytes reports whether a collective that only moves data carries t as
// raw bytes (MPI_BYTE): exact, since nothing is computed on the elements.
func AsBytes(t dtype.DType) bool { return !native(t) }

// Supports says why the mpi backend cannot run c on t with op: a reduction
// needs a type MPI has, and MPI has no average. Nothing is converted.
func Supports(c measure.Collective, t dtype.DType, op measure.ReduceOp) error {
	if !c.Reduces() {
		return nil
	}
	if !native(t) {
		return fmt.Errorf("%w: MPI has no %s type to reduce (the mpi backend reduces int8, uint8, int32, uint32, int64, uint64, float32 and float64; it never converts)",
			measure.ErrUnsupported, t)
	}
	if op == measure.Avg {
		return fmt.Errorf("%w: MPI has no average op (valid ops on the mpi backend: sum, prod, max, min)", measure.ErrUnsupported)
	}
	return nil
}

// Matrices are the mpi backend's support matrices: host memory, and GPU
// memory, which it does not use (note says why).
func Matrices(deviceNote string) []measure.SupportMatrix {
	return []measure.SupportMatrix{
		measure.BuildSupport(Name, "host", "", Supports, AsBytes),
		measure.BuildSupport(Name, "device", deviceNote, nil, nil),
	}
}

// Package hostemu compiles the GPU fill and check kernels (../verify.cu) for
// the host, so tests can prove they agree with the Go reference in measure
// without a GPU, and so the fake GPU machine (backend/nccl/fakegpu) runs them. Only
// tests import it.
package hostemu

/*
#cgo CFLAGS: -O2 -DCB_HOST -I${SRCDIR}/..
#include "verify.cu"
*/
import "C"

import (
	"unsafe"

	"collbench/measure"
)

// Fill runs cb_fill over buf for pattern p.
func Fill(buf []byte, count int64, p measure.Pattern) {
	if count == 0 {
		return
	}
	d := p.Domain
	C.cb_fill(unsafe.Pointer(&buf[0]), C.u64(count), C.int(p.DType), C.int(d.Kind), C.i64(d.Lo), C.i64(d.Hi),
		cbool(d.Signed), C.u64(p.Seed), C.int(p.Ranks), C.int(p.Rank))
}

// Check runs cb_check over buf for expectation e and returns the wrong count.
func Check(buf []byte, e measure.Expectation) int64 {
	n := e.OutputCount()
	if n == 0 {
		return 0
	}
	var wrong C.u64
	_, tol := e.Want(0)
	d := e.Domain
	g := e.Geom
	C.cb_check(unsafe.Pointer(&buf[0]), C.u64(n), C.int(e.DType), C.int(e.Coll), C.int(e.Op), C.int(e.Root), C.int(e.Rank),
		C.i64(g.SendCount), C.i64(g.Count), C.i64(g.RecvCount),
		C.int(d.Kind), C.i64(d.Lo), C.i64(d.Hi), cbool(d.Signed), C.u64(e.Seed), C.int(e.Ranks), C.double(tol), &wrong)
	return int64(wrong)
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// FillArgs runs cb_fill over dst with the parameters of a launch, in the
// kernel's order after the pointer: count, dtype, domain kind, lo, hi,
// signed, seed, ranks, rank.
func FillArgs(dst []byte, count uint64, t, kind int32, lo, hi int64, sgn int32, seed uint64, n, rank int32) {
	if count == 0 {
		return
	}
	C.cb_fill(unsafe.Pointer(&dst[0]), C.u64(count), C.int(t), C.int(kind), C.i64(lo), C.i64(hi), C.int(sgn), C.u64(seed), C.int(n), C.int(rank))
}

// CheckArgs runs cb_check over src with the parameters of a launch, in the
// kernel's order after the pointer and before the counter, and returns the
// number of wrong elements it counted.
func CheckArgs(src []byte, count uint64, t, coll, op, root, rank int32, sendcount, ccount, recvcount int64,
	kind int32, lo, hi int64, sgn int32, seed uint64, n int32, tol float64) uint64 {
	if count == 0 {
		return 0
	}
	var wrong C.u64
	C.cb_check(unsafe.Pointer(&src[0]), C.u64(count), C.int(t), C.int(coll), C.int(op), C.int(root), C.int(rank),
		C.i64(sendcount), C.i64(ccount), C.i64(recvcount), C.int(kind), C.i64(lo), C.i64(hi), C.int(sgn), C.u64(seed), C.int(n), C.double(tol), &wrong)
	return uint64(wrong)
}

// Package hostemu compiles the GPU fill and check kernels (../verify.cu) for
// the host, so tests can prove they agree with the Go reference in suites
// without a GPU. Only tests import it.
package hostemu

/*
#cgo CFLAGS: -O2 -DCB_HOST -I${SRCDIR}/..
#include "verify.cu"
*/
import "C"

import (
	"unsafe"

	"collbench/suites"
)

// Fill runs cb_fill over buf for pattern p.
func Fill(buf []byte, count int64, p suites.Pattern) {
	if count == 0 {
		return
	}
	d := p.Domain
	C.cb_fill(unsafe.Pointer(&buf[0]), C.u64(count), C.int(p.DType), C.int(d.Kind), C.i64(d.Lo), C.i64(d.Hi),
		cbool(d.Signed), C.u64(p.Seed), C.int(p.Ranks), C.int(p.Rank))
}

// Check runs cb_check over buf for expectation e and returns the wrong count.
func Check(buf []byte, e suites.Expectation) int64 {
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

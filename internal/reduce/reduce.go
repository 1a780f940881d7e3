// Package reduce combines buffers of any collbench dtype elementwise, the
// way a reduction collective does: the CPU backend reduces with it and the
// fake GPU machine computes its collectives' results with it.
package reduce

import (
	"sync"
	"unsafe"

	"collbench/dtype"
)

type native interface {
	~int8 | ~uint8 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

func view[T native](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

func reduceNative[T native](dst, src []T, op dtype.ReduceOp) {
	src = src[:len(dst)]
	switch op {
	case dtype.Sum, dtype.Avg:
		for i := range dst {
			dst[i] += src[i]
		}
	case dtype.Prod:
		for i := range dst {
			dst[i] *= src[i]
		}
	case dtype.Max:
		for i := range dst {
			dst[i] = max(dst[i], src[i])
		}
	case dtype.Min:
		for i := range dst {
			dst[i] = min(dst[i], src[i])
		}
	}
}

func divideNative[T native](dst []T, n int) {
	d := T(n)
	for i := range dst {
		dst[i] /= d
	}
}

func apply32(a, b float32, op dtype.ReduceOp) float32 {
	switch op {
	case dtype.Prod:
		return a * b
	case dtype.Max:
		return max(a, b)
	case dtype.Min:
		return min(a, b)
	}
	return a + b
}

// Into combines src into dst elementwise: dst = dst op src. Avg sums;
// Divide finishes it.
func Into(dst, src []byte, t dtype.DType, op dtype.ReduceOp) {
	switch t {
	case dtype.Int8:
		reduceNative(view[int8](dst), view[int8](src), op)
	case dtype.Uint8:
		reduceNative(view[uint8](dst), view[uint8](src), op)
	case dtype.Int32:
		reduceNative(view[int32](dst), view[int32](src), op)
	case dtype.Uint32:
		reduceNative(view[uint32](dst), view[uint32](src), op)
	case dtype.Int64:
		reduceNative(view[int64](dst), view[int64](src), op)
	case dtype.Uint64:
		reduceNative(view[uint64](dst), view[uint64](src), op)
	case dtype.Float32:
		reduceNative(view[float32](dst), view[float32](src), op)
	case dtype.Float64:
		reduceNative(view[float64](dst), view[float64](src), op)
	case dtype.Float16:
		d, s := view[uint16](dst), view[uint16](src)[:len(view[uint16](dst))]
		for i := range d {
			d[i] = dtype.Float32ToHalf(apply32(dtype.HalfToFloat32(d[i]), dtype.HalfToFloat32(s[i]), op))
		}
	case dtype.BFloat16:
		d, s := view[uint16](dst), view[uint16](src)[:len(view[uint16](dst))]
		for i := range d {
			d[i] = dtype.Float32ToBF16(apply32(dtype.BF16ToFloat32(d[i]), dtype.BF16ToFloat32(s[i]), op))
		}
	case dtype.Float8E4M3, dtype.Float8E5M2:
		tab := fp8Table(t, op)
		s := src[:len(dst)]
		for i := range dst {
			dst[i] = tab[int(dst[i])<<8|int(s[i])]
		}
	default:
		n := int64(len(dst) / t.Size())
		for i := int64(0); i < n; i++ {
			t.Put(dst, i, float64(apply32(float32(t.Get(dst, i)), float32(t.Get(src, i)), op)))
		}
	}
}

// fp8Tables holds, per 8-bit float type and op, the result of every pair of
// operands: a reduction is then one lookup per element.
var (
	fp8Once   sync.Once
	fp8Tables map[fp8Key]*[1 << 16]uint8
)

type fp8Key struct {
	t  dtype.DType
	op dtype.ReduceOp
}

func fp8Table(t dtype.DType, op dtype.ReduceOp) *[1 << 16]uint8 {
	fp8Once.Do(func() {
		fp8Tables = map[fp8Key]*[1 << 16]uint8{}
		for _, ft := range []dtype.DType{dtype.Float8E4M3, dtype.Float8E5M2} {
			for _, o := range dtype.AllOps() {
				tab := new([1 << 16]uint8)
				for a := 0; a < 256; a++ {
					for b := 0; b < 256; b++ {
						x := float32(ft.Get([]byte{byte(a)}, 0))
						y := float32(ft.Get([]byte{byte(b)}, 0))
						var out [1]byte
						ft.Put(out[:], 0, float64(apply32(x, y, o)))
						tab[a<<8|b] = out[0] //nolint:gosec // a one-byte array indexed by 0
					}
				}
				fp8Tables[fp8Key{ft, o}] = tab
			}
		}
	})
	return fp8Tables[fp8Key{t, op}]
}

// Divide finishes an average over n ranks: integers divide truncating
// toward zero.
func Divide(dst []byte, t dtype.DType, n int) {
	switch t {
	case dtype.Int8:
		divideNative(view[int8](dst), n)
	case dtype.Uint8:
		divideNative(view[uint8](dst), n)
	case dtype.Int32:
		divideNative(view[int32](dst), n)
	case dtype.Uint32:
		divideNative(view[uint32](dst), n)
	case dtype.Int64:
		divideNative(view[int64](dst), n)
	case dtype.Uint64:
		divideNative(view[uint64](dst), n)
	case dtype.Float32:
		divideNative(view[float32](dst), n)
	case dtype.Float64:
		divideNative(view[float64](dst), n)
	case dtype.Float16:
		d := view[uint16](dst)
		for i := range d {
			d[i] = dtype.Float32ToHalf(dtype.HalfToFloat32(d[i]) / float32(n))
		}
	case dtype.BFloat16:
		d := view[uint16](dst)
		for i := range d {
			d[i] = dtype.Float32ToBF16(dtype.BF16ToFloat32(d[i]) / float32(n))
		}
	default:
		cnt := int64(len(dst) / t.Size())
		for i := int64(0); i < cnt; i++ {
			t.Put(dst, i, float64(float32(t.Get(dst, i))/float32(n)))
		}
	}
}

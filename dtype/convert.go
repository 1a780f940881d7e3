package dtype

import (
	"encoding/binary"
	"math"
	"sort"
)

// Get decodes element i of buf (little-endian) as float64. Every value of
// every type is exactly representable in float64.
func (t DType) Get(buf []byte, i int64) float64 {
	le := binary.LittleEndian
	switch t {
	case Int8:
		return float64(int8(buf[i]))
	case Uint8:
		return float64(buf[i])
	case Int32:
		return float64(int32(le.Uint32(buf[4*i:]))) //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
	case Uint32:
		return float64(le.Uint32(buf[4*i:]))
	case Int64:
		return float64(int64(le.Uint64(buf[8*i:]))) //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
	case Uint64:
		return float64(le.Uint64(buf[8*i:]))
	case Float16:
		return float64(HalfToFloat32(le.Uint16(buf[2*i:])))
	case Float32:
		return float64(math.Float32frombits(le.Uint32(buf[4*i:])))
	case Float64:
		return math.Float64frombits(le.Uint64(buf[8*i:]))
	case BFloat16:
		return float64(BF16ToFloat32(le.Uint16(buf[2*i:])))
	case Float8E4M3:
		return float64(E4M3ToFloat32(buf[i])) //nolint:gosec // i is bounded by the caller's buffer, as the byte slice expression shows
	case Float8E5M2:
		return float64(E5M2ToFloat32(buf[i])) //nolint:gosec // i is bounded by the caller's buffer, as the byte slice expression shows
	}
	panic("dtype: invalid type")
}

// Put encodes v as element i of buf, rounding to nearest even for floats and
// truncating toward zero for integers.
func (t DType) Put(buf []byte, i int64, v float64) {
	le := binary.LittleEndian
	switch t {
	case Int8:
		buf[i] = byte(int8(v))
	case Uint8:
		buf[i] = uint8(v)
	case Int32:
		le.PutUint32(buf[4*i:], uint32(int32(v))) //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
	case Uint32:
		le.PutUint32(buf[4*i:], uint32(v))
	case Int64:
		le.PutUint64(buf[8*i:], uint64(int64(v))) //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
	case Uint64:
		le.PutUint64(buf[8*i:], uint64(v))
	case Float16:
		le.PutUint16(buf[2*i:], Float32ToHalf(float32(v)))
	case Float32:
		le.PutUint32(buf[4*i:], math.Float32bits(float32(v)))
	case Float64:
		le.PutUint64(buf[8*i:], math.Float64bits(v))
	case BFloat16:
		le.PutUint16(buf[2*i:], Float32ToBF16(float32(v)))
	case Float8E4M3:
		buf[i] = Float32ToE4M3(float32(v)) //nolint:gosec // i is bounded by the caller's buffer, as the byte slice expression shows
	case Float8E5M2:
		buf[i] = Float32ToE5M2(float32(v)) //nolint:gosec // i is bounded by the caller's buffer, as the byte slice expression shows
	default:
		panic("dtype: invalid type")
	}
}

// HalfToFloat32 decodes an IEEE binary16 value.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch exp {
	case 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		f := float32(man) / 1024 / 16384 // man × 2^-24
		if sign != 0 {
			return -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// Float32ToHalf encodes f as IEEE binary16, rounding to nearest even.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000 //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
	exp := int32(b>>23) & 0xff     //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e) //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
		half := man >> shift
		rem := man & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | uint16(half) //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
	}
	half := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // may carry into the exponent, which rounds up correctly
	}
	return sign | uint16(half) //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
}

// BF16ToFloat32 decodes a bfloat16 value.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBF16 encodes f as bfloat16, rounding to nearest even.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16) //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
}

// E4M3ToFloat32 decodes an 8-bit float with 4 exponent and 3 mantissa bits
// (bias 7, no infinities, 0x7f/0xff are NaN; largest finite value 448).
func E4M3ToFloat32(v uint8) float32 { return e4m3Table[v] }

// E5M2ToFloat32 decodes an 8-bit float with 5 exponent and 2 mantissa bits:
// the upper byte of an IEEE binary16 value.
func E5M2ToFloat32(v uint8) float32 { return HalfToFloat32(uint16(v) << 8) }

// Float32ToE5M2 encodes f as e5m2, rounding to nearest even.
func Float32ToE5M2(f float32) uint8 {
	h := Float32ToHalf(f)
	if h&0x7fff > 0x7c00 { // NaN
		return uint8(h>>8) | 0x02 //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
	}
	rem := h & 0xff
	out := h >> 8
	if rem > 0x80 || (rem == 0x80 && out&1 == 1) {
		out++
	}
	return uint8(out) //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
}

// Float32ToE4M3 encodes f as e4m3, rounding to nearest even and saturating
// at ±448.
func Float32ToE4M3(f float32) uint8 {
	if f != f {
		return 0x7f
	}
	var sign uint8
	if math.Signbit(float64(f)) {
		sign = 0x80
		f = -f
	}
	// e4m3Pos holds the 127 non-negative finite values in increasing order,
	// index == encoding.
	i := sort.Search(len(e4m3Pos), func(k int) bool { return e4m3Pos[k] >= f })
	switch {
	case i == len(e4m3Pos):
		i = len(e4m3Pos) - 1
	case e4m3Pos[i] != f && i > 0:
		lo, hi := e4m3Pos[i-1], e4m3Pos[i]
		if f-lo < hi-f || (f-lo == hi-f && (i-1)&1 == 0) {
			i--
		}
	}
	return sign | uint8(i) //nolint:gosec // G115: the conversion is the encoding: bits reinterpreted or masked to the width
}

var (
	e4m3Table [256]float32
	e4m3Pos   [127]float32
)

func init() {
	for v := 0; v < 256; v++ {
		exp := (v >> 3) & 0xf
		man := v & 7
		var f float64
		switch {
		case exp == 0xf && man == 7:
			f = math.NaN()
		case exp == 0:
			f = float64(man) / 8 * math.Ldexp(1, -6)
		default:
			f = (1 + float64(man)/8) * math.Ldexp(1, exp-7)
		}
		if v&0x80 != 0 {
			f = -f
		}
		e4m3Table[v] = float32(f)
	}
	copy(e4m3Pos[:], e4m3Table[:127])
}

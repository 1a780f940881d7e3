// Package dtype describes the element types collectives run on: their names,
// sizes and exact conversion to and from float64 for filling and checking buffers.
package dtype

import (
	"fmt"
	"math"
	"strings"
)

// DType is an element type of a collective's buffers.
type DType int

// The element types, in the order NCCL numbers them.
const (
	Int8 DType = iota
	Uint8
	Int32
	Uint32
	Int64
	Uint64
	Float16
	Float32
	Float64
	BFloat16
	Float8E4M3
	Float8E5M2
	numTypes
)

type info struct {
	name    string   // the name NCCL's benchmark prints
	aliases []string // other accepted spellings
	size    int
	float   bool
	signed  bool
	// exact is the largest magnitude up to which every integer is representable;
	// fill patterns stay within it so reductions are exact in any order.
	exact int64
}

// patternCap bounds pattern magnitudes for wide types so values stay small and
// every partial result is exact in float64.
const patternCap = 1 << 20

var infos = [numTypes]info{
	Int8:       {"int8", []string{"char", "i8", "s8"}, 1, false, true, 127},
	Uint8:      {"uint8", []string{"u8", "byte"}, 1, false, false, 255},
	Int32:      {"int32", []string{"int", "i32", "s32"}, 4, false, true, patternCap},
	Uint32:     {"uint32", []string{"u32"}, 4, false, false, patternCap},
	Int64:      {"int64", []string{"i64", "s64"}, 8, false, true, patternCap},
	Uint64:     {"uint64", []string{"u64"}, 8, false, false, patternCap},
	Float16:    {"half", []string{"fp16", "float16", "f16"}, 2, true, true, 2048},
	Float32:    {"float", []string{"fp32", "float32", "f32"}, 4, true, true, patternCap},
	Float64:    {"double", []string{"fp64", "float64", "f64"}, 8, true, true, patternCap},
	BFloat16:   {"bfloat16", []string{"bf16"}, 2, true, true, 256},
	Float8E4M3: {"f8e4m3", []string{"fp8e4m3", "e4m3", "fp8_e4m3", "float8_e4m3"}, 1, true, true, 16},
	Float8E5M2: {"f8e5m2", []string{"fp8e5m2", "e5m2", "fp8_e5m2", "float8_e5m2"}, 1, true, true, 8},
}

// All returns every element type in NCCL's order.
func All() []DType {
	out := make([]DType, numTypes)
	for i := range out {
		out[i] = DType(i)
	}
	return out
}

// Parse accepts a type's name or one of its aliases, case-insensitively.
func Parse(s string) (DType, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	for i, in := range infos {
		if k == in.name {
			return DType(i), nil
		}
		for _, a := range in.aliases {
			if k == a {
				return DType(i), nil
			}
		}
	}
	return 0, fmt.Errorf("unknown dtype %q (valid: %s, or all)", s, strings.Join(Names(), ", "))
}

// Names lists the canonical type names.
func Names() []string {
	out := make([]string, numTypes)
	for i, in := range infos {
		out[i] = in.name
	}
	return out
}

// Valid reports whether t is one of the defined types.
func (t DType) Valid() bool { return t >= 0 && t < numTypes }

// String returns the canonical name, as NCCL's benchmark prints it.
func (t DType) String() string {
	if !t.Valid() {
		return fmt.Sprintf("dtype(%d)", int(t))
	}
	return infos[t].name
}

// Size is the size of one element in bytes.
func (t DType) Size() int { return infos[t].size }

// IsFloat reports whether t is a floating-point type.
func (t DType) IsFloat() bool { return infos[t].float }

// IsSigned reports whether t holds negative values.
func (t DType) IsSigned() bool { return infos[t].signed }

// IsFP8 reports whether t is one of the 8-bit float types.
func (t DType) IsFP8() bool { return t == Float8E4M3 || t == Float8E5M2 }

// ExactLimit is the largest magnitude below which patterns keep every integer exact.
func (t DType) ExactLimit() int64 { return infos[t].exact }

// MarshalText writes the canonical name.
func (t DType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText accepts any spelling Parse accepts.
func (t *DType) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// ULP returns the spacing of representable values of a float type near v
// (1 for integer types).
func (t DType) ULP(v float64) float64 {
	if !t.IsFloat() {
		return 1
	}
	var mant, minExp int
	switch t {
	case Float16:
		mant, minExp = 10, -14
	case BFloat16:
		mant, minExp = 7, -126
	case Float32:
		mant, minExp = 23, -126
	case Float64:
		mant, minExp = 52, -1022
	case Float8E4M3:
		mant, minExp = 3, -6
	case Float8E5M2:
		mant, minExp = 2, -14
	}
	a := math.Abs(v)
	e := minExp
	if a > 0 {
		_, fe := math.Frexp(a) // a = f * 2^fe, f in [0.5,1)
		if fe-1 > e {
			e = fe - 1
		}
	}
	return math.Ldexp(1, e-mant)
}

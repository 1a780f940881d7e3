package dtype

import (
	"math"
	"testing"
)

func TestParseNamesAndAliases(t *testing.T) {
	cases := map[string]DType{
		"float": Float32, "fp32": Float32, "FLOAT32": Float32, "half": Float16, "fp16": Float16,
		"bf16": BFloat16, "bfloat16": BFloat16, "double": Float64, "int8": Int8, "char": Int8,
		"uint64": Uint64, "e4m3": Float8E4M3, "f8e5m2": Float8E5M2, "int": Int32,
	}
	for in, want := range cases {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := Parse("float128"); err == nil {
		t.Fatal("Parse(float128) succeeded")
	}
}

func TestRoundTripExactIntegers(t *testing.T) {
	for _, dt := range All() {
		buf := make([]byte, dt.Size()*4)
		lim := dt.ExactLimit()
		for _, v := range []int64{0, 1, lim / 2, lim} {
			vals := []float64{float64(v)}
			if dt.IsSigned() {
				vals = append(vals, -float64(v))
			}
			for _, f := range vals {
				dt.Put(buf, 2, f)
				if got := dt.Get(buf, 2); got != f {
					t.Errorf("%v: round trip of %v gave %v", dt, f, got)
				}
			}
		}
	}
}

func TestFloatRounding(t *testing.T) {
	cases := []struct {
		dt   DType
		in   float64
		want float64
	}{
		{Float16, 2049, 2048}, // tie, rounds to even
		{Float16, 2051, 2052}, // tie, rounds to even (up)
		{Float16, 65520, math.Inf(1)},
		{Float16, 1.0 / (1 << 24), 1.0 / (1 << 24)}, // smallest subnormal
		{BFloat16, 257, 256},
		{BFloat16, 259, 260},
		{Float8E4M3, 17, 16},
		{Float8E4M3, 19, 20},
		{Float8E4M3, 1000, 448},
		{Float8E4M3, -0.0078125, -0.0078125},
		{Float8E5M2, 9, 8},
		{Float8E5M2, 11, 12},
		{Float8E5M2, 57344, 57344},
	}
	for _, c := range cases {
		buf := make([]byte, 8)
		c.dt.Put(buf, 0, c.in)
		if got := c.dt.Get(buf, 0); got != c.want {
			t.Errorf("%v(%v) = %v, want %v", c.dt, c.in, got, c.want)
		}
	}
}

func TestHalfAllValuesRoundTrip(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := HalfToFloat32(uint16(h)) //nolint:gosec // G115: test inputs in the type's own range
		if f != f {
			continue
		}
		if back := Float32ToHalf(f); back != uint16(h) { //nolint:gosec // G115: test inputs in the type's own range
			t.Fatalf("half %#04x -> %v -> %#04x", h, f, back)
		}
	}
	for v := 0; v < 256; v++ {
		f := E4M3ToFloat32(uint8(v)) //nolint:gosec // G115: test inputs in the type's own range
		if f != f {
			continue
		}
		if back := Float32ToE4M3(f); back != uint8(v) && !(f == 0 && back&0x7f == 0) { //nolint:gosec // G115: test inputs in the type's own range
			t.Fatalf("e4m3 %#02x -> %v -> %#02x", v, f, back)
		}
		g := E5M2ToFloat32(uint8(v)) //nolint:gosec // G115: test inputs in the type's own range
		if g != g {
			continue
		}
		if back := Float32ToE5M2(g); back != uint8(v) { //nolint:gosec // G115: test inputs in the type's own range
			t.Fatalf("e5m2 %#02x -> %v -> %#02x", v, g, back)
		}
	}
}

func TestULP(t *testing.T) {
	cases := []struct {
		dt   DType
		v    float64
		want float64
	}{
		{Float32, 1, math.Ldexp(1, -23)},
		{Float16, 1024, 1},
		{BFloat16, 1, 1.0 / 128},
		{Int32, 5, 1},
		{Float8E4M3, 16, 2},
	}
	for _, c := range cases {
		if got := c.dt.ULP(c.v); got != c.want {
			t.Errorf("%v.ULP(%v) = %v, want %v", c.dt, c.v, got, c.want)
		}
	}
}

// Package determinism judges whether a reduction gives the same bits every
// time: run to run on fresh communicators, on every rank that should hold
// the same result, as the message around an element grows, and across the
// algorithms a library can be told to run. Run drives a run on a world
// the engine opened (measure's ranks, any backend); the checks work on
// output bytes alone.
package determinism

import (
	"fmt"
	"hash/fnv"
	"math"

	"collbench/dtype"
)

// Hash is an output's FNV-1a 64-bit digest.
func Hash(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}

// Divergence is where two outputs first differ.
type Divergence struct {
	// Check is the check that found it: run (run to run), ranks (rank
	// against rank 0), size (the same element at the next smaller size),
	// history (the run whose calls came in another order after others).
	Check string `json:"check"`
	Run   int    `json:"run"`  // the run that differed from run 1 (1-based)
	Rank  int    `json:"rank"` // the rank whose output differed
	// Element is the element's index in the reduced vector (for
	// reduce-scatter: across the ranks' parts); -1 where only digests
	// were compared.
	Element int64 `json:"element"`
	// Bits are the differing bits (the two elements' XOR), as hex.
	Bits string `json:"bits,omitempty"`
}

func (d *Divergence) String() string {
	where := fmt.Sprintf("rank %d", d.Rank)
	if d.Check == "run" || d.Check == "history" {
		where = fmt.Sprintf("run %d, %s", d.Run, where)
	}
	if d.Element < 0 {
		return where + ", digest only"
	}
	return fmt.Sprintf("%s, element %d, bits %s", where, d.Element, d.Bits)
}

// FirstDiff is the first element (with offset added) at which a and b,
// elements of t, differ, and the XOR of their bits; -1 where they agree
// over their common length.
func FirstDiff(t dtype.DType, a, b []byte, offset int64) (int64, string) {
	i, x := t.FirstDiff(a, b)
	if i < 0 {
		return -1, ""
	}
	return offset + i, t.Hex(x)
}

// ordered maps an IEEE value's bits to an integer that counts ulps: the
// integers of two values differ by their distance in representable values.
func ordered(u uint64, size int) int64 {
	sign := uint64(1) << (8*size - 1)
	if u&sign != 0 {
		return -int64(u &^ sign) //nolint:gosec // G115: a float's magnitude bits fit an int64
	}
	return int64(u) //nolint:gosec // G115: a float's magnitude bits fit an int64
}

// ULPs is the largest distance, in units of t's last place, between the
// elements of out and ref (the exact result rounded to t); NaN where an
// element is NaN on one side only is counted as the largest distance.
func ULPs(t dtype.DType, out []byte, ref []float64) uint64 {
	if !t.IsFloat() {
		return 0
	}
	sz := t.Size()
	tmp := make([]byte, sz)
	var worst uint64
	n := min(int64(len(out)/sz), int64(len(ref)))
	for i := int64(0); i < n; i++ {
		t.Put(tmp, 0, ref[i])
		a, b := ordered(t.Bits(out, i), sz), ordered(t.Bits(tmp, 0), sz)
		d := a - b
		if d < 0 {
			d = -d
		}
		if math.IsNaN(t.Get(out, i)) != math.IsNaN(ref[i]) {
			d = math.MaxInt64
		}
		worst = max(worst, uint64(d)) //nolint:gosec // G115: d is not negative
	}
	return worst
}

// Rounder returns a function that rounds a value to t, as an input of
// type t holds it; it reuses one buffer (one rounder per goroutine).
func Rounder(t dtype.DType) func(float64) float64 {
	tmp := make([]byte, t.Size())
	return func(v float64) float64 {
		t.Put(tmp, 0, v)
		return t.Get(tmp, 0)
	}
}

package measure

import (
	"math"
	"strconv"

	"collbench/dtype"
	"collbench/results"
)

// DomainKind says how input values are drawn.
type DomainKind int

const (
	// DomainRange draws integers uniformly from [Lo, Hi].
	DomainRange DomainKind = iota
	// DomainSparse lets one rank per element contribute a value from [Lo, Hi]
	// and every other rank 0, for sums over more ranks than the type can add exactly.
	DomainSparse
	// DomainProd gives every rank ±1 and one rank per element ±1 or ±2, so
	// products stay exact.
	DomainProd
	// DomainRandom draws floating-point values uniformly from [-1, 1) with
	// every bit of the mantissa used: sums are inexact, so the order of a
	// reduction shows in the bits of its result (collbench determinism).
	// An element's value depends on the seed, the rank and its index
	// alone, so a message that grows keeps its first elements.
	DomainRandom
)

// Domain is the set input values are drawn from. It is chosen per dtype, op
// and rank count so that every reduction is exact in any order.
type Domain struct {
	Kind   DomainKind `json:"kind"`
	Lo     int64      `json:"lo"`
	Hi     int64      `json:"hi"`
	Signed bool       `json:"signed"` // DomainProd: signs vary
}

// DomainFor picks the input domain for collective c on type t with op over n ranks.
func DomainFor(c Collective, t dtype.DType, op ReduceOp, n int) Domain {
	lim := t.ExactLimit()
	full := Domain{Kind: DomainRange, Lo: 0, Hi: lim}
	if t.IsSigned() {
		full.Lo = -lim
	}
	if !c.Reduces() {
		return full
	}
	nn := int64(max(n, 1))
	switch op {
	case Sum:
		m := lim / nn
		if m < 1 {
			return Domain{Kind: DomainSparse, Lo: 0, Hi: min(lim, 15)}
		}
		if t.IsSigned() {
			return Domain{Kind: DomainRange, Lo: -m, Hi: m}
		}
		return Domain{Kind: DomainRange, Lo: 0, Hi: m}
	case Avg:
		m := lim / nn
		if m < 1 {
			return Domain{Kind: DomainSparse, Lo: 0, Hi: min(lim, 15)}
		}
		return Domain{Kind: DomainRange, Lo: 0, Hi: m}
	case Prod:
		return Domain{Kind: DomainProd, Lo: 1, Hi: 2, Signed: t.IsSigned()}
	default: // min, max
		return full
	}
}

// mix hashes (seed, rank, index) into 64 well-mixed bits.
func mix(seed uint64, rank int, idx int64) uint64 {
	x := uint64(idx)*0x9E3779B97F4A7C15 ^ (uint64(rank)+1)*0xC2B2AE3D27D4EB4F ^ (seed+1)*0x165667B19E3779F9 //nolint:gosec // G115: hashing and ranges of a pattern: wraparound is intended, values stay in the domain
	x ^= x >> 29
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 32
	return x
}

// Value is element idx of rank's input for this domain, seed and rank count.
func (d Domain) Value(seed uint64, rank, n int, idx int64) float64 {
	x := mix(seed, rank, idx)
	span := uint64(d.Hi - d.Lo + 1) //nolint:gosec // G115: hashing and ranges of a pattern: wraparound is intended, values stay in the domain
	switch d.Kind {
	case DomainSparse:
		if (uint64(idx)+seed)%uint64(max(n, 1)) != uint64(rank) { //nolint:gosec // G115: hashing and ranges of a pattern: wraparound is intended, values stay in the domain
			return 0
		}
		return float64(d.Lo + int64(x%span)) //nolint:gosec // G115: hashing and ranges of a pattern: wraparound is intended, values stay in the domain
	case DomainRandom:
		return float64(x>>11)/(1<<52) - 1
	case DomainProd:
		v := 1.0
		if (uint64(idx)+seed)%uint64(max(n, 1)) == uint64(rank) && x&1 == 1 { //nolint:gosec // G115: hashing and ranges of a pattern: wraparound is intended, values stay in the domain
			v = 2
		}
		if d.Signed && x&2 != 0 {
			v = -v
		}
		return v
	default:
		return float64(d.Lo + int64(x%span)) //nolint:gosec // G115: hashing and ranges of a pattern: wraparound is intended, values stay in the domain
	}
}

// Pattern is the input one rank writes before a checked operation.
type Pattern struct {
	DType  dtype.DType
	Domain Domain
	Seed   uint64
	Rank   int // the rank whose values these are
	Ranks  int // ranks in the communicator
}

// Value is element idx of the pattern.
func (p Pattern) Value(idx int64) float64 { return p.Domain.Value(p.Seed, p.Rank, p.Ranks, idx) }

// FillHost writes count elements of p into buf (little-endian host memory).
func (p Pattern) FillHost(buf []byte, count int64) { p.FillRange(buf, 0, count) }

// FillRange writes elements first..first+count-1 of p into buf[0:].
func (p Pattern) FillRange(buf []byte, first, count int64) {
	for i := int64(0); i < count; i++ {
		p.DType.Put(buf, i, p.Value(first+i))
	}
}

// Expectation describes what one rank's output of a checked operation must
// hold: enough for any backend to compute the exact expected value of each
// element (on the host or in a device kernel).
type Expectation struct {
	Coll   Collective
	DType  dtype.DType
	Op     ReduceOp
	Root   int
	Ranks  int // n
	Rank   int // the rank whose output this is
	Geom   Geometry
	Domain Domain
	Seed   uint64
}

// Checked reports whether this rank's output is defined (reduce and gather
// define only the root's).
func (e Expectation) Checked() bool {
	return (e.Coll != Reduce && e.Coll != Gather) || e.Rank == e.Root
}

// OutputCount is the number of output elements to compare.
func (e Expectation) OutputCount() int64 {
	if !e.Checked() {
		return 0
	}
	if e.Coll == AllToAllV {
		return VRecvDispl(e.Geom.Count, e.DType.Size(), e.Ranks, e.Rank, e.Ranks)
	}
	return e.Geom.RecvCount
}

func (e Expectation) input(rank int, idx int64) float64 {
	return e.Domain.Value(e.Seed, rank, e.Ranks, idx)
}

func (e Expectation) reduceAt(idx int64) float64 {
	acc := e.input(0, idx)
	for r := 1; r < e.Ranks; r++ {
		v := e.input(r, idx)
		switch e.Op {
		case Sum, Avg:
			acc += v
		case Prod:
			acc *= v
		case Max:
			acc = math.Max(acc, v)
		case Min:
			acc = math.Min(acc, v)
		}
	}
	if e.Op == Avg {
		acc /= float64(e.Ranks)
		if !e.DType.IsFloat() {
			acc = math.Trunc(acc)
		}
	}
	return acc
}

// Want returns the exact expected value of output element i and the
// tolerance allowed around it (0 except for avg on float types).
func (e Expectation) Want(i int64) (want, tol float64) {
	return specs[e.Coll].want(e, i), e.Tolerance()
}

// Tolerance is how far an output element may lie from its exact value: 0
// except for avg on float types, where each rank's share is rounded.
func (e Expectation) Tolerance() float64 {
	if e.Op == Avg && e.DType.IsFloat() {
		return float64(e.Ranks+1) * e.DType.ULP(float64(max(e.Domain.Hi, -e.Domain.Lo)))
	}
	return 0
}

// Matches reports whether got is acceptable for output element i.
func (e Expectation) Matches(i int64, got float64) bool {
	want, _ := e.Want(i)
	return e.MatchesWant(want, got)
}

// MatchesWant reports whether got is acceptable where the exact value is
// want: a caller that holds the wanted values (computing one costs a pass
// over every rank's input for a reduction) judges by this.
func (e Expectation) MatchesWant(want, got float64) bool {
	if got == want {
		return true
	}
	tol := e.Tolerance()
	return tol > 0 && math.Abs(got-want) <= tol
}

// CountWrong compares count elements of host buffer buf (starting at element
// first of the output) with the expectation and returns how many differ.
func (e Expectation) CountWrong(buf []byte, first, count int64) int64 {
	var wrong int64
	for i := int64(0); i < count; i++ {
		got := e.DType.Get(buf, i)
		if got != got || !e.Matches(first+i, got) {
			wrong++
		}
	}
	return wrong
}

// FindMismatches returns up to limit wrong elements among count elements of
// host buffer buf, which holds output elements first.. onwards.
func (e Expectation) FindMismatches(buf []byte, first, count int64, limit int) []results.Mismatch {
	return e.mismatches(buf, first, count, limit, func(i int64) float64 { w, _ := e.Want(i); return w })
}

// FindMismatchesAgainst is FindMismatches for a caller that holds the
// wanted values of output elements 0.. in want (len(want) at least the
// elements of buf): each element's value is not computed again.
func (e Expectation) FindMismatchesAgainst(buf []byte, want []float64, limit int) []results.Mismatch {
	count := min(int64(len(buf)/e.DType.Size()), int64(len(want)))
	return e.mismatches(buf, 0, count, limit, func(i int64) float64 { return want[i] })
}

func (e Expectation) mismatches(buf []byte, first, count int64, limit int, want func(int64) float64) []results.Mismatch {
	var out []results.Mismatch
	for i := int64(0); i < count && len(out) < limit; i++ {
		got := e.DType.Get(buf, i)
		if w := want(first + i); got != got || !e.MatchesWant(w, got) {
			out = append(out, results.Mismatch{Rank: e.Rank, Index: first + i,
				Want: strconv.FormatFloat(w, 'g', -1, 64), Got: strconv.FormatFloat(got, 'g', -1, 64)})
		}
	}
	return out
}

// InputPattern is the pattern rank writes as its input for this expectation's operation.
func (e Expectation) InputPattern(rank int) Pattern {
	return Pattern{DType: e.DType, Domain: e.Domain, Seed: e.Seed, Rank: rank, Ranks: e.Ranks}
}

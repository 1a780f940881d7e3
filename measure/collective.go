// Package measure holds the collectives collbench measures: their byte
// accounting, the exact values their outputs must hold, and the sweep runner
// that drives a Backend through sizes, types and operations.
package measure

import (
	"fmt"
	"strings"

	"collbench/dtype"
)

// Collective is one of the communication patterns collbench measures.
type Collective int

// The collectives, in the order `sweep --collectives all` runs them.
const (
	AllReduce Collective = iota
	AllGather
	ReduceScatter
	Broadcast
	Reduce
	AllToAll
	SendRecv
	Gather
	Scatter
	AllToAllV
	HyperCube
	numCollectives
)

// Outcome says in a few words what the collective leaves on each rank,
// as its command's summary says it.
func (c Collective) Outcome() string {
	if c < 0 || c >= numCollectives {
		return ""
	}
	return specs[c].outcome
}

// AllCollectives returns every collective in sweep order.
func AllCollectives() []Collective {
	out := make([]Collective, numCollectives)
	for i := range out {
		out[i] = Collective(i)
	}
	return out
}

// CollectiveNames lists the canonical command names.
func CollectiveNames() []string {
	out := make([]string, numCollectives)
	for i, c := range specs {
		out[i] = c.name
	}
	return out
}

// ParseCollective accepts a collective's name or alias, case-insensitively.
func ParseCollective(s string) (Collective, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	for i, c := range specs {
		if k == c.name {
			return Collective(i), nil
		}
		for _, a := range c.aliases {
			if k == a {
				return Collective(i), nil
			}
		}
	}
	return 0, fmt.Errorf("unknown collective %q (valid: %s, or all)", s, strings.Join(CollectiveNames(), ", "))
}

// ParseCollectives parses a comma-separated list, where "all" means every collective.
func ParseCollectives(s string) ([]Collective, error) {
	var out []Collective
	seen := map[Collective]bool{}
	for _, part := range strings.Split(s, ",") {
		if strings.EqualFold(strings.TrimSpace(part), "all") {
			for _, c := range AllCollectives() {
				if !seen[c] {
					seen[c] = true
					out = append(out, c)
				}
			}
			continue
		}
		c, err := ParseCollective(part)
		if err != nil {
			return nil, err
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no collective given (valid: %s, or all)", strings.Join(CollectiveNames(), ", "))
	}
	return out, nil
}

// String returns the canonical name.
func (c Collective) String() string {
	if c < 0 || c >= numCollectives {
		return fmt.Sprintf("collective(%d)", int(c))
	}
	return specs[c].name
}

// Aliases returns the other accepted spellings.
func (c Collective) Aliases() []string { return specs[c].aliases }

// Reduces reports whether c combines values with a reduction operation.
func (c Collective) Reduces() bool { return specs[c].reduces }

// Rooted reports whether c has a root rank.
func (c Collective) Rooted() bool { return specs[c].rooted }

// InPlaceDefined reports whether c has an in-place form. NCCL's alltoall
// and send/recv are point-to-point exchanges whose in-place use overwrites
// data before peers have read it, so collbench measures them out-of-place only.
func (c Collective) InPlaceDefined() bool { return !specs[c].noInPlace }

// PowerOfTwo reports whether c runs only on a power-of-two number of ranks
// (hypercube exchanges with rank XOR 2^k).
func (c Collective) PowerOfTwo() bool { return specs[c].powerOfTwo }

// PeakComparable reports whether the busbw of the collective named name can
// be held against a link's peak. alltoallv cannot: its counts are uneven by
// design, so the busiest rank sets its time while the links idle. An
// unknown name is comparable.
func PeakComparable(name string) bool {
	c, err := ParseCollective(name)
	return err != nil || !specs[c].noPeak
}

// BusFactor converts a row's bytes per second (Geometry.Bytes over the
// time) to bus bandwidth for n ranks, so that busbw is comparable to link
// speed whatever n is.
func (c Collective) BusFactor(n int) float64 {
	if n <= 0 {
		return 0
	}
	return specs[c].bus(float64(n))
}

// AlgFactor converts a row's bytes per second to algorithm bandwidth, as
// NCCL's benchmark defines it: 1 but for hypercube, whose algbw counts
// what each rank receives from the others, (n-1)/n of its buffer.
func (c Collective) AlgFactor(n int) float64 {
	if n <= 0 {
		return 0
	}
	if a := specs[c].alg; a != nil {
		return a(float64(n))
	}
	return 1
}

// Bandwidths are a row's algorithm and bus bandwidths in GB/s for size
// bytes of esz-byte elements on n ranks in timeUS µs.
func Bandwidths(c Collective, size int64, esz, n int, timeUS float64) (alg, bus float64) {
	if timeUS <= 0 {
		return 0, 0
	}
	rate := float64(GeometryFor(c, size, esz, n, 0).Bytes) / (timeUS * 1e3)
	return rate * c.AlgFactor(n), rate * c.BusFactor(n)
}

// Geometry is the byte accounting of one row: how a requested size turns
// into element counts per rank, as NCCL's standard benchmark does it.
type Geometry struct {
	// Bytes is the row's size: the larger of one rank's send and receive buffers.
	Bytes int64
	// Count is the count argument passed to the collective (per peer for alltoall).
	Count int64
	// SendCount and RecvCount are one rank's buffer lengths in elements.
	SendCount, RecvCount int64
	// SendInPlace and RecvInPlace are element offsets of the send and receive
	// areas inside the single buffer an in-place operation uses.
	SendInPlace, RecvInPlace int64
}

// BufferElems is the length in elements of the one buffer an in-place op uses.
func (g Geometry) BufferElems() int64 { return max(g.SendCount, g.RecvCount) }

// GeometryFor computes the geometry of size bytes of elemSize-byte elements
// on rank `rank` of n. Counts round down so they divide evenly among ranks.
func GeometryFor(c Collective, size int64, elemSize, n, rank int) Geometry {
	count := size / int64(elemSize)
	nn := int64(n)
	var g Geometry
	switch specs[c].shape {
	case gathered:
		g.SendCount = count / nn
		g.RecvCount = g.SendCount * nn
		g.Count = g.SendCount
		g.SendInPlace = int64(rank) * g.SendCount
	case scattered:
		g.RecvCount = count / nn
		g.SendCount = g.RecvCount * nn
		g.Count = g.RecvCount
		g.RecvInPlace = int64(rank) * g.RecvCount
	case exchanged:
		// Count is per peer (alltoallv's the average, rounded to VAlign:
		// see VCount; its rank sends and receives the sum of its parts).
		g.Count = count / nn
		g.SendCount = g.Count * nn
		if c == AllToAllV {
			a := VAlign(elemSize)
			g.Count = g.Count / a * a
			g.SendCount = VRecvDispl(g.Count, elemSize, n, 0, n)
		}
		g.RecvCount = g.SendCount
	default:
		g.Count = count
		g.SendCount = count
		g.RecvCount = count
	}
	g.Bytes = max(g.SendCount, g.RecvCount) * int64(elemSize)
	return g
}

// ReduceOp is a reduction operation (dtype.ReduceOp: the arithmetic is
// the element types').
type ReduceOp = dtype.ReduceOp

// The reduction operations, in NCCL's order. NoOp marks collectives without one.
const (
	Sum  = dtype.Sum
	Prod = dtype.Prod
	Max  = dtype.Max
	Min  = dtype.Min
	Avg  = dtype.Avg
	NoOp = dtype.NoOp
)

// AllOps returns every reduction operation.
func AllOps() []ReduceOp { return dtype.AllOps() }

// ParseOp accepts an operation's name, case-insensitively.
func ParseOp(s string) (ReduceOp, error) { return dtype.ParseOp(s) }

// VAlign is the granularity, in elements of esz bytes, of an alltoallv's
// per-peer count and parts: 16 bytes, as NCCL's benchmark rounds them (and
// a part that starts off a 16-byte boundary is not what it measures).
func VAlign(esz int) int64 { return max(1, int64(16/max(esz, 1))) }

// VCount is how many elements of esz bytes rank `from` sends to rank `to`
// in an alltoallv of average count per peer on n ranks, the traffic of
// NCCL's benchmark (alltoallv_perf, its default distance-weighted
// pattern): of its n×count elements in all, a rank sends the rank d after
// it (d = (to-from) mod n) the share d/(1+2+…+n-1), rounded down to 16
// bytes (VAlign), so nothing to itself and its largest part to the rank
// before it, and every part differs, as in a mixture-of-experts exchange.
// On one rank, all of it to itself.
func VCount(count int64, esz, from, to, n int) int64 {
	if n == 1 {
		return count
	}
	d := int64(((to-from)%n + n) % n)
	a := VAlign(esz)
	return count * 2 * d / int64(n-1) / a * a
}

// VDispl is the element offset of rank from's part for rank to in from's
// send buffer (its parts in rank order).
func VDispl(count int64, esz, from, to, n int) int64 {
	var d int64
	for q := 0; q < to; q++ {
		d += VCount(count, esz, from, q, n)
	}
	return d
}

// VRecvDispl is the element offset, in rank to's receive buffer, of the
// part it receives from rank from (parts in rank order of the senders).
func VRecvDispl(count int64, esz, from, to, n int) int64 {
	var d int64
	for p := 0; p < from; p++ {
		d += VCount(count, esz, p, to, n)
	}
	return d
}

// CheckGroups refuses collectives that cannot run on some group of the
// layout (hypercube needs a power-of-two number of ranks).
func CheckGroups(cs []Collective, groups [][]int) error {
	for _, c := range cs {
		if !c.PowerOfTwo() {
			continue
		}
		for _, g := range groups {
			if n := len(g); n&(n-1) != 0 {
				return fmt.Errorf("%s needs a power-of-two number of ranks in every group; a group has %d (use -g 2, 4, 8, ... or another --rank-list)", c, n)
			}
		}
	}
	return nil
}

package measure

import (
	"fmt"
	"hash/fnv"

	"collbench/dtype"
	"collbench/results"
	"collbench/watchdog"
)

// BitwiseApplies says whether --bitwise compares a case's bits: a
// reduction of a floating-point type, whose result may depend on the order
// its sums are taken in. Integer sums are exact in any order, and a
// collective that only moves data changes no bit it moves.
func BitwiseApplies(c Collective, t dtype.DType) bool { return c.Reduces() && t.IsFloat() }

// rankBits is what one rank's --bitwise runs found in one half.
type rankBits struct {
	Seed   uint64                 `json:"s"`
	Out    bool                   `json:"o"` // the rank holds an output (a reduce's root, every rank otherwise)
	Digest uint64                 `json:"d"` // of run 1's output
	First  *results.BitDivergence `json:"f,omitempty"`
	// first is run 1's output where it stays in this process for the
	// ranks check to locate a difference (outputs up to keepForRanks).
	first []byte
}

// keepForRanks bounds the output a rank keeps after its runs so that a
// difference between ranks of one process is located to its element; past
// it (or across processes) only the digests are compared.
const keepForRanks = 64 << 20

// bitwiseRuns runs call n times on the same random inputs (seeded by seed)
// and compares each run's output with run 1's, bit for bit. Every rank
// issues every run: a rank without an output (a reduce's non-roots) runs
// its part and compares nothing. Run 1's output is kept on the host for
// the comparison.
func bitwiseRuns(r Rank, tr *watchdog.Tracker, what string, call Call, g Geometry, inPlace bool, whole View, seed uint64, n int) (*rankBits, error) {
	hr, ok := r.(HostReader)
	if !ok {
		return nil, fmt.Errorf("%w: --bitwise reads outputs back to the host, and this backend cannot", ErrUnsupported)
	}
	esz := int64(call.DType.Size())
	pat := Pattern{DType: call.DType, Domain: Domain{Kind: DomainRandom}, Seed: seed, Rank: r.Rank(), Ranks: r.Size()}
	rb := &rankBits{Seed: seed, Out: call.Coll != Reduce || r.Rank() == call.Root}
	var first []byte
	for k := 0; k < n; k++ {
		tr.Begin(what+" (bitwise)", watchdog.Check, 1)
		if inPlace {
			if err := r.Poison(whole, g.BufferElems(), call.DType); err != nil {
				return nil, err
			}
		}
		if err := r.Fill(call.Send, g.SendCount, pat); err != nil {
			return nil, err
		}
		if !inPlace {
			if err := r.Poison(call.Recv, g.RecvCount, call.DType); err != nil {
				return nil, err
			}
		}
		tr.Op(1)
		if err := r.Launch(call); err != nil {
			return nil, err
		}
		if err := r.Sync(); err != nil {
			return nil, err
		}
		if !rb.Out || (k > 0 && rb.First != nil) {
			continue
		}
		out, err := hr.ReadHost(call.Recv, g.RecvCount*esz)
		if err != nil {
			return nil, err
		}
		if k == 0 {
			first = out
			h := fnv.New64a()
			_, _ = h.Write(out)
			rb.Digest = h.Sum64()
			if call.Coll == AllReduce && len(out) <= keepForRanks {
				rb.first = out
			}
			continue
		}
		if i, x := call.DType.FirstDiff(first, out); i >= 0 {
			rb.First = &results.BitDivergence{Check: "run", Run: k + 1, Rank: r.WorldRank(), Element: i, XOR: call.DType.Hex(x)}
		}
	}
	return rb, nil
}

// groupBits judges one group's --bitwise runs: each rank's against its own
// first run, then, where every rank of the group holds the same result
// (allreduce), each rank's digest against the group's first rank's.
func groupBits(all []rankResult, members []int, c Collective, t dtype.DType, runs int) *results.Bitwise {
	var b *results.Bitwise
	for _, wr := range members {
		rb := all[wr].Bits
		if rb == nil {
			continue
		}
		if b == nil {
			b = &results.Bitwise{Runs: runs, Seed: rb.Seed, Same: true}
		}
		if rb.First != nil && b.First == nil {
			b.Same, b.First = false, rb.First
		}
	}
	if b == nil || b.First != nil || c != AllReduce {
		return b
	}
	ref := all[members[0]].Bits
	for _, wr := range members[1:] {
		if rb := all[wr].Bits; rb != nil && ref != nil && rb.Digest != ref.Digest {
			d := &results.BitDivergence{Check: "ranks", Rank: wr, Other: members[0], Element: -1}
			if ref.first != nil && rb.first != nil {
				var x uint64
				if d.Element, x = t.FirstDiff(ref.first, rb.first); d.Element >= 0 {
					d.XOR = t.Hex(x)
				}
			}
			b.Same, b.First = false, d
			break
		}
	}
	return b
}

// mergeBits is several halves' --bitwise as one (the groups of a row, or
// the cycles of a half): the same where every one was, else the first
// divergence; nil where none ran.
func mergeBits(hs []*results.Half) *results.Bitwise {
	var out *results.Bitwise
	for _, h := range hs {
		b := h.Bitwise
		if b == nil {
			continue
		}
		if out == nil {
			c := *b
			out = &c
			continue
		}
		if !b.Same && out.Same {
			out.Same, out.First = false, b.First
		}
	}
	return out
}

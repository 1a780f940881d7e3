package cpu

import (
	"fmt"
	"slices"

	"collbench/dtype"
	"collbench/internal/reduce"
	"collbench/measure"
	"collbench/watch"
)

// The collective algorithms of the CPU backend across processes, on one
// communicator. Data moves in pieces of at most pieceSize bytes, processed
// piece by piece ("chunk-major"), so each rank keeps one piece of scratch
// whatever the message size, and at most one unread piece is in flight on
// each connection in each direction: no algorithm can deadlock on full
// socket buffers.
//
// Bytes each rank sends per operation (S the row's size, k ranks):
//
//	allreduce       ring reduce-scatter + ring allgather    2(k-1)/k·S
//	                recursive doubling (k > 8, S ≤ 64 KiB)   ⌈log2 k⌉·S (+S for a folded rank)
//	reduce-scatter  ring                                    (k-1)/k·S
//	allgather       ring                                    (k-1)/k·S
//	alltoall        pairwise exchange                       (k-1)/k·S
//	broadcast       pipelined chain from the root           S (the last rank sends nothing)
//	reduce          pipelined chain ending at the root      S (the root sends nothing)
//	sendrecv        to the next rank                        S
//	gather          every rank straight to the root         S/k (the root receives (k-1)/k·S)
//	scatter         the root straight to every rank         (k-1)/k·S from the root
//	alltoallv       pairwise exchange, parts per VCount     its parts for the others
//	hypercube       recursive doubling (k a power of two)   (k-1)/k·S
//
// plus a 16-byte header per piece.

// smallAllReduce is the largest allreduce, in bytes, that uses recursive
// doubling on more than recursiveMinRanks ranks: there the ring's 2(k-1)
// sequential hops cost more than the extra bytes.
const (
	smallAllReduce    = 64 << 10
	recursiveMinRanks = 8
)

// comm is one communicator of a distributed CPU world.
type comm struct {
	m       *mesh
	id      uint32
	members []int // world ranks, by rank in the communicator
	me      int
	seq     uint32
	scratch []byte      // pieceSize bytes
	index   map[int]int // rank in the communicator by world rank, made on first use
}

func (c *comm) size() int { return len(c.members) }

// links is what this rank sent each member of the communicator between
// two of the mesh's wire counts (before and after an operation), by rank
// in the communicator; peers outside it, and peers sent nothing, are left
// out.
func (c *comm) links(before, after map[int][2]int64) []watch.Link {
	if c.index == nil {
		c.index = make(map[int]int, len(c.members))
		for i, w := range c.members {
			c.index[w] = i
		}
	}
	var out []watch.Link
	for world, a := range after {
		i, ok := c.index[world]
		if b := before[world]; ok && i != c.me && a[0] > b[0] {
			out = append(out, watch.Link{Peer: i, Bytes: a[0] - b[0], WireNS: a[1] - b[1]})
		}
	}
	slices.SortFunc(out, func(x, y watch.Link) int { return x.Peer - y.Peer })
	return out
}

// copyOrStop copies as copy does, stopping early when the world is aborted.
func (c *comm) copyOrStop(dst, src []byte) error { return copyOrStop(dst, src, c.m.abortedErr) }

func (c *comm) nextTag() uint64 {
	c.seq++
	return uint64(c.id)<<32 | uint64(c.seq)
}

func mod(a, k int) int { return ((a % k) + k) % k }

// peer returns the link to the member at communicator rank i (mod k).
func (c *comm) peer(i int) (*link, error) { return c.m.link(c.members[mod(i, c.size())]) }

// piece returns piece j (of ps bytes) of b, or nil past its end.
func piece(b []byte, j, ps int) []byte {
	lo := j * ps
	if lo >= len(b) {
		return nil
	}
	return b[lo:min(lo+ps, len(b))]
}

func pieces(n, ps int) int { return (n + ps - 1) / ps }

// pieceBytes is pieceSize rounded down to whole elements of t.
func pieceBytes(t dtype.DType) int { return pieceSize / t.Size() * t.Size() }

// run performs one collective call as this rank, by the collective's row
// of ops (table.go).
func (c *comm) run(call measure.Call, send, recv []byte) error {
	o, ok := ops[call.Coll]
	if !ok || o.dist == nil {
		return fmt.Errorf("cpu backend: collective %v not implemented", call.Coll)
	}
	return o.dist(c, c.nextTag(), call, send, recv)
}

// ringReduceScatter leaves in out the reduction over all ranks of segment
// q of the inputs (seg(x) is this rank's input of segment x). Segment x
// starts at rank x+1 and travels the ring, each rank adding its own input,
// until it reaches rank x.
func (c *comm) ringReduceScatter(tag uint64, seg func(int) []byte, out []byte, t dtype.DType, op measure.ReduceOp) error {
	k, q := c.size(), c.me
	if k == 1 {
		if in := seg(0); !sameStart(in, out) {
			if err := c.copyOrStop(out, in); err != nil {
				return err
			}
		}
		return c.finishAvg(out, t, op)
	}
	next, err := c.peer(q + 1)
	if err != nil {
		return err
	}
	prev, err := c.peer(q - 1)
	if err != nil {
		return err
	}
	ps, longest := pieceBytes(t), 0
	for x := 0; x < k; x++ {
		longest = max(longest, len(seg(x)))
	}
	for j := 0; j < pieces(longest, ps); j++ {
		if err := next.send(tag, piece(seg(mod(q-1, k)), j, ps)); err != nil {
			return err
		}
		for s := 0; s < k-1; s++ {
			own := piece(seg(mod(q-s-2, k)), j, ps)
			if len(own) == 0 {
				continue
			}
			in := c.scratch[:len(own)]
			if err := prev.recv(tag, in); err != nil {
				return err
			}
			reduce.Into(in, own, t, op)
			if s < k-2 {
				err = next.send(tag, in)
			} else {
				copy(piece(out, j, ps), in)
			}
			if err != nil {
				return err
			}
			if err := c.m.abortedErr(); err != nil {
				return err
			}
		}
	}
	return c.finishAvg(out, t, op)
}

func (c *comm) finishAvg(out []byte, t dtype.DType, op measure.ReduceOp) error {
	if op == measure.Avg {
		reduce.Divide(out, t, c.size())
	}
	return nil
}

// ringAllGather fills every segment from the rank that holds it: seg(q)
// is this rank's, the others arrive around the ring.
func (c *comm) ringAllGather(tag uint64, seg func(int) []byte) error {
	k, q := c.size(), c.me
	if k == 1 {
		return nil
	}
	next, err := c.peer(q + 1)
	if err != nil {
		return err
	}
	prev, err := c.peer(q - 1)
	if err != nil {
		return err
	}
	longest := 0
	for x := 0; x < k; x++ {
		longest = max(longest, len(seg(x)))
	}
	for j := 0; j < pieces(longest, pieceSize); j++ {
		if err := next.send(tag, piece(seg(q), j, pieceSize)); err != nil {
			return err
		}
		for s := 0; s < k-1; s++ {
			dst := piece(seg(mod(q-s-1, k)), j, pieceSize)
			if len(dst) == 0 {
				continue
			}
			if err := prev.recv(tag, dst); err != nil {
				return err
			}
			if s < k-2 {
				if err := next.send(tag, dst); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// recursiveDoubling allreduces buf in place in ⌈log2 k⌉ exchanges of the
// whole buffer, piece by piece (one unread piece in flight each way, at
// any size). With k not a power of two, the first 2r ranks pair up: the
// even one hands its input to the odd one and gets the result at the end.
func (c *comm) recursiveDoubling(tag uint64, buf []byte, t dtype.DType, op measure.ReduceOp) error {
	k, q := c.size(), c.me
	p2 := 1
	for p2*2 <= k {
		p2 *= 2
	}
	r := k - p2
	ps := pieceBytes(t)
	in := c.scratch[:ps]
	// fold receives buf from l piece by piece and reduces it into buf.
	fold := func(l *link) error {
		for j := 0; j < pieces(len(buf), ps); j++ {
			b := piece(buf, j, ps)
			if err := l.recv(tag, in[:len(b)]); err != nil {
				return err
			}
			reduce.Into(b, in[:len(b)], t, op)
		}
		return nil
	}
	var vr int // rank among the p2 that double
	if q < 2*r {
		if q%2 == 0 {
			l, err := c.peer(q + 1)
			if err != nil {
				return err
			}
			if err := l.send(tag, buf); err != nil {
				return err
			}
			return l.recv(tag, buf)
		}
		l, err := c.peer(q - 1)
		if err != nil {
			return err
		}
		if err := fold(l); err != nil {
			return err
		}
		vr = q / 2
	} else {
		vr = q - r
	}
	real := func(v int) int {
		if v < r {
			return 2*v + 1
		}
		return v + r
	}
	for mask := 1; mask < p2; mask <<= 1 {
		l, err := c.peer(real(vr ^ mask))
		if err != nil {
			return err
		}
		for j := 0; j < pieces(len(buf), ps); j++ {
			b := piece(buf, j, ps)
			if err := l.send(tag, b); err != nil {
				return err
			}
			if err := l.recv(tag, in[:len(b)]); err != nil {
				return err
			}
			reduce.Into(b, in[:len(b)], t, op)
		}
	}
	if err := c.finishAvg(buf, t, op); err != nil {
		return err
	}
	if q < 2*r {
		l, err := c.peer(q - 1)
		if err != nil {
			return err
		}
		return l.send(tag, buf)
	}
	return nil
}

// chainBroadcast pipelines the root's buffer along the ring, piece by
// piece: root → root+1 → … → root-1.
func (c *comm) chainBroadcast(tag uint64, root int, send, recv []byte, t dtype.DType) error {
	k, q := c.size(), c.me
	if q == root && !sameStart(send, recv) {
		if err := c.copyOrStop(recv, send); err != nil {
			return err
		}
	}
	if k == 1 {
		return nil
	}
	pos := mod(q-root, k)
	var next, prev *link
	var err error
	if pos < k-1 {
		if next, err = c.peer(q + 1); err != nil {
			return err
		}
	}
	if pos > 0 {
		if prev, err = c.peer(q - 1); err != nil {
			return err
		}
	}
	for j := 0; j < pieces(len(recv), pieceSize); j++ {
		p := piece(recv, j, pieceSize)
		if prev != nil {
			if err := prev.recv(tag, p); err != nil {
				return err
			}
		}
		if next != nil {
			if err := next.send(tag, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// chainReduce pipelines partial reductions along the ring, piece by piece,
// from root+1 to the root, each rank adding its own input.
func (c *comm) chainReduce(tag uint64, root int, send, recv []byte, t dtype.DType, op measure.ReduceOp) error {
	k, q := c.size(), c.me
	if k == 1 {
		if !sameStart(send, recv) {
			if err := c.copyOrStop(recv, send); err != nil {
				return err
			}
		}
		return c.finishAvg(recv, t, op)
	}
	pos := mod(q-root-1, k) // 0 starts the chain, k-1 is the root
	var next, prev *link
	var err error
	if pos < k-1 {
		if next, err = c.peer(q + 1); err != nil {
			return err
		}
	}
	if pos > 0 {
		if prev, err = c.peer(q - 1); err != nil {
			return err
		}
	}
	ps := pieceBytes(t)
	for j := 0; j < pieces(len(send), ps); j++ {
		own := piece(send, j, ps)
		if prev == nil {
			if err := next.send(tag, own); err != nil {
				return err
			}
			continue
		}
		in := c.scratch[:len(own)]
		if err := prev.recv(tag, in); err != nil {
			return err
		}
		reduce.Into(in, own, t, op)
		if next != nil {
			err = next.send(tag, in)
		} else {
			copy(piece(recv, j, ps), in)
		}
		if err != nil {
			return err
		}
	}
	if q == root {
		return c.finishAvg(recv, t, op)
	}
	return nil
}

// gather sends every rank's part straight to the root, which takes them in
// rank order into its output.
func (c *comm) gather(tag uint64, root int, send, recv []byte, cb int64) error {
	return c.direct(tag, root, send, recv, cb, true)
}

// scatter sends part p of the root's input straight to rank p.
func (c *comm) scatter(tag uint64, root int, send, recv []byte, cb int64) error {
	return c.direct(tag, root, recv, send, cb, false)
}

// direct moves one part of cb bytes between every rank and the root, each
// straight over its own connection: mine is a rank's part, all the root's
// k parts in rank order. toRoot is gather's direction, otherwise scatter's.
func (c *comm) direct(tag uint64, root int, mine, all []byte, cb int64, toRoot bool) error {
	q, k := c.me, c.size()
	if q != root {
		l, err := c.peer(root)
		if err != nil {
			return err
		}
		if toRoot {
			return l.send(tag, mine)
		}
		return l.recv(tag, mine)
	}
	for p := 0; p < k; p++ {
		part := all[int64(p)*cb : int64(p+1)*cb]
		if p == q {
			switch {
			case sameStart(mine, part):
			case toRoot:
				if err := c.copyOrStop(part, mine); err != nil {
					return err
				}
			default:
				if err := c.copyOrStop(mine, part); err != nil {
					return err
				}
			}
			continue
		}
		l, err := c.peer(p)
		if err != nil {
			return err
		}
		if toRoot {
			err = l.recv(tag, part)
		} else {
			err = l.send(tag, part)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// exchange sends out to member to and receives in from member from, piece
// by piece, alternating, so neither side ever has more than a piece unread.
func (c *comm) exchange(tag uint64, to int, out []byte, from int, in []byte, t dtype.DType) error {
	lt, err := c.peer(to)
	if err != nil {
		return err
	}
	lf, err := c.peer(from)
	if err != nil {
		return err
	}
	n := max(pieces(len(out), pieceSize), pieces(len(in), pieceSize))
	for j := 0; j < n; j++ {
		if err := lt.send(tag, piece(out, j, pieceSize)); err != nil {
			return err
		}
		if p := piece(in, j, pieceSize); len(p) > 0 {
			if err := lf.recv(tag, p); err != nil {
				return err
			}
		}
	}
	return nil
}

package cpu

import (
	"strings"

	"collbench/measure"
)

// collOp is the cpu backend's row for one collective: the algorithm it
// runs across processes (Algorithm names it), that run over TCP as one
// rank (dist), and the run in one process, where the ranks meet in shared
// memory (hub). ops holds a row for every collective measure knows, so a
// new collective is its measure file and one row here
// (TestEveryCollectiveHasARow).
type collOp struct {
	// algo names the algorithm across processes for bytes on ranks (m
	// decides allreduce's).
	algo func(m *mesh, bytes int64, ranks int) string
	// dist runs one call as this rank across processes; tag is the call's.
	dist func(c *comm, tag uint64, call measure.Call, send, recv []byte) error
	// hub runs one call as rank rk in one process, the hub's other ranks
	// beside it; it returns the rank's output (nil where the collective
	// leaves it none, as on reduce's other ranks).
	hub func(h *hub, rk *rank, c measure.Call, g measure.Geometry, send, recv []byte) ([]byte, error)
	// staged: run in place, every input is copied aside first, since a
	// rank's output overwrites what another still reads.
	staged bool
}

// named is an algo that is always name.
func named(name string) func(*mesh, int64, int) string {
	return func(*mesh, int64, int) string { return name }
}

var ops = map[measure.Collective]collOp{
	measure.AllReduce: {algo: func(m *mesh, bytes int64, ranks int) string { return strings.ToUpper(m.allReduceAlgo(bytes, ranks)) },
		dist: distAllReduce, hub: hubAllReduce},
	measure.ReduceScatter: {algo: named("RING"), dist: distReduceScatter, hub: hubReduceScatter},
	measure.AllGather:     {algo: named("RING"), dist: distAllGather, hub: hubGathered},
	measure.Broadcast:     {algo: named("CHAIN"), dist: distBroadcast, hub: hubBroadcast},
	measure.Reduce:        {algo: named("CHAIN"), dist: distReduce, hub: hubReduce},
	measure.AllToAll:      {algo: named("PAIRWISE"), dist: distAllToAll, hub: hubAllToAll, staged: true},
	measure.AllToAllV:     {algo: named("PAIRWISE"), dist: distAllToAllV, hub: hubAllToAllV},
	measure.SendRecv:      {algo: named("P2P"), dist: distSendRecv, hub: hubSendRecv, staged: true},
	measure.Gather:        {algo: named("DIRECT"), dist: distGather, hub: hubGathered},
	measure.Scatter:       {algo: named("DIRECT"), dist: distScatter, hub: hubScatter},
	measure.HyperCube:     {algo: named("RECURSIVE_DOUBLING"), dist: distHyperCube, hub: hubGathered},
}

// The runs across processes (algo.go has their algorithms).

func distAllReduce(c *comm, tag uint64, call measure.Call, send, recv []byte) error {
	k, q := c.size(), c.me
	t, op := call.DType, call.Op
	esz := int64(call.DType.Size())
	if c.m.allReduceAlgo(int64(len(recv)), k) == algoRecursiveDoubling {
		if !sameStart(send, recv) {
			if err := c.copyOrStop(recv, send); err != nil {
				return err
			}
		}
		return c.recursiveDoubling(tag, recv, t, op)
	}
	seg := func(src []byte) func(int) []byte {
		return func(x int) []byte {
			lo, hi := chunk(call.Count, x, k)
			return src[lo*esz : hi*esz]
		}
	}
	out := seg(recv)(q)
	if err := c.ringReduceScatter(tag, seg(send), out, t, op); err != nil {
		return err
	}
	return c.ringAllGather(tag, seg(recv))
}

func distReduceScatter(c *comm, tag uint64, call measure.Call, send, recv []byte) error {
	t, op := call.DType, call.Op
	esz := int64(call.DType.Size())
	cb := call.Count * esz
	return c.ringReduceScatter(tag, func(x int) []byte { return send[int64(x)*cb : int64(x+1)*cb] }, recv, t, op)
}

func distAllGather(c *comm, tag uint64, call measure.Call, send, recv []byte) error {
	q := c.me
	esz := int64(call.DType.Size())
	cb := call.Count * esz
	mine := recv[int64(q)*cb : int64(q+1)*cb]
	if !sameStart(send, mine) {
		if err := c.copyOrStop(mine, send); err != nil {
			return err
		}
	}
	return c.ringAllGather(tag, func(x int) []byte { return recv[int64(x)*cb : int64(x+1)*cb] })
}

func distBroadcast(c *comm, tag uint64, call measure.Call, send, recv []byte) error {
	t := call.DType
	return c.chainBroadcast(tag, call.Root, send, recv, t)
}

func distReduce(c *comm, tag uint64, call measure.Call, send, recv []byte) error {
	t, op := call.DType, call.Op
	return c.chainReduce(tag, call.Root, send, recv, t, op)
}

func distAllToAll(c *comm, tag uint64, call measure.Call, send, recv []byte) error {
	k, q := c.size(), c.me
	t := call.DType
	esz := int64(call.DType.Size())
	cb := call.Count * esz
	part := func(b []byte, p int) []byte { return b[int64(p)*cb : int64(p+1)*cb] }
	if err := c.copyOrStop(part(recv, q), part(send, q)); err != nil {
		return err
	}
	for s := 1; s < k; s++ {
		to, from := mod(q+s, k), mod(q-s, k)
		if err := c.exchange(tag, to, part(send, to), from, part(recv, from), t); err != nil {
			return err
		}
	}
	return nil
}

func distSendRecv(c *comm, tag uint64, call measure.Call, send, recv []byte) error {
	k, q := c.size(), c.me
	t := call.DType
	if k == 1 {
		if err := c.copyOrStop(recv, send); err != nil {
			return err
		}
		return nil
	}
	return c.exchange(tag, mod(q+1, k), send, mod(q-1, k), recv, t)
}

func distGather(c *comm, tag uint64, call measure.Call, send, recv []byte) error {
	esz := int64(call.DType.Size())
	return c.gather(tag, call.Root, send, recv, call.Count*esz)
}

func distScatter(c *comm, tag uint64, call measure.Call, send, recv []byte) error {
	esz := int64(call.DType.Size())
	return c.scatter(tag, call.Root, send, recv, call.Count*esz)
}

func distAllToAllV(c *comm, tag uint64, call measure.Call, send, recv []byte) error {
	k, q := c.size(), c.me
	t := call.DType
	esz := int64(call.DType.Size())
	part := func(b []byte, off, n int64) []byte { return b[off*esz : (off+n)*esz] }
	es := call.DType.Size()
	own := measure.VCount(call.Count, es, q, q, k)
	if err := c.copyOrStop(part(recv, measure.VRecvDispl(call.Count, es, q, q, k), own), part(send, measure.VDispl(call.Count, es, q, q, k), own)); err != nil {
		return err
	}
	for s := 1; s < k; s++ {
		to, from := mod(q+s, k), mod(q-s, k)
		out := part(send, measure.VDispl(call.Count, es, q, to, k), measure.VCount(call.Count, es, q, to, k))
		in := part(recv, measure.VRecvDispl(call.Count, es, from, q, k), measure.VCount(call.Count, es, from, q, k))
		if err := c.exchange(tag, to, out, from, in, t); err != nil {
			return err
		}
	}
	return nil
}

func distHyperCube(c *comm, tag uint64, call measure.Call, send, recv []byte) error {
	k, q := c.size(), c.me
	t := call.DType
	esz := int64(call.DType.Size())
	cb := call.Count * esz
	if mine := recv[int64(q)*cb : int64(q+1)*cb]; !sameStart(send, mine) {
		if err := c.copyOrStop(mine, send); err != nil {
			return err
		}
	}
	for mask := 1; mask < k; mask <<= 1 {
		s := q &^ (mask - 1) // the block this rank holds
		r := s ^ mask        // the block its partner holds
		out := recv[int64(s)*cb : int64(s+mask)*cb]
		in := recv[int64(r)*cb : int64(r+mask)*cb]
		if err := c.exchange(tag, q^mask, out, q^mask, in, t); err != nil {
			return err
		}
	}
	return nil
}

// The runs in one process (hub.go has the hub).

func hubAllReduce(h *hub, rk *rank, c measure.Call, g measure.Geometry, send, recv []byte) ([]byte, error) {
	r := rk.id
	n := h.n
	esz := int64(c.DType.Size())
	lo, hi := chunk(c.Count, r, n)
	if err := h.reduceChunk(rk, recv[lo*esz:hi*esz], r, lo*esz, hi*esz, c); err != nil {
		return nil, err
	}
	if err := h.wait(rk); err != nil {
		return nil, err
	}
	for p := 0; p < n; p++ {
		if p == r {
			continue
		}
		lo, hi := chunk(c.Count, p, n)
		if err := rk.copyOrStop(recv[lo*esz:hi*esz], h.slots[p].recv[lo*esz:hi*esz]); err != nil {
			return nil, err
		}
	}
	return recv, nil
}

func hubReduce(h *hub, rk *rank, c measure.Call, g measure.Geometry, send, recv []byte) ([]byte, error) {
	r := rk.id
	n := h.n
	esz := int64(c.DType.Size())
	out := recv
	// Each rank reduces its chunk straight into the root's output.
	lo, hi := chunk(c.Count, r, n)
	if err := h.reduceChunk(rk, h.slots[c.Root].recv[lo*esz:hi*esz], c.Root, lo*esz, hi*esz, c); err != nil {
		return nil, err
	}
	if r != c.Root {
		out = nil
	}
	return out, nil
}

func hubReduceScatter(h *hub, rk *rank, c measure.Call, g measure.Geometry, send, recv []byte) ([]byte, error) {
	r := rk.id
	esz := int64(c.DType.Size())
	lo, hi := int64(r)*c.Count*esz, int64(r+1)*c.Count*esz
	if err := h.reduceChunk(rk, recv, r, lo, hi, c); err != nil {
		return nil, err
	}
	return recv, nil
}

func hubBroadcast(h *hub, rk *rank, c measure.Call, g measure.Geometry, send, recv []byte) ([]byte, error) {
	src := h.slots[c.Root].send
	if !sameStart(src, recv) {
		if err := rk.copyOrStop(recv, src); err != nil {
			return nil, err
		}
	}
	return recv, nil
}

func hubScatter(h *hub, rk *rank, c measure.Call, g measure.Geometry, send, recv []byte) ([]byte, error) {
	r := rk.id
	esz := int64(c.DType.Size())
	cb := c.Count * esz
	if src := h.slots[c.Root].send[int64(r)*cb : int64(r+1)*cb]; !sameStart(src, recv) {
		if err := rk.copyOrStop(recv, src); err != nil {
			return nil, err
		}
	}
	return recv, nil
}

func hubAllToAllV(h *hub, rk *rank, c measure.Call, g measure.Geometry, send, recv []byte) ([]byte, error) {
	r := rk.id
	n := h.n
	esz := int64(c.DType.Size())
	for p := 0; p < n; p++ {
		k := measure.VCount(c.Count, int(esz), p, r, n) * esz
		at := measure.VRecvDispl(c.Count, int(esz), p, r, n) * esz
		from := measure.VDispl(c.Count, int(esz), p, r, n) * esz
		if err := rk.copyOrStop(recv[at:at+k], h.slots[p].send[from:from+k]); err != nil {
			return nil, err
		}
	}
	return recv, nil
}

func hubGathered(h *hub, rk *rank, c measure.Call, g measure.Geometry, send, recv []byte) ([]byte, error) {
	r := rk.id
	n := h.n
	esz := int64(c.DType.Size())
	if c.Coll == measure.Gather && r != c.Root {
		return nil, nil // only the root receives
	}
	sb := g.SendCount * esz
	for p := 0; p < n; p++ {
		dst := recv[int64(p)*sb : int64(p+1)*sb]
		if src := h.slots[p].send; !sameStart(src, dst) {
			if err := rk.copyOrStop(dst, src); err != nil {
				return nil, err
			}
		}
	}
	return recv, nil
}

func hubAllToAll(h *hub, rk *rank, c measure.Call, g measure.Geometry, send, recv []byte) ([]byte, error) {
	r := rk.id
	n := h.n
	esz := int64(c.DType.Size())
	cb := c.Count * esz
	for p := 0; p < n; p++ {
		if err := rk.copyOrStop(recv[int64(p)*cb:int64(p+1)*cb], h.slots[p].send[int64(r)*cb:int64(r+1)*cb]); err != nil {
			return nil, err
		}
	}
	return recv, nil
}

func hubSendRecv(h *hub, rk *rank, c measure.Call, g measure.Geometry, send, recv []byte) ([]byte, error) {
	r := rk.id
	n := h.n
	if err := rk.copyOrStop(recv, h.slots[(r-1+n)%n].send); err != nil {
		return nil, err
	}
	return recv, nil
}

package fakegpu

import (
	"fmt"

	"collbench/backend/nccl/driver"
	"collbench/cuda"
	"collbench/dtype"
	"collbench/internal/reduce"
	"collbench/measure"
)

// part is one rank's share of a collective.
type part struct {
	op         driver.Op
	send, recv []byte
	bad        string // why its buffers could not be read, if they could not
	corrupt    bool
	dev        int
	vt, end    float64 // under a Model: when it arrived, when the collective ended (s)
	cold       bool    // under a Model: among its communicator's first collectives (ColdOps)
}

// counts are op's send and receive lengths in elements on rank of n.
func counts(o driver.Op, rank, n int) (send, recv int64) {
	c, all := o.Count, o.Count*int64(n)
	root := rank == o.Root
	switch o.Kind {
	case driver.Broadcast:
		if root {
			return c, c
		}
		return 0, c
	case driver.Reduce:
		if root {
			return c, c
		}
		return c, 0
	case driver.AllGather:
		return c, all
	case driver.ReduceScatter:
		return all, c
	case driver.AllToAll:
		return all, all
	case driver.Gather:
		if root {
			return c, all
		}
		return c, 0
	case driver.Scatter:
		if root {
			return all, c
		}
		return 0, c
	}
	return c, c
}

func reduces(k driver.OpKind) bool {
	return k == driver.AllReduce || k == driver.Reduce || k == driver.ReduceScatter
}

// validate checks op's arguments as NCCL does before it enqueues anything.
func (c *comm) validate(call string, o driver.Op) error {
	t := dtype.DType(o.DType)
	switch {
	case !t.Valid():
		return ncclErr(call, driver.InvalidArgument, fmt.Sprintf("invalid data type %d", o.DType))
	case reduces(o.Kind) && (o.RedOp < 0 || o.RedOp >= len(measure.AllOps())):
		return ncclErr(call, driver.InvalidArgument, fmt.Sprintf("invalid reduction operation %d", o.RedOp))
	case (o.Kind == driver.Broadcast || o.Kind == driver.Reduce || o.Kind == driver.Gather || o.Kind == driver.Scatter) && (o.Root < 0 || o.Root >= c.cl.n):
		return ncclErr(call, driver.InvalidArgument, fmt.Sprintf("invalid root %d (root should be in the 0..%d range)", o.Root, c.cl.n-1))
	case o.Count < 0:
		return ncclErr(call, driver.InvalidArgument, fmt.Sprintf("invalid count %d", o.Count))
	}
	ns, nr := counts(o, c.rank, c.cl.n)
	esz := int64(t.Size())
	if err := c.buffer(call, "sendbuff", o.Send, ns*esz); err != nil {
		return err
	}
	return c.buffer(call, "recvbuff", o.Recv, nr*esz)
}

// buffer checks that bytes at p are device memory on the rank's GPU.
func (c *comm) buffer(call, name string, p cuda.DevPtr, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	_, dev, ok := c.d.slice(p, bytes)
	switch {
	case !ok:
		return ncclErr(call, driver.InvalidArgument, fmt.Sprintf("%s: %d bytes at %#x are not device memory", name, bytes, uint64(p)))
	case dev != c.dev:
		return ncclErr(call, driver.InvalidArgument, fmt.Sprintf("%s is on GPU %d, rank %d of the communicator on GPU %d", name, dev, c.rank, c.dev))
	}
	return nil
}

// supported says Missing when the library lacks the call.
func (c *comm) supported(call string, k driver.OpKind) error {
	f := c.d.features()
	ok := true
	switch k {
	case driver.AllToAll:
		ok = f.AllToAll
	case driver.Gather, driver.Scatter:
		ok = f.Gather
	case driver.SendRecv:
		ok = f.SendRecv
	case driver.AllReduce, driver.Broadcast, driver.Reduce, driver.AllGather, driver.ReduceScatter:
	default:
		ok = false
	}
	if !ok {
		return &driver.Error{Call: call, Code: driver.Missing}
	}
	return nil
}

func (d *Driver) features() driver.Features {
	if d.opts.Features != nil {
		return *d.opts.Features
	}
	return driver.Features{SendRecv: true, AllToAll: true, Split: true, Gather: true, Register: true, Windows: true, Abort: true, AsyncErrs: true}
}

func after(err error, k, n int) error {
	if n > 1 {
		return fmt.Errorf("%w (after %d of %d operations issued)", err, k, n)
	}
	return err
}

// RepeatGroup issues n groups from the calling thread, each with every
// part's operation Per times (see driver.NCCL).
func (d *Driver) RepeatGroup(parts []driver.Part, n int) error {
	d.cross("RepeatGroup")
	for k := 0; k < n; k++ {
		if err := d.groupStart(); err != nil {
			return &driver.PartError{Part: -1, Err: err}
		}
		for i, p := range parts {
			c, ok := p.Comm.(*comm)
			if !ok {
				_ = d.groupEnd()
				return &driver.PartError{Part: i, Err: fmt.Errorf("part %d: not a communicator of this machine", i)}
			}
			op := *p.Op
			op.Rot.First += k * max(p.Per, 1) // the group's calls go on from the last group's
			if err := c.repeat(&op, max(p.Per, 1), p.Stream); err != nil {
				_ = d.groupEnd()
				return &driver.PartError{Part: i, Err: afterGroups(err, k, n)}
			}
		}
		if err := d.groupEnd(); err != nil {
			return &driver.PartError{Part: -1, Err: afterGroups(err, k, n)}
		}
	}
	return nil
}

func afterGroups(err error, k, n int) error {
	if n > 1 {
		return fmt.Errorf("%w (after %d of %d groups issued)", err, k, n)
	}
	return err
}

// Repeat enqueues op n times on the stream, each moved by op.Rot; each
// runs when every rank of the communicator has reached it in its own
// stream.
func (c *comm) Repeat(op *driver.Op, n int, h cuda.Stream) error {
	c.d.cross("Repeat")
	return c.repeat(op, n, h)
}

func (c *comm) repeat(op *driver.Op, n int, h cuda.Stream) error {
	if n <= 0 {
		return nil
	}
	if op.Kind == driver.SendRecv {
		for k := 0; k < n; k++ {
			sh := cuda.DevPtr(op.Rot.Shift(k)) //nolint:gosec // G115: a shift within the buffers, not negative
			pair := []driver.P2P{{Buf: op.Send + sh, Count: op.Count, DType: op.DType, Peer: op.To, Send: true},
				{Buf: op.Recv + sh, Count: op.Count, DType: op.DType, Peer: op.From}}
			if err := c.groupP2P(pair, h); err != nil {
				return after(err, k, n)
			}
		}
		return nil
	}
	call := op.Kind.Call()
	if err := c.supported(call, op.Kind); err != nil {
		return after(err, 0, n)
	}
	if err := c.usable(call); err != nil {
		return err
	}
	s, err := c.streamFor(call, h)
	if err != nil {
		return err
	}
	o := *op
	if err := c.validate(call, o); err != nil {
		return err
	}
	if o.Count == 0 {
		// NCCL discards an empty collective once its arguments are
		// checked: no kernel, no tuner call, no profiler event.
		return nil
	}
	c.d.noteIssuer(c.dev)
	for k := 0; k < n; k++ {
		o := o
		if sh := cuda.DevPtr(op.Rot.Shift(k)); sh != 0 { //nolint:gosec // G115: a shift within the buffers, not negative
			o.Send, o.Recv = o.Send+sh, o.Recv+sh
			if err := c.validate(call, o); err != nil {
				return after(err, k, n)
			}
		}
		f := c.d.fault(call, c.dev)
		if f != nil && f.Hang {
			return after(c.d.hang(call, c.dev), k, n)
		}
		if f != nil && !f.Async && !f.Corrupt {
			return after(ncclErr(call, orInt(f.Code, driver.InternalError), fmt.Sprintf("fault planted on GPU %d", c.dev)), k, n)
		}
		if c.profSeq == nil {
			c.profSeq = map[driver.OpKind]uint64{}
		}
		seq := c.profSeq[o.Kind]
		c.profSeq[o.Kind]++
		ch := c.choose(o)
		po := c.profCollective(o, seq, ch)
		cold := c.d.clk != nil && c.collectives < c.d.clk.m.ColdOps
		c.collectives++
		if err := s.enqueue(func() error { return c.collective(s, o, f, po, ch, cold) }); err != nil {
			return err
		}
	}
	return nil
}

// collective runs on the rank's stream: it meets the other ranks, and the
// last to arrive computes every rank's output.
func (c *comm) collective(s *stream, o driver.Op, f *Fault, po *profOp, ch choice, cold bool) error {
	t := dtype.DType(o.DType)
	esz := int64(t.Size())
	ns, nr := counts(o, c.rank, c.cl.n)
	p := &part{op: o, corrupt: f != nil && f.Corrupt, dev: c.dev, vt: s.vt, cold: cold}
	var kstart uint64
	if po != nil {
		kstart = c.gpuClock(s.vt)
	}
	var ok1, ok2 bool
	p.send, _, ok1 = c.d.slice(o.Send, ns*esz)
	p.recv, _, ok2 = c.d.slice(o.Recv, nr*esz)
	if (!ok1 && ns > 0) || (!ok2 && nr > 0) {
		p.bad = fmt.Sprintf("rank %d's buffers are no longer device memory", c.rank)
	}
	shift := 0
	if c.d.opts.OrderByPast {
		if c.lastCount != o.Count && c.cl.n > 1 {
			shift = 1
		}
		c.lastCount = o.Count
	}
	if c.d.opts.OrderByRun && c.cl.n > 1 {
		shift += int((c.cl.serial + c.reductions) % 2)
		c.reductions++
	}
	_, err := c.blocking("collective", p, func(vals []any) ([]any, error) {
		if err := compute(vals, ch.algo, shift, c.d.opts.OrderByRank); err != nil {
			return nil, err
		}
		if clk := c.d.clk; clk != nil {
			// The collective starts when its last rank arrives and ends at
			// once for all.
			var start float64
			devs := make([]int, len(vals))
			uses := make([]cacheUse, len(vals))
			cold := false
			for r, v := range vals {
				q := v.(*part)
				start, devs[r] = max(start, q.vt), q.dev
				uses[r] = cacheUse{dev: q.dev, send: q.op.Send, recv: q.op.Recv, bytes: int64(len(q.send) + len(q.recv))}
				cold = cold || q.cold
			}
			end := start + clk.collectiveTime(o.Kind, devs, o.Count, esz, ch)*clk.cached(uses)
			if cold {
				end += clk.m.ColdUS * 1e-6
			}
			if len(devs) == 1 { // a copy on one GPU: in its own slices
				end = clk.busy(devs[0], start, end-start)
			}
			for _, v := range vals {
				v.(*part).end = end
			}
		}
		return nil, nil
	})
	if c.d.clk != nil && p.end > 0 {
		s.vt = p.end
	}
	if err != nil {
		c.fail(driver.RemoteError, fmt.Sprintf("%s: %v", o.Kind.Call(), err))
	} else if po != nil && c.profCollectiveStalls(o, po) {
		c.profStuck(po, kstart)
	} else if po != nil {
		c.profRan(po, kstart, c.gpuClock(s.vt))
	}
	if f != nil && f.Async {
		c.fail(orInt(f.Code, driver.InternalError), fmt.Sprintf("fault planted on GPU %d", c.dev))
	}
	if p.bad != "" {
		return cudaErrf(o.Kind.Call(), 700, "%s", p.bad)
	}
	return nil
}

// compute writes every rank's output of one collective, reducing in the
// order the algorithm NCCL chose takes (reduceOrder), turned by shift
// ranks (Options.OrderByPast): the bits of a floating-point sum then
// depend on the algorithm, and the ring's on the message's size, as on a
// real machine. byRank turns each rank's allreduce output by its rank
// more (Options.OrderByRank).
func compute(vals []any, algo, shift int, byRank bool) error {
	n := len(vals)
	parts := make([]*part, n)
	for r, v := range vals {
		parts[r] = v.(*part)
	}
	o := parts[0].op
	for r, p := range parts {
		if p.bad != "" {
			return fmt.Errorf("%s", p.bad)
		}
		q := p.op
		if q.Kind != o.Kind || q.Count != o.Count || q.DType != o.DType || q.RedOp != o.RedOp || q.Root != o.Root {
			return fmt.Errorf("ranks called different collectives: rank 0 %s, rank %d %s", describe(o), r, describe(q))
		}
	}
	t, op := dtype.DType(o.DType), measure.ReduceOp(o.RedOp)
	cb := o.Count * int64(t.Size())
	seg := func(b []byte, i int) []byte { return b[int64(i)*cb : int64(i+1)*cb] }
	// Inputs are copied first: an in-place rank's output overwrites them.
	in := make([][]byte, n)
	for r, p := range parts {
		in[r] = append([]byte(nil), p.send...)
	}
	// sum reduces the ranks' pieces: element by element in the order
	// reduceOrder gives for the element's chunk of the piece (last is the
	// rank whose chunk it ends on: the root, or the output's rank).
	sum := func(pick func(r int) []byte, last, shift int) []byte {
		piece := pick(0)
		acc := make([]byte, len(piece))
		esz := t.Size()
		elems := len(piece) / esz
		chunk := max((elems+n-1)/n, 1)
		for lo := 0; lo < elems; lo += chunk {
			hi := min(lo+chunk, elems)
			order := reduceOrder(algo, n, lo/chunk, last)
			if k := shift % n; k > 0 {
				order = append(order[k:], order[:k]...)
			}
			a := acc[lo*esz : hi*esz]
			copy(a, pick(order[0])[lo*esz:hi*esz])
			for _, r := range order[1:] {
				reduce.Into(a, pick(r)[lo*esz:hi*esz], t, op)
			}
		}
		if op == measure.Avg {
			reduce.Divide(acc, t, n)
		}
		return acc
	}
	switch o.Kind {
	case driver.AllReduce:
		acc := sum(func(r int) []byte { return in[r] }, -1, shift)
		for r, p := range parts {
			if byRank && r > 0 {
				copy(p.recv, sum(func(r int) []byte { return in[r] }, -1, shift+r))
				continue
			}
			copy(p.recv, acc)
		}
	case driver.Reduce:
		copy(parts[o.Root].recv, sum(func(r int) []byte { return in[r] }, o.Root, shift))
	case driver.Broadcast:
		for _, p := range parts {
			copy(p.recv, in[o.Root])
		}
	case driver.AllGather:
		for _, p := range parts {
			for q := range parts {
				copy(seg(p.recv, q), in[q])
			}
		}
	case driver.ReduceScatter:
		for r, p := range parts {
			copy(p.recv, sum(func(q int) []byte { return seg(in[q], r) }, r, shift))
		}
	case driver.AllToAll:
		for r, p := range parts {
			for q := range parts {
				copy(seg(p.recv, q), seg(in[q], r))
			}
		}
	case driver.Gather:
		for q := range parts {
			copy(seg(parts[o.Root].recv, q), in[q])
		}
	case driver.Scatter:
		for r, p := range parts {
			copy(p.recv, seg(in[o.Root], r))
		}
	}
	for _, p := range parts {
		if p.corrupt && len(p.recv) >= t.Size() {
			for i := 0; i < t.Size(); i++ {
				p.recv[i] ^= 0xff
			}
		}
	}
	return nil
}

// reduceOrder is the order in which an algorithm adds the ranks' values of
// one chunk of n (a piece split in n chunks): the ring starts each chunk
// one rank after the rank it ends on (the chunk's own rank, or last: the
// root or the output's owner) and goes round; the tree (a chain within a
// node) adds from the last rank down to rank 0; the others in rank order.
func reduceOrder(algo, n, chunk, last int) []int {
	order := make([]int, n)
	switch algo {
	case algoRing:
		end := chunk % n
		if last >= 0 {
			end = last
		}
		for i := range order {
			order[i] = (end + 1 + i) % n
		}
	case algoTree:
		for i := range order {
			order[i] = n - 1 - i
		}
	default:
		for i := range order {
			order[i] = i
		}
	}
	return order
}

func describe(o driver.Op) string {
	return fmt.Sprintf("%s of %d %s (op %d, root %d)", o.Kind.Call(), o.Count, dtype.DType(o.DType), o.RedOp, o.Root)
}

// GroupP2P enqueues n groups of sends and receives, one after another,
// each moved by rot;
// in each, sends are posted first, then each receive takes the oldest
// message from its peer.
func (c *comm) GroupP2P(ops []driver.P2P, n int, rot driver.Rotation, h cuda.Stream) error {
	c.d.cross("GroupP2P")
	if len(ops) == 0 {
		return nil
	}
	moved := make([]driver.P2P, len(ops))
	for k := 0; k < n; k++ {
		if err := c.groupP2P(shifted(moved, ops, rot, k), h); err != nil {
			return afterGroups(err, k, n)
		}
	}
	return nil
}

// GroupSteps enqueues steps n times back to back, moved by rot: copies and
// groups of sends and receives, one crossing for the whole loop, as the
// real binding's C loop issues them.
func (c *comm) GroupSteps(steps []driver.Step, n int, rot driver.Rotation, h cuda.Stream) error {
	c.d.cross("GroupSteps")
	var moved []driver.P2P
	for k := 0; k < n; k++ {
		for i, st := range steps {
			var err error
			if st.Bytes > 0 {
				sh := cuda.DevPtr(rot.Shift(k)) //nolint:gosec // G115: a shift within the buffers, not negative
				err = c.d.copyAsync(st.Dst+sh, st.Src+sh, st.Bytes, h)
			} else {
				moved = shifted(moved[:0], st.Ops, rot, k)
				err = c.groupP2P(moved, h)
			}
			if err != nil {
				return fmt.Errorf("step %d of %d: %w (after %d of %d repetitions issued)", i+1, len(steps), err, k, n)
			}
		}
	}
	return nil
}

// shifted is ops with their buffers moved by rot's shift for repetition
// k, in into (grown to their number).
func shifted(into, ops []driver.P2P, rot driver.Rotation, k int) []driver.P2P {
	sh := cuda.DevPtr(rot.Shift(k)) //nolint:gosec // G115: a shift within the buffers, not negative
	into = into[:0]
	for _, o := range ops {
		o.Buf += sh
		into = append(into, o)
	}
	return into
}

// groupP2P enqueues one group of ops.
func (c *comm) groupP2P(ops []driver.P2P, h cuda.Stream) error {
	for _, o := range ops {
		call := "ncclRecv"
		if o.Send {
			call = "ncclSend"
		}
		if err := c.supported(call, driver.SendRecv); err != nil {
			return err
		}
		if err := c.usable(call); err != nil {
			return err
		}
		t := dtype.DType(o.DType)
		switch {
		case !t.Valid():
			return ncclErr(call, driver.InvalidArgument, fmt.Sprintf("invalid data type %d", o.DType))
		case o.Peer < 0 || o.Peer >= c.cl.n:
			return ncclErr(call, driver.InvalidArgument, fmt.Sprintf("invalid peer %d (communicator of %d ranks)", o.Peer, c.cl.n))
		case o.Count < 0:
			return ncclErr(call, driver.InvalidArgument, fmt.Sprintf("invalid count %d", o.Count))
		}
		if err := c.buffer(call, "buff", o.Buf, o.Count*int64(t.Size())); err != nil {
			return err
		}
		if err := c.d.failNow(call, c.dev); err != nil {
			return err
		}
	}
	s, err := c.streamFor("ncclGroupEnd", h)
	if err != nil {
		return err
	}
	if err := c.d.failNow("ncclGroupEnd", c.dev); err != nil {
		return err
	}
	c.d.noteIssuer(c.dev)
	group := append([]driver.P2P(nil), ops...)
	var pos []*profOp
	for _, o := range group {
		if po := c.profP2P(o); po != nil {
			pos = append(pos, po)
		}
	}
	stall := c.profStalls(group, pos)
	return s.enqueue(func() error {
		var kstart uint64
		if len(pos) > 0 {
			kstart = c.gpuClock(s.vt)
		}
		err := c.exchange(s, group)
		if err == nil {
			for _, po := range pos {
				if stall {
					c.profStuck(po, kstart)
					continue
				}
				c.profRan(po, kstart, c.gpuClock(s.vt))
			}
		}
		return err
	})
}

// message is a send waiting for its receive: its bytes and, under a
// Model, when it was sent.
type message struct {
	b  []byte
	vt float64
}

// exchange runs one group of sends and receives on the rank's stream.
func (c *comm) exchange(s *stream, ops []driver.P2P) error {
	cl := c.cl
	bufs := make([][]byte, len(ops))
	for i, o := range ops {
		b, _, ok := c.d.slice(o.Buf, o.Count*int64(dtype.DType(o.DType).Size()))
		if !ok {
			return cudaErrf("ncclGroupEnd", 700, "rank %d's buffer is no longer device memory", c.rank)
		}
		bufs[i] = b
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	end := s.vt
	for i, o := range ops {
		if o.Send {
			key := [2]int{c.rank, o.Peer}
			cl.mail[key] = append(cl.mail[key], message{b: append([]byte(nil), bufs[i]...), vt: s.vt})
			if clk := c.d.clk; clk != nil {
				end = max(end, s.vt+clk.sendTime(c.dev, cl.members[o.Peer].dev, int64(len(bufs[i]))))
			}
		}
	}
	defer func() { s.vt = end }()
	cl.cond.Broadcast()
	for i, o := range ops {
		if o.Send {
			continue
		}
		key := [2]int{o.Peer, c.rank}
		aborted, expired := cl.wait(func() bool { return len(cl.mail[key]) > 0 })
		switch {
		case aborted:
			c.failLocked(driver.RemoteError, "ncclRecv: "+cl.aborted)
			return nil
		case expired:
			c.failLocked(driver.RemoteError, fmt.Sprintf("ncclRecv: rank %d waited %v for a send from rank %d", c.rank, cl.d.opts.Timeout, o.Peer))
			return nil
		}
		msg := cl.mail[key][0]
		cl.mail[key] = cl.mail[key][1:]
		if len(msg.b) != len(bufs[i]) {
			c.failLocked(driver.InvalidUsage, fmt.Sprintf("rank %d receives %d bytes from rank %d, which sent %d", c.rank, len(bufs[i]), o.Peer, len(msg.b)))
			return nil
		}
		copy(bufs[i], msg.b)
		if clk := c.d.clk; clk != nil {
			end = max(end, max(s.vt, msg.vt)+clk.sendTime(cl.members[o.Peer].dev, c.dev, int64(len(msg.b))))
		}
	}
	return nil
}

// failLocked is fail with cl.mu held.
func (c *comm) failLocked(code int, detail string) {
	if c.async == nil {
		c.async = ncclErr("asynchronous NCCL error", code, detail)
	}
}

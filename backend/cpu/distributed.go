package cpu

import (
	"context"
	"fmt"

	"collbench/dtype"

	"collbench/results"
	"collbench/suites"
)

// OpenDistributed creates this process's rank of a world that spans
// processes. Each operation all-gathers every rank's input through the
// control connection and each rank computes its own output from them: slow,
// but the same collectives, so launchers and multi-process runs can be
// exercised and verified on machines without GPUs.
func (b *Backend) OpenDistributed(ctx context.Context, ctl suites.Control, device int) (suites.World, error) {
	n := ctl.Size()
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	limit := b.opts.MemoryLimit
	if limit == 0 {
		limit = memAvailable() * 3 / 4
	}
	w := &distWorld{ctl: ctl, opts: b.opts, mem: &memory{limit: limit}}
	w.rank = &distRank{w: w, members: all, id: ctl.Rank(), host: ctl.Hosts()[ctl.Rank()]}
	return w, nil
}

type distWorld struct {
	ctl  suites.Control
	opts Options
	mem  *memory
	rank *distRank
}

func (w *distWorld) Size() int                            { return w.ctl.Size() }
func (w *distWorld) Ranks() []suites.Rank                 { return []suites.Rank{w.rank} }
func (w *distWorld) Run(fn func(suites.Rank) error) error { return fn(w.rank) }
func (w *distWorld) Close() error                         { return nil }
func (w *distWorld) Control() suites.Control              { return w.ctl }
func (w *distWorld) Abort(cause error)                    {}

// Split keeps the world-wide exchange and lets each rank use only its
// group's inputs.
func (w *distWorld) Split(l suites.Layout) (suites.World, error) {
	wr := w.ctl.Rank()
	gid, idx := l.Locate(wr)
	if gid < 0 {
		return nil, fmt.Errorf("rank %d is in no group of %s", wr, l.String())
	}
	sw := &distWorld{ctl: w.ctl, opts: w.opts, mem: w.mem}
	sw.rank = &distRank{w: sw, members: l.Groups[gid], id: idx, host: w.rank.host}
	return sw, nil
}

type distRank struct {
	w       *distWorld
	members []int // world ranks of this rank's communicator, by rank
	id      int   // rank in the communicator
	host    string
}

func (r *distRank) Rank() int      { return r.id }
func (r *distRank) Size() int      { return len(r.members) }
func (r *distRank) WorldRank() int { return r.w.ctl.Rank() }
func (r *distRank) Device() results.Device {
	return results.Device{Rank: r.WorldRank(), Name: "host memory on " + r.host}
}

func (r *distRank) local() *rank { return &rank{w: &world{mem: r.w.mem}, worldRank: r.WorldRank()} }

func (r *distRank) Alloc(n int64) (suites.Buffer, error) { return r.local().Alloc(n) }
func (r *distRank) Free(b suites.Buffer) error           { return r.local().Free(b) }
func (r *distRank) Sync() error                          { return nil }
func (r *distRank) Fill(dst suites.View, count int64, p suites.Pattern) error {
	return r.local().Fill(dst, count, p)
}
func (r *distRank) Poison(dst suites.View, count int64, t dtype.DType) error {
	return r.local().Poison(dst, count, t)
}
func (r *distRank) Check(src suites.View, e suites.Expectation) (int64, error) {
	return r.local().Check(src, e)
}
func (r *distRank) FindMismatches(src suites.View, e suites.Expectation, limit int) ([]results.Mismatch, error) {
	return r.local().FindMismatches(src, e, limit)
}
func (r *distRank) ReadHost(src suites.View, bytes int64) ([]byte, error) {
	return r.local().ReadHost(src, bytes)
}

func (r *distRank) Barrier() error {
	_, err := r.w.ctl.AllGather(nil)
	return err
}

// Launch exchanges inputs with every process and computes this rank's output.
func (r *distRank) Launch(c suites.Call) error {
	esz := int64(c.DType.Size())
	k := len(r.members)
	g := suites.CallGeometry(c, k)
	send, err := span(c.Send, g.SendCount*esz)
	if err != nil {
		return err
	}
	recv, err := span(c.Recv, g.RecvCount*esz)
	if err != nil {
		return err
	}
	all, err := r.w.ctl.AllGather(send)
	if err != nil {
		return err
	}
	in := make([][]byte, k)
	for i, wr := range r.members {
		in[i] = all[wr]
		if int64(len(in[i])) != g.SendCount*esz {
			return fmt.Errorf("cpu backend: rank %d sent %d bytes, want %d (ranks disagree on the operation)", wr, len(in[i]), g.SendCount*esz)
		}
	}
	q := r.id
	cb := c.Count * esz
	switch c.Coll {
	case suites.AllReduce, suites.Reduce:
		if c.Coll == suites.Reduce && q != c.Root {
			return nil
		}
		reduceAll(recv, in, 0, g.SendCount*esz, c)
	case suites.ReduceScatter:
		reduceAll(recv, in, int64(q)*cb, int64(q+1)*cb, c)
	case suites.Broadcast:
		copy(recv, in[c.Root])
	case suites.AllGather:
		for p := 0; p < k; p++ {
			copy(recv[int64(p)*cb:], in[p])
		}
	case suites.AllToAll:
		for p := 0; p < k; p++ {
			copy(recv[int64(p)*cb:int64(p+1)*cb], in[p][int64(q)*cb:int64(q+1)*cb])
		}
	case suites.SendRecv:
		copy(recv, in[(q-1+k)%k])
	default:
		return fmt.Errorf("cpu backend: collective %v not implemented", c.Coll)
	}
	if r.w.opts.AfterOp != nil {
		r.w.opts.AfterOp(r.WorldRank(), c, recv)
	}
	return nil
}

// reduceAll writes into dst the reduction of bytes [lo,hi) of every input.
func reduceAll(dst []byte, in [][]byte, lo, hi int64, c suites.Call) {
	copy(dst, in[0][lo:hi])
	for p := 1; p < len(in); p++ {
		reduceInto(dst[:hi-lo], in[p][lo:hi], c.DType, c.Op)
	}
	if c.Op == suites.Avg {
		divideBy(dst[:hi-lo], c.DType, len(in))
	}
}

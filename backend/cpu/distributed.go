package cpu

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"collbench/dtype"
	"collbench/internal/faults"
	"collbench/internal/hostclock"
	"collbench/measure"
	"collbench/results"
	"collbench/watch"
	"collbench/watchdog"
)

// LocalAddresser is implemented by controls that know the address of this
// host that the other processes reach it at.
type LocalAddresser interface {
	LocalIP() string
}

// OpenDistributed creates this process's rank of a world that spans
// processes. After the rendezvous every process listens on a port of the
// address the others reach it at, the addresses and a per-world key are
// shared over the control connection, and ranks connect directly to the
// peers their algorithms need: collective data never passes through the
// control connection.
func (b *Backend) OpenDistributed(ctx context.Context, ctl measure.Control, device int) (measure.World, error) {
	n, me := ctl.Size(), ctl.Rank()
	hosts := ctl.Hosts()
	ip := "127.0.0.1"
	if la, ok := ctl.(LocalAddresser); ok && la.LocalIP() != "" {
		ip = la.LocalIP()
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, fmt.Errorf("rank %d cannot listen for data connections on %s: %v", me, ip, err)
	}
	type hello struct {
		Addr string `json:"addr"`
		Key  []byte `json:"key,omitempty"`
	}
	h := hello{Addr: ln.Addr().String()}
	if me == 0 {
		h.Key = make([]byte, 32)
		if _, err := rand.Read(h.Key); err != nil {
			ln.Close()
			return nil, err
		}
	}
	mine, _ := json.Marshal(h)
	all, err := ctl.AllGather(mine)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("sharing data addresses: %w", err)
	}
	addrs := make([]string, n)
	var key []byte
	for r, raw := range all {
		var got hello
		if err := json.Unmarshal(raw, &got); err != nil || got.Addr == "" {
			ln.Close()
			return nil, fmt.Errorf("rank %d sent a malformed data address", r)
		}
		addrs[r] = got.Addr
		if r == 0 {
			key = got.Key
		}
	}
	if len(key) == 0 {
		ln.Close()
		return nil, fmt.Errorf("rank 0 sent no data key")
	}
	track := watchdog.BoardFrom(ctx).For(me)
	m := newMesh(me, hosts, ln, addrs, key, b.opts.Faults, track)
	w := &distWorld{ctl: ctl, opts: b.opts, mem: processMemory(me, hosts, b.opts.MemoryLimit), m: m, splits: new(atomic.Int32)}
	all2 := make([]int, n)
	for i := range all2 {
		all2[i] = i
	}
	w.rank = &distRank{w: w, c: &comm{m: m, id: 0, members: all2, me: me, scratch: make([]byte, pieceSize)},
		host: hosts[me], track: track, pace: &faults.Throttle{Rate: b.opts.Faults.RankRate(me, hosts[me])}}
	return w, nil
}

type distWorld struct {
	ctl    measure.Control
	opts   Options
	mem    *memory
	m      *mesh
	rank   *distRank
	splits *atomic.Int32
	child  bool
}

func (w *distWorld) Size() int                             { return w.ctl.Size() }
func (w *distWorld) Ranks() []measure.Rank                 { return []measure.Rank{w.rank} }
func (w *distWorld) Run(fn func(measure.Rank) error) error { return fn(w.rank) }
func (w *distWorld) Control() measure.Control              { return w.ctl }

// Abort closes every data connection so a rank blocked on one returns.
func (w *distWorld) Abort(cause error) { w.m.abort(cause) }

// Close ends the data connections (a split world leaves them to its parent).
func (w *distWorld) Close() error {
	if !w.child {
		w.m.abort(fmt.Errorf("the world is closed"))
	}
	return nil
}

// MemoryBudget is what this process's rank may allocate.
func (w *distWorld) MemoryBudget() (int64, string) { return w.mem.budget(1) }

// Split gives this rank a communicator of its group, on the same data
// connections; every process splits in the same order, so communicator
// ids agree.
func (w *distWorld) Split(l measure.Layout) (measure.World, error) {
	wr := w.ctl.Rank()
	gid, idx := l.Locate(wr)
	if gid < 0 {
		return nil, fmt.Errorf("rank %d is in no group of %s", wr, l.String())
	}
	seq := w.splits.Add(1)
	sw := &distWorld{ctl: w.ctl, opts: w.opts, mem: w.mem, m: w.m, splits: w.splits, child: true}
	sw.rank = &distRank{w: sw, c: &comm{m: w.m, id: uint32(seq)<<16 | uint32(gid+1), members: l.Groups[gid], me: idx, //nolint:gosec // G115: a communicator id: the sequence number wraps by design
		scratch: w.rank.c.scratch}, host: w.rank.host, track: w.rank.track, pace: w.rank.pace}
	return sw, nil
}

type distRank struct {
	w     *distWorld
	c     *comm
	host  string
	track *watchdog.Tracker
	ops   int64
	pace  *faults.Throttle // the rank's own copies and fills at a planted rate
}

func (r *distRank) Rank() int      { return r.c.me }
func (r *distRank) Size() int      { return r.c.size() }
func (r *distRank) WorldRank() int { return r.w.ctl.Rank() }
func (r *distRank) Device() results.Device {
	return results.Device{Rank: r.WorldRank(), Name: "host memory on " + r.host}
}

func (r *distRank) local() *rank {
	return &rank{w: &world{mem: r.w.mem, stop: r.w.m.aborted}, worldRank: r.WorldRank(), track: r.track, local: r.pace}
}

func (r *distRank) Alloc(n int64) (measure.Buffer, error) { return r.local().Alloc(n) }
func (r *distRank) Free(b measure.Buffer) error           { return r.local().Free(b) }
func (r *distRank) Sync() error                           { return nil }
func (r *distRank) Fill(dst measure.View, count int64, p measure.Pattern) error {
	return r.local().Fill(dst, count, p)
}
func (r *distRank) Poison(dst measure.View, count int64, t dtype.DType) error {
	return r.local().Poison(dst, count, t)
}
func (r *distRank) Check(src measure.View, e measure.Expectation) (int64, error) {
	return r.local().Check(src, e)
}
func (r *distRank) FindMismatches(src measure.View, e measure.Expectation, limit int) ([]results.Mismatch, error) {
	return r.local().FindMismatches(src, e, limit)
}
func (r *distRank) ReadHost(src measure.View, bytes int64) ([]byte, error) {
	return r.local().ReadHost(src, bytes)
}
func (r *distRank) TimeEach(c measure.Call, iters int) ([]float64, error) {
	return timeEach(r, c, iters)
}

// Traffic returns the bytes this rank has sent and received on its data
// connections, headers included.
func (r *distRank) Traffic() (sent, recvd int64) { return r.w.m.sent.Load(), r.w.m.recvd.Load() }

func (r *distRank) Barrier() error {
	r.track.SetPhase(watchdog.Barrier)
	_, err := r.w.ctl.AllGather(nil)
	return err
}

// Launch runs one collective with this rank's peers.
func (r *distRank) Launch(c measure.Call) error {
	if err := r.w.m.abortedErr(); err != nil {
		return err
	}
	r.ops++
	if at, ok := r.w.opts.Faults.HangAt(r.WorldRank()); ok && r.ops >= at {
		// Planted: this collective never returns until the world is aborted.
		r.track.Waiting(watchdog.NotWaiting)
		<-r.w.m.aborted
		return r.w.m.abortErr
	}
	r.w.opts.Faults.ActOnProcess(r.WorldRank(), r.ops)
	if d := r.w.opts.Faults.Late(r.WorldRank()); d > 0 {
		// Planted: a straggling host, slow to issue each operation.
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.w.m.aborted:
			t.Stop()
			return r.w.m.abortErr
		}
	}
	issued := time.Now()
	esz := int64(c.DType.Size())
	g := measure.CallGeometry(c, r.Size())
	send, err := span(c.Send, g.SendCount*esz)
	if err != nil {
		return err
	}
	recv, err := span(c.Recv, g.RecvCount*esz)
	if err != nil {
		return err
	}
	sink := r.w.opts.Watch
	var before map[int][2]int64
	if sink != nil {
		before = r.w.m.wire()
	}
	if err := r.c.run(c, send, recv); err != nil {
		return err
	}
	if r.c.size() == 1 {
		// Only a local copy: the planted rate applies to it here (links
		// apply it to what crosses them).
		if err := r.local().paceLocal(len(recv)); err != nil {
			return err
		}
	}
	if r.w.opts.AfterOp != nil {
		r.w.opts.AfterOp(r.WorldRank(), c, recv)
	}
	if sink != nil {
		// On host memory a collective starts when its rank issues it.
		at := issued.UnixNano()
		sink.Send(watch.Summary{Comm: uint64(r.c.id), Seq: uint64(r.ops), Ranks: r.c.size(), Rank: r.c.me, Host: r.host, //nolint:gosec // G115: counts, not negative
			Func: c.Coll.String(), IssueNS: at, StartNS: at, EndNS: time.Now().UnixNano(), Clock: hostclock.ID(), Links: r.c.links(before, r.w.m.wire())})
	}
	return nil
}

// LibraryMemory is what the backend keeps besides the buffers: a piece of
// scratch per rank, and the data connections' socket buffers.
func (w *distWorld) LibraryMemory() int64 { return pieceSize }

// UsedMemory is the host memory this process's rank has allocated.
func (w *distWorld) UsedMemory() int64 {
	w.mem.mu.Lock()
	defer w.mem.mu.Unlock()
	return w.mem.used
}

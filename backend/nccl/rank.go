package nccl

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"collbench/backend/nccl/driver"
	"collbench/backend/nccl/kernels"
	"collbench/cuda"
	"collbench/internal/faults"
	"collbench/internal/syncx"
	"collbench/internal/words"
	"collbench/measure"
	"collbench/results"
	"collbench/watchdog"
)

// hostChunk bounds the host memory the copy-back fallback uses per rank.
const hostChunk = 32 << 20

type rank struct {
	w         *world
	id        int // rank in comm
	size      int // ranks in comm
	worldRank int
	// derived ranks belong to a split world: they share the parent's device
	// resources and own only their communicator.
	derived bool
	dev     gpu
	wk      *worker
	drv     driver.Driver
	ctx     cuda.Context
	stream  cuda.Stream
	comm    driver.Comm
	// aborted says whether ncclCommAbort was called on comm (from any
	// goroutine): the communicator is then not destroyed.
	aborted *commAbort
	mod     cuda.Module
	fill    cuda.Function
	check   cuda.Function
	counter cuda.DevPtr
	events  []cuda.Event
	p2p     []driver.P2P  // the sends and receives of the exchange being issued
	steps   []driver.Step // the steps of a collective issued in rounds (table.go: rounds)
	rep     driver.Op     // the operation Repeat is issuing
	// gang is the local ranks of the rank's communicator when one thread
	// issues for all of them (--threads one), nil otherwise; gi is the
	// rank's place in it (0: the thread that issues).
	gang *gang
	gi   int
	// ops counts the operations the rank has issued, for planted faults;
	// a split world's rank shares its parent's count.
	ops *atomic.Int64
	// track is the rank's progress record (nil without a watchdog): the
	// rank marks on it what its thread waits for.
	track *watchdog.Tracker
	// cpus are the CPUs the rank's thread is bound to (local to its GPU),
	// "" where it was not bound.
	cpus string
	// capturing is set while the rank captures a CUDA graph on its own
	// thread.
	capturing bool
	// kernelErr is why the fill/check kernels could not load; the rank then
	// fills and checks through bounded host copies.
	kernelErr error
	// freeBefore and freeAfter are the GPU's free memory around the
	// communicator's creation (the memory report).
	freeBefore, freeAfter int64
	// owned are the buffers allocated through this rank and not yet
	// freed: the profiler's records are matched to ranks by address.
	owned *bufList
	// watchComm names the rank's communicator alike on all its ranks, and
	// watchSeq counts the operations issued on it, for collbench watch.
	watchComm, watchSeq uint64
	// rotCall is the call whose buffers the rank moves between
	// repetitions (measure.Call.Rotate), and rotNext the place its next
	// repetition takes; p2pMoved holds an exchange moved to one place.
	rotCall  measure.Call
	rotNext  int
	p2pMoved []driver.P2P
}

// bufList is a rank's buffers; a split world's rank shares its parent's.
type bufList struct {
	mu   sync.Mutex
	bufs []*devBuf
}

type devBuf struct {
	ptr cuda.DevPtr
	n   int64
	// reg is the buffer's registration with the rank's communicator; the
	// memory then comes from ncclMemAlloc.
	reg driver.Registration
	// ncclMem says the memory came from ncclMemAlloc (freed with ncclMemFree).
	ncclMem bool
}

func (b *devBuf) Len() int64 { return b.n }

func (r *rank) setup() error {
	var err error
	if r.ctx, err = r.drv.RetainPrimary(r.dev.index); err != nil {
		return err
	}
	if err := r.drv.SetCurrent(r.ctx); err != nil {
		return err
	}
	if r.stream, err = r.drv.NewStream(); err != nil {
		return err
	}
	if r.counter, err = r.drv.Alloc(8); err != nil {
		return err
	}
	if r.mod, err = r.drv.LoadModule(kernels.PTX()); err != nil {
		r.kernelErr = err
		return nil
	}
	if r.fill, err = r.drv.GetFunction(r.mod, "cb_fill"); err != nil {
		r.kernelErr = err
		return nil
	}
	if r.check, err = r.drv.GetFunction(r.mod, "cb_check"); err != nil {
		r.kernelErr = err
	}
	return nil
}

// commAbort is one communicator's ncclCommAbort, run at most once, on a
// goroutine of its own: an abort that never returns holds no caller.
type commAbort struct {
	once sync.Once
	on   atomic.Bool
	done chan struct{}
}

func newCommAbort() *commAbort { return &commAbort{done: make(chan struct{})} }

// start aborts c unless an abort has started.
func (a *commAbort) start(c driver.Comm) {
	a.once.Do(func() {
		a.on.Store(true)
		go func() {
			defer close(a.done)
			_ = c.Abort()
		}()
	})
}

func (a *commAbort) started() bool { return a.on.Load() }

// wait returns once a started abort has.
func (a *commAbort) wait() { <-a.done }

func (r *rank) teardown() error {
	var errs []error
	switch {
	case r.comm == nil:
	case r.aborted.started():
		// Released only once NCCL has (the abort runs on a goroutine of
		// its own): the context must outlive it. World.Close bounds it.
		r.aborted.wait()
	case r.w.wedged.Load():
		// NCCL's proxy thread never ended the events of a recorded
		// operation: ncclCommDestroy would wait for it for ever, so the
		// communicator is aborted instead.
		errs = append(errs, r.comm.Abort())
	default:
		errs = append(errs, r.comm.Destroy())
	}
	r.comm = nil
	if r.derived {
		return errors.Join(errs...)
	}
	for _, e := range r.events {
		_ = r.drv.DestroyEvent(e)
	}
	r.events = nil
	if r.counter != 0 {
		errs = append(errs, r.drv.Free(r.counter))
	}
	if r.mod != nil {
		errs = append(errs, r.drv.UnloadModule(r.mod))
	}
	if r.stream != nil {
		errs = append(errs, r.drv.DestroyStream(r.stream))
	}
	if r.ctx != nil {
		errs = append(errs, r.drv.ReleasePrimary(r.dev.index))
	}
	return errors.Join(errs...)
}

// label names the rank and its GPU in errors.
func (r *rank) label() string {
	if r.dev.busID == "" {
		return fmt.Sprintf("rank %d (GPU %d)", r.worldRank, r.dev.index)
	}
	return fmt.Sprintf("rank %d (GPU %d, %s)", r.worldRank, r.dev.index, r.dev.busID)
}

func (r *rank) Rank() int      { return r.id }
func (r *rank) Size() int      { return r.size }
func (r *rank) WorldRank() int { return r.worldRank }

func (r *rank) Device() results.Device {
	return results.Device{Rank: r.worldRank, Name: r.dev.name, BusID: r.dev.busID, CPUs: r.cpus}
}

// Alloc allocates a buffer as NCCL's benchmark (2.19 and newer) does: with
// ncclMemAlloc where the loaded NCCL has it, unregistered, else (or where it
// fails) with cuMemAlloc. On 4x H200 the two differ by 1-2% at some sizes
// (reduce-scatter of 2 GiB).
func (r *rank) Alloc(bytes int64) (measure.Buffer, error) {
	if r.w.b.lib.Features.Register {
		if p, err := r.drv.MemAlloc(max(bytes, 256)); err == nil {
			b := &devBuf{ptr: p, n: bytes, ncclMem: true}
			r.keep(b)
			return b, nil
		}
	}
	p, err := r.drv.Alloc(max(bytes, 256))
	if err != nil {
		if cuda.IsOutOfMemory(err) {
			free, _, ferr := r.drv.MemInfo()
			if ferr != nil {
				free = -1
			}
			return nil, &measure.OutOfMemoryError{Rank: r.worldRank, Requested: bytes, Free: free}
		}
		return nil, err
	}
	b := &devBuf{ptr: p, n: bytes}
	r.keep(b)
	return b, nil
}

// keep remembers a buffer of the rank's; forget drops it.
func (r *rank) keep(b *devBuf) {
	r.owned.mu.Lock()
	r.owned.bufs = append(r.owned.bufs, b)
	r.owned.mu.Unlock()
}

func (r *rank) forget(b *devBuf) {
	r.owned.mu.Lock()
	defer r.owned.mu.Unlock()
	for i, x := range r.owned.bufs {
		if x == b {
			r.owned.bufs = append(r.owned.bufs[:i], r.owned.bufs[i+1:]...)
			return
		}
	}
}

// owns says whether the device address p lies in one of the rank's buffers.
func (r *rank) owns(p uint64) bool {
	r.owned.mu.Lock()
	defer r.owned.mu.Unlock()
	for _, b := range r.owned.bufs {
		if p >= uint64(b.ptr) && p < uint64(b.ptr)+uint64(max(b.n, 256)) { //nolint:gosec // G115: buffer sizes are positive
			return true
		}
	}
	return false
}

func (r *rank) Free(sb measure.Buffer) error {
	b := sb.(*devBuf)
	r.forget(b)
	if b.reg != nil {
		err := r.comm.Deregister(b.reg)
		return errors.Join(err, r.drv.MemFree(b.ptr))
	}
	if b.ncclMem {
		return r.drv.MemFree(b.ptr)
	}
	return r.drv.Free(b.ptr)
}

// AllocRegistered allocates bytes with ncclMemAlloc and registers them with
// the rank's communicator: locally, or as a symmetric window (a collective
// call: every rank of the communicator registers the same size at once).
func (r *rank) AllocRegistered(bytes int64, symmetric bool) (measure.Buffer, error) {
	lib := r.w.b.lib
	switch {
	case symmetric && !lib.Features.Windows:
		return nil, fmt.Errorf("%w: symmetric registration needs NCCL 2.27 or newer (loaded %s)", measure.ErrUnsupported, FormatVersion(lib.Version))
	case !lib.Features.Register:
		return nil, fmt.Errorf("%w: buffer registration needs NCCL 2.19 or newer (loaded %s)", measure.ErrUnsupported, FormatVersion(lib.Version))
	}
	p, err := r.drv.MemAlloc(max(bytes, 256))
	if err != nil {
		return nil, fmt.Errorf("ncclMemAlloc of %s: %w", words.BytesApprox(bytes), err)
	}
	reg, err := r.comm.Register(p, max(bytes, 256), symmetric)
	if err != nil {
		_ = r.drv.MemFree(p)
		return nil, err
	}
	b := &devBuf{ptr: p, n: bytes, reg: reg, ncclMem: true}
	r.keep(b)
	return b, nil
}

func (r *rank) addr(v measure.View, bytes int64) (cuda.DevPtr, error) {
	b, ok := v.Buf.(*devBuf)
	if !ok {
		return 0, fmt.Errorf("nccl backend: foreign buffer %T", v.Buf)
	}
	if v.Off < 0 || v.Off+bytes > b.n {
		return 0, fmt.Errorf("nccl backend: %d bytes at offset %d overrun a %d-byte buffer", bytes, v.Off, b.n)
	}
	return b.ptr + cuda.DevPtr(v.Off), nil
}

// Launch issues c once.
func (r *rank) Launch(c measure.Call) error { return r.Repeat(c, 1) }

// Repeat issues c n times back to back on the rank's stream. A collective
// that is one NCCL call, one send/recv pair or one group of sends and
// receives (the exchanges with many peers) is issued from C in a single
// crossing for all n, as NCCL's benchmark's loop issues them, and so is
// the hypercube, a copy and a group per round (GroupSteps). With one
// thread issuing for every local GPU (--threads one), the rank's gang
// issues each of the n operations in one group with the other GPUs'.
func (r *rank) Repeat(c measure.Call, n int) error {
	if err := r.plantedHang(n); err != nil {
		return err
	}
	if r.w.b.watch != nil {
		defer r.issued(time.Now(), c.Coll)
	}
	single, send, recv, err := r.prepare(c)
	if err != nil {
		return err
	}
	rot := r.rotation(c, n)
	if single {
		r.rep.Rot = rot
		if g := r.issuingGang(); g != nil {
			return g.step(r, share{op: &r.rep, per: 1, n: n})
		}
		return r.comm.Repeat(&r.rep, n, r.stream)
	}
	esz := int64(c.DType.Size())
	if rounds := ops[c.Coll].rounds; rounds != nil {
		steps := rounds(r, c, send, recv, esz)
		if r.issuingGang() == nil {
			return r.comm.GroupSteps(steps, n, rot, r.stream)
		}
		for k := 0; k < n; k++ {
			if err := r.gangSteps(steps, cuda.DevPtr(rot.Shift(k))); err != nil { //nolint:gosec // G115: a shift within the buffers, not negative
				return err
			}
		}
		return nil
	}
	ops, err := r.exchangeOps(c, send, recv, esz)
	if err != nil {
		return err
	}
	return r.exchange(ops, n, rot)
}

// rotation is how the n repetitions of c about to be issued move their
// buffers: where c may rotate (measure.Call.Rotate), by the larger of its
// send and receive lengths (as NCCL's benchmark moves them), over as many
// places as both buffers hold. A loop starts at the buffers' start and
// goes on where its last step left off: a call equal to the last one
// moved (the same operation, buffers and loop) continues it. Other calls
// move nothing.
func (r *rank) rotation(c measure.Call, n int) driver.Rotation {
	if c.Rotate == measure.NoRotation {
		return driver.Rotation{}
	}
	esz := int64(c.DType.Size())
	g := measure.CallGeometry(c, r.Size())
	stride := max(g.SendCount, g.RecvCount) * esz
	if stride <= 0 {
		return driver.Rotation{}
	}
	steps := int64(-1)
	for _, v := range []struct {
		view  measure.View
		bytes int64
	}{{c.Send, g.SendCount * esz}, {c.Recv, g.RecvCount * esz}} {
		b, ok := v.view.Buf.(*devBuf)
		if !ok {
			return driver.Rotation{}
		}
		if fit := (b.n-v.view.Off-v.bytes)/stride + 1; steps < 0 || fit < steps {
			steps = fit
		}
	}
	if steps <= 1 {
		return driver.Rotation{}
	}
	if c != r.rotCall {
		r.rotCall, r.rotNext = c, 0
	}
	rot := driver.Rotation{Stride: stride, Steps: int(steps), First: r.rotNext}
	r.rotNext = (r.rotNext + n) % int(steps)
	return rot
}

// plantedHang counts the n operations the rank is about to issue and acts
// out a fault planted at one of them (Backend.PlantFaults): a hang holds
// the rank's thread until the world is aborted; a kill or stop, in a
// process of its own, signals the process.
func (r *rank) plantedHang(n int) error {
	fs := r.w.b.faults
	if fs == nil {
		return nil
	}
	done := r.ops.Add(int64(n))
	if _, at := fs.ProcessFault(r.worldRank); r.w.ctl != nil && at > done-int64(n) && at <= done {
		// A rank with a process of its own: a planted kill or stop at
		// one of these n operations happens before they are issued.
		fs.ActOnProcess(r.worldRank, at)
	}
	if d := fs.Late(r.worldRank); d > 0 {
		time.Sleep(d) // a straggling host: the rank issues late
		if hd, ok := r.w.b.drv.(driver.HostDelayer); ok {
			if err := hd.HostDelay(r.stream, d); err != nil { // the fake machine's GPU waits as long
				return err
			}
		}
	}
	if at, ok := fs.HangAt(r.worldRank); !ok || done < at {
		return nil
	}
	<-r.w.stopChan()
	return fmt.Errorf("%w: %v (a hang planted with %s)", syncx.ErrAborted, r.w.stopCause, faults.EnvFaults)
}

// buffers are c's send and receive addresses on the rank.
func (r *rank) buffers(c measure.Call) (send, recv cuda.DevPtr, err error) {
	esz := int64(c.DType.Size())
	g := measure.CallGeometry(c, r.Size())
	if send, err = r.addr(c.Send, g.SendCount*esz); err != nil {
		return 0, 0, err
	}
	recv, err = r.addr(c.Recv, g.RecvCount*esz)
	return send, recv, err
}

// prepare sets r.rep to c when c is one NCCL call (or one send/recv pair)
// and says whether it is; the other collectives are exchanges (their row's
// exchange or rounds, table.go). It returns c's buffers' addresses.
func (r *rank) prepare(c measure.Call) (single bool, send, recv cuda.DevPtr, err error) {
	if send, recv, err = r.buffers(c); err != nil {
		return false, 0, 0, err
	}
	o := ops[c.Coll]
	kind := o.call
	if o.native != nil && !o.native(r.w.b.lib.Features) {
		kind = 0
	}
	to, from := 0, 0
	if o.ring {
		to, from = (r.id+1)%r.Size(), (r.id-1+r.Size())%r.Size()
	}
	if kind == 0 {
		return false, send, recv, nil
	}
	r.rep = driver.Op{Kind: kind, Send: send, Recv: recv, Count: c.Count, DType: int(c.DType), RedOp: int(c.Op), Root: c.Root, To: to, From: from}
	return true, send, recv, nil
}

// exchangeOps is the group of sends and receives that is one of c on the
// rank (its row's exchange): alltoall, gather and scatter (libraries
// without the calls) and alltoallv. The slice is the rank's, reused by the
// next exchange.
func (r *rank) exchangeOps(c measure.Call, send, recv cuda.DevPtr, esz int64) ([]driver.P2P, error) {
	o := ops[c.Coll]
	if o.exchange == nil {
		return nil, fmt.Errorf("nccl backend: collective %v not implemented", c.Coll)
	}
	return o.exchange(r, c, send, recv, esz), nil
}

// hypercube is one allgather by recursive doubling, as NCCL's benchmark
// issues it: its own block copied into place (out of place), then a group
// per round exchanging ever larger blocks with rank XOR 2^k.
func (r *rank) hypercube(c measure.Call, send, recv cuda.DevPtr, esz int64) []driver.Step {
	dt := int(c.DType)
	part := c.Count * esz
	steps := r.steps[:0]
	if own := recv + cuda.DevPtr(int64(r.id)*part); own != send { //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
		steps = append(steps, driver.Step{Dst: own, Src: send, Bytes: part})
	}
	for mask := 1; mask < r.Size(); mask <<= 1 {
		blk := r.id &^ (mask - 1)
		theirs := blk ^ mask
		steps = append(steps, driver.Step{Ops: []driver.P2P{
			sendOp(recv+cuda.DevPtr(int64(blk)*part), c.Count*int64(mask), dt, r.id^mask),      //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
			recvOp(recv+cuda.DevPtr(int64(theirs)*part), c.Count*int64(mask), dt, r.id^mask)}}) //nolint:gosec // G115: counts, offsets and ranks come from a plan checked against the buffers' sizes (far below 2^63) and rank counts (far below 2^31)
	}
	r.steps = steps
	return steps
}

// gangSteps issues one repetition of steps, moved by sh, where a gang
// issues for every local GPU: the copies on the rank's stream, each group
// in a step of the gang's with the other GPUs' groups.
func (r *rank) gangSteps(steps []driver.Step, sh cuda.DevPtr) error {
	for _, st := range steps {
		if st.Bytes > 0 {
			if err := r.drv.CopyAsync(st.Dst+sh, st.Src+sh, st.Bytes, r.stream); err != nil {
				return err
			}
			continue
		}
		moved := append(r.p2p[:0], st.Ops...)
		for i := range moved {
			moved[i].Buf += sh
		}
		if err := r.exchange(moved, 1, driver.Rotation{}); err != nil {
			return err
		}
	}
	return nil
}

// exchange issues ops as one group on the rank's stream n times, moved by
// rot, and keeps their storage for the next exchange, so that issuing one
// allocates nothing. A gang issues each group in a step of its own, with
// the other GPUs' groups.
func (r *rank) exchange(ops []driver.P2P, n int, rot driver.Rotation) error {
	r.p2p = ops
	if g := r.issuingGang(); g != nil {
		for k := 0; k < n; k++ {
			moved := r.p2pMoved[:0]
			for _, o := range ops {
				o.Buf += cuda.DevPtr(rot.Shift(k)) //nolint:gosec // G115: a shift within the buffers, not negative
				moved = append(moved, o)
			}
			r.p2pMoved = moved
			if err := g.step(r, share{p2p: moved, n: 1}); err != nil {
				return err
			}
		}
		return nil
	}
	return r.comm.GroupP2P(ops, n, rot, r.stream)
}

// grouped runs calls inside ncclGroupStart/End, always closing the group.
func (r *rank) grouped(calls func() error) error {
	if err := r.drv.GroupStart(); err != nil {
		return err
	}
	err := calls()
	return errors.Join(err, r.drv.GroupEnd())
}

func (r *rank) Sync() error {
	if err := r.syncStream(); err != nil {
		if aerr := r.comm.AsyncError(); aerr != nil {
			return fmt.Errorf("%w (%v)", aerr, err)
		}
		return err
	}
	return r.comm.AsyncError()
}

// syncStream waits for the rank's stream. For the watchdog the rank waits
// for every rank of its communicator meanwhile: a collective on the GPU
// ends only when every rank has issued its part, so a rank whose thread
// is stuck before it issues is told from those whose GPUs wait for it.
func (r *rank) syncStream() error {
	r.track.Awaits(watchdog.WaitingAll)
	err := r.drv.Synchronize(r.stream)
	r.track.Awaits(watchdog.NotWaiting)
	return err
}

func (r *rank) Barrier() error { return r.w.barrier() }

// ReadHost waits for the stream and copies bytes at src to the host.
func (r *rank) ReadHost(src measure.View, bytes int64) ([]byte, error) {
	ptr, err := r.addr(src, bytes)
	if err != nil {
		return nil, err
	}
	if err := r.syncStream(); err != nil {
		return nil, err
	}
	out := make([]byte, bytes)
	return out, r.drv.CopyToHost(out, ptr)
}

// forceGroupedAllToAll makes alltoall use grouped send/recv even where the
// library has ncclAlltoAll (tests exercise the fallback with it).
var forceGroupedAllToAll = false

// useNativeAllToAll decides between ncclAlltoAll (2.28.3+) and the
// grouped send/recv fallback.
func useNativeAllToAll(has bool) bool { return has && !forceGroupedAllToAll }

// sendOp and recvOp describe a send of count elements of type dt from buf
// to peer, and a receive into buf from peer.
func sendOp(buf cuda.DevPtr, count int64, dt, peer int) driver.P2P {
	return driver.P2P{Buf: buf, Count: count, DType: dt, Peer: peer, Send: true}
}

func recvOp(buf cuda.DevPtr, count int64, dt, peer int) driver.P2P {
	return driver.P2P{Buf: buf, Count: count, DType: dt, Peer: peer}
}

// LaunchGroup issues c n times as one NCCL group; with one thread issuing
// for every local GPU, one group holds every GPU's n operations.
func (r *rank) LaunchGroup(c measure.Call, n int) error {
	if g := r.issuingGang(); g != nil {
		single, _, _, err := r.prepare(c)
		if err != nil {
			return err
		}
		if single {
			if err := r.plantedHang(n); err != nil {
				return err
			}
			if r.w.b.watch != nil {
				defer r.issued(time.Now(), c.Coll)
			}
			r.rep.Rot = r.rotation(c, n)
			return g.step(r, share{op: &r.rep, per: n, n: 1})
		}
	}
	return r.grouped(func() error {
		for k := 0; k < n; k++ {
			if err := r.Launch(c); err != nil {
				return err
			}
		}
		return nil
	})
}

// Clock is the rank's stream's modeled time where the machine models time
// (the fake machine under a model; measure.VirtualClock), nil on a GPU.
func (r *rank) Clock() func() time.Time {
	vc, ok := r.drv.(driver.VirtualClock)
	if !ok {
		return nil
	}
	if _, modeled := vc.StreamTime(r.stream); !modeled {
		return nil
	}
	return func() time.Time {
		t, _ := vc.StreamTime(r.stream)
		return t
	}
}

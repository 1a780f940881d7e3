package fakegpu

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "ncclside.h"

static int fp_version;
static void *fp_plugin;
static int fp_mask; // NCCL's activation mask: the plugin writes it

static int fp_load(int want) {
	void *h = dlopen(NULL, RTLD_NOW | RTLD_LOCAL);
	if (!h) return 0;
	if (want >= 6 && (fp_plugin = dlsym(h, "ncclProfiler_v6")) != NULL) { fp_version = 6; return 6; }
	if (want >= 5 && (fp_plugin = dlsym(h, "ncclProfiler_v5")) != NULL) { fp_version = 5; return 5; }
	if (want >= 4 && (fp_plugin = dlsym(h, "ncclProfiler_v4")) != NULL) { fp_version = 4; return 4; }
	return 0;
}

static int fp_get_mask(void) { return __atomic_load_n(&fp_mask, __ATOMIC_RELAXED); }

static void *fp_init(uint64_t hash, int nodes, int ranks, int rank, int *err) {
	void *ctx = NULL;
	if (fp_version >= 5) *err = ((fp_v5 *)fp_plugin)->init(&ctx, hash, &fp_mask, "", nodes, ranks, rank, NULL);
	else *err = ((fp_v4 *)fp_plugin)->init(&ctx, &fp_mask, "", hash, nodes, ranks, rank, NULL);
	return ctx;
}

static void fp_finalize(void *ctx) {
	if (fp_version >= 5) ((fp_v5 *)fp_plugin)->finalize(ctx); else ((fp_v4 *)fp_plugin)->finalize(ctx);
}

static void *fp_start(void *ctx, int type, void *parent, int rank, fp_union *u) {
	void *handle = NULL;
	if (fp_version >= 5) {
		fp_descr5 d; memset(&d, 0, sizeof d);
		d.type = type; d.parentObj = parent; d.rank = rank; d.u = *u;
		((fp_v5 *)fp_plugin)->startEvent(ctx, &handle, &d);
	} else {
		fp_descr4 d; memset(&d, 0, sizeof d);
		d.type = (uint8_t)type; d.parentObj = parent; d.rank = rank; d.u = *u;
		((fp_v4 *)fp_plugin)->startEvent(ctx, &handle, &d);
	}
	return handle;
}

static void fp_stop(void *h) {
	if (h == NULL) return;
	if (fp_version >= 5) ((fp_v5 *)fp_plugin)->stopEvent(h); else ((fp_v4 *)fp_plugin)->stopEvent(h);
}

static void fp_record(void *h, int state, fp_state *a) {
	if (h == NULL) return;
	if (fp_version >= 5) ((fp_v5 *)fp_plugin)->recordEventState(h, state, a); else ((fp_v4 *)fp_plugin)->recordEventState(h, state, a);
}

static void *fp_coll_event(void *ctx, int rank, uint64_t seq, const char *func, uint64_t send, uint64_t recv, size_t count, int root,
		const char *dtype, int channels, const char *algo, const char *proto) {
	fp_union u; memset(&u, 0, sizeof u);
	u.coll.seqNumber = seq; u.coll.func = func; u.coll.sendBuff = (const void *)(uintptr_t)send; u.coll.recvBuff = (void *)(uintptr_t)recv;
	u.coll.count = count; u.coll.root = root; u.coll.datatype = dtype; u.coll.nChannels = (uint8_t)channels; u.coll.nWarps = 16;
	u.coll.algo = algo; u.coll.proto = proto;
	return fp_start(ctx, 1 << 1, NULL, rank, &u);
}

static void *fp_p2p_event(void *ctx, int rank, const char *func, uint64_t buf, size_t count, const char *dtype, int peer, int channels) {
	fp_union u; memset(&u, 0, sizeof u);
	u.p2p.func = func; u.p2p.buff = (void *)(uintptr_t)buf; u.p2p.count = count; u.p2p.datatype = dtype; u.p2p.peer = peer;
	u.p2p.nChannels = (uint8_t)channels;
	return fp_start(ctx, 1 << 2, NULL, rank, &u);
}

// fp_kernel_channel delivers one channel's kernel start and stop, as NCCL's
// proxy does once the kernel has run.
static void fp_kernel_channel(void *ctx, void *parent, int rank, int channel, uint64_t start, uint64_t stop) {
	fp_union u; memset(&u, 0, sizeof u);
	u.kernelCh.channelId = (uint8_t)channel; u.kernelCh.pTimer = start;
	void *h = fp_start(ctx, 1 << 6, parent, rank, &u);
	fp_state a; memset(&a, 0, sizeof a);
	a.kernelCh.pTimer = stop;
	fp_record(h, 22, &a);
	fp_stop(h);
}

// fp_kernel_stuck starts one channel's kernel event that never ends, as
// NCCL 2.28.3's proxy does when it stalls.
static void fp_kernel_stuck(void *ctx, void *parent, int rank, int channel, uint64_t start) {
	fp_union u; memset(&u, 0, sizeof u);
	u.kernelCh.channelId = (uint8_t)channel; u.kernelCh.pTimer = start;
	(void)fp_start(ctx, 1 << 6, parent, rank, &u);
}

// fp_proxy delivers a proxy operation of steps network steps with peer;
// each send step is on the wire for wire_ns.
static void fp_proxy(void *ctx, void *parent, int rank, int peer, int isSend, int steps, size_t stepBytes, uint64_t wire_ns) {
	fp_union u; memset(&u, 0, sizeof u);
	u.proxyOp.peer = peer; u.proxyOp.isSend = isSend; u.proxyOp.nSteps = steps; u.proxyOp.chunkSize = (int)stepBytes;
	void *op = fp_start(ctx, 1 << 3, parent, rank, &u);
	for (int s = 0; s < steps; s++) {
		fp_union su; memset(&su, 0, sizeof su);
		su.proxyStep.step = s;
		void *h = fp_start(ctx, 1 << 4, op, rank, &su);
		fp_state a; memset(&a, 0, sizeof a);
		a.proxyStep.transSize = stepBytes;
		if (isSend) {
			fp_record(h, 8, &a);  // waiting for the GPU's data
			fp_record(h, 20, &a); // ready, waiting for the peer's buffer
			fp_record(h, 9, &a);  // on the wire
			if (wire_ns > 0) {
				struct timespec ts = {(time_t)(wire_ns / 1000000000ull), (long)(wire_ns % 1000000000ull)};
				nanosleep(&ts, NULL);
			}
		} else {
			fp_record(h, 10, &a); // receive posted
			fp_record(h, 11, &a); // data arrived
		}
		fp_stop(h);
	}
	fp_stop(op);
}
*/
import "C"

import (
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"collbench/backend/nccl/driver"
	"collbench/dtype"
)

// Profiler event bits the machine acts on.
const (
	profColl     = 1 << 1
	profP2P      = 1 << 2
	profProxyOp  = 1 << 3
	profKernelCh = 1 << 6
)

// profiler is the machine's NCCL side of the profiler plugin interface:
// loaded at the first communicator when NCCL_PROFILER_PLUGIN is
// STATIC_PLUGIN and the library is 2.27+ (2.28+ looks up version 5 first).
type profiler struct {
	version int
	start   time.Time
	mu      sync.Mutex
	strs    map[string]*C.char
	ops     atomic.Int64 // collective and point-to-point events started
}

// loadProfiler looks the plugin up as NCCL does; nil when none is used.
// Options.RejectProfiler plays a library that finds no version it knows.
func (d *Driver) loadProfiler() *profiler {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.profTried {
		return d.prof
	}
	d.profTried = true
	v := d.opts.NCCLVersion
	if os.Getenv("NCCL_PROFILER_PLUGIN") != "STATIC_PLUGIN" || v < 22600 || d.opts.RejectProfiler {
		return nil
	}
	want := 3
	switch {
	case v >= 22900: // NCCL 2.29 added interface 6: version 5's layout, with copy-engine events
		want = 6
	case v >= 22800:
		want = 5
	case v >= 22700:
		want = 4
	}
	if got := int(C.fp_load(C.int(want))); got > 0 {
		d.prof = &profiler{version: got, start: time.Now(), strs: map[string]*C.char{}}
	}
	return d.prof
}

// str is a C string that lives as long as the machine (NCCL passes static names).
func (p *profiler) str(s string) *C.char {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.strs[s]; ok {
		return c
	}
	c := C.CString(s)
	p.strs[s] = c
	return c
}

// ProfiledOps is how many collective and point-to-point events the
// machine's NCCL gave the profiler plugin; -1 when it loaded none.
func (d *Driver) ProfiledOps() int64 {
	d.mu.Lock()
	p := d.prof
	d.mu.Unlock()
	if p == nil {
		return -1
	}
	return p.ops.Load()
}

// profInit introduces a new communicator rank to the plugin.
func (c *comm) profInit() {
	p := c.d.loadProfiler()
	if p == nil {
		return
	}
	var errc C.int
	ctx := C.fp_init(C.uint64_t(uintptr(unsafe.Pointer(c.cl))), 1, C.int(c.cl.n), C.int(c.rank), &errc)
	if errc == 0 {
		c.profCtx = ctx
	}
}

// profFinalize tells the plugin the communicator rank is gone.
func (c *comm) profFinalize() {
	if c.profCtx != nil {
		C.fp_finalize(c.profCtx)
		c.profCtx = nil
	}
}

// profMask is the activation mask an operation enqueued now gets.
func (c *comm) profMask() int {
	if c.profCtx == nil {
		return 0
	}
	return int(C.fp_get_mask())
}

var profFuncs = map[driver.OpKind]string{driver.AllReduce: "AllReduce", driver.AllGather: "AllGather",
	driver.ReduceScatter: "ReduceScatter", driver.Broadcast: "Broadcast", driver.Reduce: "Reduce",
	driver.AllToAll: "AlltoAll", driver.Gather: "Gather", driver.Scatter: "Scatter"}

// profOp is an operation's event, started at enqueue and stopped at once
// (as NCCL stops it after the launch); its kernel and proxy events come
// when the operation runs.
type profOp struct {
	handle   unsafe.Pointer
	channels int
	mask     int
	peer     int // point-to-point: the peer; -1 for a collective
	send     bool
	bytes    int64
}

// profCollective starts and stops a collective's event.
func (c *comm) profCollective(o driver.Op, seq uint64, chosen choice) *profOp {
	mask := c.profMask()
	if mask&(profColl|profKernelCh) == 0 {
		return nil
	}
	p := c.d.prof
	t := dtype.DType(o.DType)
	bytes := o.Count * int64(t.Size())
	algo, proto := chosen.names()
	ch := chosen.channels
	h := C.fp_coll_event(c.profCtx, C.int(c.rank), C.uint64_t(seq), p.str(profFuncs[o.Kind]), C.uint64_t(o.Send), C.uint64_t(o.Recv),
		C.size_t(o.Count), C.int(o.Root), p.str(t.String()), C.int(ch), p.str(algo), p.str(proto))
	C.fp_stop(h)
	p.ops.Add(1)
	return &profOp{handle: h, channels: ch, mask: mask, peer: -1, bytes: bytes}
}

// profP2P starts and stops a send's or receive's event.
func (c *comm) profP2P(o driver.P2P) *profOp {
	mask := c.profMask()
	if mask&(profP2P|profKernelCh) == 0 {
		return nil
	}
	p := c.d.prof
	t := dtype.DType(o.DType)
	fn := "Recv"
	if o.Send {
		fn = "Send"
	}
	h := C.fp_p2p_event(c.profCtx, C.int(c.rank), p.str(fn), C.uint64_t(o.Buf), C.size_t(o.Count), p.str(t.String()), C.int(o.Peer), 1)
	C.fp_stop(h)
	p.ops.Add(1)
	return &profOp{handle: h, channels: 1, mask: mask, peer: o.Peer, send: o.Send, bytes: o.Count * int64(t.Size())}
}

// profRan delivers an operation's kernel channels, which ran from start to
// stop (ns on the machine's GPU clock), and, for point-to-point operations
// with a peer on another host, its proxy steps.
func (c *comm) profRan(po *profOp, start, stop uint64) {
	if po == nil || po.handle == nil {
		return
	}
	if po.mask&profKernelCh != 0 {
		for ch := 0; ch < po.channels; ch++ {
			C.fp_kernel_channel(c.profCtx, po.handle, C.int(c.rank), C.int(ch), C.uint64_t(start), C.uint64_t(stop))
		}
	}
	if po.mask&profProxyOp != 0 && po.peer >= 0 && c.d.opts.ProxySteps {
		const step = 512 << 10
		steps := int(max((po.bytes+step-1)/step, 1))
		var wire time.Duration
		if po.send {
			wire = c.d.opts.WireDelay[[2]int{c.dev, c.peerDevice(po.peer)}]
		}
		C.fp_proxy(c.profCtx, po.handle, C.int(c.rank), C.int(po.peer), C.int(b2i(po.send)), C.int(steps), C.size_t(min(po.bytes, step)),
			C.uint64_t(wire.Nanoseconds())) //nolint:gosec // G115: a planted delay, never negative
	}
}

// profStalls says whether a recorded group of sends and receives stalls
// the proxy (Options.ProfilerStall): more than two operations, at least
// that many bytes on this rank, kernel events asked for.
func (c *comm) profStalls(group []driver.P2P, pos []*profOp) bool {
	limit := c.d.opts.ProfilerStall
	if limit <= 0 || len(group) <= 2 || len(pos) == 0 || pos[0].mask&profKernelCh == 0 {
		return false
	}
	var bytes int64
	for _, o := range group {
		bytes += o.Count * int64(dtype.DType(o.DType).Size())
	}
	return bytes >= limit
}

// profCollectiveStalls is profStalls for the calls NCCL builds from
// grouped sends and receives with every peer (ncclAlltoAll, ncclGather,
// ncclScatter): the bytes one rank sends and receives.
func (c *comm) profCollectiveStalls(o driver.Op, po *profOp) bool {
	limit := c.d.opts.ProfilerStall
	if limit <= 0 || c.cl.n < 2 || po.mask&profKernelCh == 0 {
		return false
	}
	per := o.Count * int64(dtype.DType(o.DType).Size())
	switch o.Kind {
	case driver.AllToAll:
		return 2*per*int64(c.cl.n) >= limit
	case driver.Gather, driver.Scatter:
		return per*int64(c.cl.n+1) >= limit && c.rank == o.Root
	}
	return false
}

// profStuck starts po's kernel channels' events and never ends them; the
// communicator's destroy then waits for an abort.
func (c *comm) profStuck(po *profOp, start uint64) {
	for ch := 0; ch < po.channels; ch++ {
		C.fp_kernel_stuck(c.profCtx, po.handle, C.int(c.rank), C.int(ch), C.uint64_t(start))
	}
	c.wedged.Store(true)
}

// gpuClock is the machine's GPU clock in ns: virtual time under a Model,
// else the time since the plugin was loaded.
func (c *comm) gpuClock(vt float64) uint64 {
	if c.d.clk != nil {
		return uint64(vt * 1e9)
	}
	var off int64
	if c.dev < len(c.d.opts.ClockOffsets) {
		off = c.d.opts.ClockOffsets[c.dev]
	}
	return uint64(time.Since(c.d.prof.start).Nanoseconds() + off) //nolint:gosec // G115: offsets of a test's machine, far below its clock
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// peerDevice is the GPU of the communicator's rank peer; -1 if unknown.
func (c *comm) peerDevice(peer int) int {
	c.cl.mu.Lock()
	defer c.cl.mu.Unlock()
	if peer < 0 || peer >= len(c.cl.members) || c.cl.members[peer] == nil {
		return -1
	}
	return c.cl.members[peer].dev
}

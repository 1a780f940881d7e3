// Package nccl drives NCCL for collbench: it loads libnccl.so at run time
// (dlopen, with collbench's own declarations of the calls it uses), and
// implements the GPU backend on top of it and the cuda package, both seen
// through package driver's interface so that a fake machine can stand in.
package nccl

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>

typedef int ncclResult_t;
typedef void *ncclComm_t;
typedef void *cudaStream_t;
typedef unsigned long long devptr;
#define VP(x) ((void*)(x))
typedef struct { char internal[128]; } ncclUniqueId;

#define CB_MISSING 999999

static void *nb_lib;
static ncclResult_t (*p_GetVersion)(int*);
static ncclResult_t (*p_GetUniqueId)(ncclUniqueId*);
static ncclResult_t (*p_CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
static ncclResult_t (*p_CommDestroy)(ncclComm_t);
static ncclResult_t (*p_CommAbort)(ncclComm_t);
static ncclResult_t (*p_CommGetAsyncError)(ncclComm_t, ncclResult_t*);
static const char *(*p_GetErrorString)(ncclResult_t);
static const char *(*p_GetLastError)(ncclComm_t);
static ncclResult_t (*p_GroupStart)(void);
static ncclResult_t (*p_GroupEnd)(void);
static ncclResult_t (*p_AllReduce)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
static ncclResult_t (*p_Broadcast)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
static ncclResult_t (*p_Reduce)(const void*, void*, size_t, int, int, int, ncclComm_t, cudaStream_t);
static ncclResult_t (*p_AllGather)(const void*, void*, size_t, int, ncclComm_t, cudaStream_t);
static ncclResult_t (*p_ReduceScatter)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
static ncclResult_t (*p_Send)(const void*, size_t, int, int, ncclComm_t, cudaStream_t);
static ncclResult_t (*p_Recv)(void*, size_t, int, int, ncclComm_t, cudaStream_t);
static ncclResult_t (*p_AlltoAll)(const void*, void*, size_t, int, ncclComm_t, cudaStream_t);
static ncclResult_t (*p_CommSplit)(ncclComm_t, int, int, ncclComm_t*, void*);
static ncclResult_t (*p_CommCount)(ncclComm_t, int*);
static ncclResult_t (*p_CommUserRank)(ncclComm_t, int*);
static ncclResult_t (*p_CommCuDevice)(ncclComm_t, int*);
static ncclResult_t (*p_Gather)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
static ncclResult_t (*p_Scatter)(const void*, void*, size_t, int, int, ncclComm_t, cudaStream_t);
static ncclResult_t (*p_CommRegister)(ncclComm_t, void*, size_t, void**);
static ncclResult_t (*p_CommDeregister)(ncclComm_t, void*);
static ncclResult_t (*p_MemAlloc)(void**, size_t);
static ncclResult_t (*p_MemFree)(void*);
static ncclResult_t (*p_CommWindowRegister)(ncclComm_t, void*, size_t, void**, int);
static ncclResult_t (*p_CommWindowDeregister)(ncclComm_t, void*);

static const char *nb_load(const char *path, char *err, size_t errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		strncpy(err, e ? e : "dlopen failed", errlen - 1);
		err[errlen - 1] = 0;
		return "";
	}
#define REQ(var, name) if (!(*(void**)&var = dlsym(h, name))) { dlclose(h); return name; }
#define OPT(var, name) *(void**)&var = dlsym(h, name);
	REQ(p_GetVersion, "ncclGetVersion")
	REQ(p_GetUniqueId, "ncclGetUniqueId")
	REQ(p_CommInitRank, "ncclCommInitRank")
	REQ(p_CommDestroy, "ncclCommDestroy")
	REQ(p_GetErrorString, "ncclGetErrorString")
	REQ(p_GroupStart, "ncclGroupStart")
	REQ(p_GroupEnd, "ncclGroupEnd")
	REQ(p_AllReduce, "ncclAllReduce")
	REQ(p_Broadcast, "ncclBroadcast")
	REQ(p_Reduce, "ncclReduce")
	REQ(p_AllGather, "ncclAllGather")
	REQ(p_ReduceScatter, "ncclReduceScatter")
	REQ(p_CommCount, "ncclCommCount")
	REQ(p_CommUserRank, "ncclCommUserRank")
	REQ(p_CommCuDevice, "ncclCommCuDevice")
	OPT(p_CommAbort, "ncclCommAbort")
	OPT(p_CommGetAsyncError, "ncclCommGetAsyncError")
	OPT(p_GetLastError, "ncclGetLastError")
	OPT(p_Send, "ncclSend")
	OPT(p_Recv, "ncclRecv")
	OPT(p_AlltoAll, "ncclAlltoAll")
	OPT(p_CommSplit, "ncclCommSplit")
	OPT(p_Gather, "ncclGather")
	OPT(p_Scatter, "ncclScatter")
	OPT(p_CommRegister, "ncclCommRegister")
	OPT(p_CommDeregister, "ncclCommDeregister")
	OPT(p_MemAlloc, "ncclMemAlloc")
	OPT(p_MemFree, "ncclMemFree")
	OPT(p_CommWindowRegister, "ncclCommWindowRegister")
	OPT(p_CommWindowDeregister, "ncclCommWindowDeregister")
#undef REQ
#undef OPT
	nb_lib = h;
	return NULL;
}

static int nb_has(int which) {
	switch (which) {
	case 0: return p_Send && p_Recv;
	case 1: return p_AlltoAll != NULL;
	case 2: return p_CommSplit != NULL;
	case 3: return p_CommAbort != NULL;
	case 4: return p_CommGetAsyncError != NULL;
	case 5: return p_Gather && p_Scatter;
	case 6: return p_CommRegister && p_CommDeregister && p_MemAlloc && p_MemFree;
	case 7: return p_CommWindowRegister && p_CommWindowDeregister && p_MemAlloc && p_MemFree;
	}
	return 0;
}

static ncclResult_t nb_GetVersion(int *v) { return p_GetVersion(v); }
static ncclResult_t nb_GetUniqueId(ncclUniqueId *id) { return p_GetUniqueId(id); }
static ncclResult_t nb_CommInitRank(ncclComm_t *c, int n, ncclUniqueId *id, int r) { return p_CommInitRank(c, n, *id, r); }
static ncclResult_t nb_CommDestroy(ncclComm_t c) { return p_CommDestroy(c); }
static ncclResult_t nb_CommAbort(ncclComm_t c) { return p_CommAbort ? p_CommAbort(c) : CB_MISSING; }
static ncclResult_t nb_CommGetAsyncError(ncclComm_t c, ncclResult_t *r) {
	if (!p_CommGetAsyncError) { *r = 0; return 0; }
	return p_CommGetAsyncError(c, r);
}
static const char *nb_GetErrorString(ncclResult_t r) { return p_GetErrorString(r); }
static const char *nb_GetLastError(ncclComm_t c) { return p_GetLastError ? p_GetLastError(c) : NULL; }
static ncclResult_t nb_GroupStart(void) { return p_GroupStart(); }
static ncclResult_t nb_GroupEnd(void) { return p_GroupEnd(); }
// nb_p2p is one send or receive of a grouped exchange; nb_GroupP2PAt issues
// a whole exchange, every buffer moved by shift bytes: ncclGroupStart, the
// sends and receives in order, and always ncclGroupEnd once the group is
// open.
typedef struct { devptr buf; size_t count; int dt; int peer; int send; } nb_p2p;
typedef struct { ncclResult_t r; int at; ncclResult_t end; } nb_gres;
// nb_rot moves buffers between repetitions (driver.Rotation): repetition i
// adds nb_shift(rot, i) bytes to every address.
typedef struct { size_t stride; int steps; int first; } nb_rot;
static size_t nb_shift(nb_rot r, int i) { return r.steps > 1 ? (size_t)((r.first + i) % r.steps) * r.stride : 0; }
static nb_gres nb_GroupP2PAt(const nb_p2p *ops, int n, size_t shift, ncclComm_t c, cudaStream_t st) {
	nb_gres g = {0, 0, 0};
	g.r = p_GroupStart();
	if (g.r != 0) { g.at = -1; return g; }
	for (int i = 0; i < n; i++) {
		const nb_p2p *o = &ops[i];
		ncclResult_t r;
		if (o->send) r = p_Send ? p_Send(VP(o->buf + shift), o->count, o->dt, o->peer, c, st) : CB_MISSING;
		else r = p_Recv ? p_Recv(VP(o->buf + shift), o->count, o->dt, o->peer, c, st) : CB_MISSING;
		if (r != 0) { g.r = r; g.at = i; break; }
	}
	g.end = p_GroupEnd();
	return g;
}
// nb_RepeatP2P issues the group of ops n times back to back, moved by rot,
// as nb_Repeat does for one call; done says how many were issued whole.
typedef struct { nb_gres g; int done; } nb_rres;
static nb_rres nb_RepeatP2P(const nb_p2p *ops, int m, int n, nb_rot rot, ncclComm_t c, cudaStream_t st) {
	nb_rres res = {{0, 0, 0}, 0};
	for (; res.done < n; res.done++) {
		res.g = nb_GroupP2PAt(ops, m, nb_shift(rot, res.done), c, st);
		if (res.g.r != 0 || res.g.end != 0) return res;
	}
	return res;
}
// nb_step is one step of nb_RepeatSteps: a copy of bytes from src to dst
// (bytes > 0, through the CUDA driver's cuMemcpyDtoDAsync, copy), else the
// group of nops sends and receives from ops[first]. The result says how
// many repetitions were issued whole, at which step the failed one
// stopped, and the copy's CUresult or the group's results.
typedef struct { devptr dst; devptr src; size_t bytes; int first; int nops; } nb_step;
typedef int (*nb_copy_fn)(devptr, devptr, size_t, cudaStream_t);
typedef struct { nb_gres g; int done; int step; int copy; } nb_sres;
static nb_sres nb_RepeatSteps(const nb_step *steps, int m, const nb_p2p *ops, int n, nb_rot rot, void *copy, ncclComm_t c, cudaStream_t st) {
	nb_sres res = {{0, 0, 0}, 0, 0, 0};
	nb_copy_fn cp = (nb_copy_fn)copy;
	for (; res.done < n; res.done++) {
		size_t sh = nb_shift(rot, res.done);
		for (int k = 0; k < m; k++) {
			const nb_step *s = &steps[k];
			res.step = k;
			if (s->bytes > 0) {
				res.copy = cp ? cp(s->dst + sh, s->src + sh, s->bytes, st) : CB_MISSING;
				if (res.copy != 0) return res;
				continue;
			}
			res.g = nb_GroupP2PAt(ops + s->first, s->nops, sh, c, st);
			if (res.g.r != 0 || res.g.end != 0) return res;
		}
	}
	return res;
}
// nb_call is one operation that nb_Repeat issues n times back to back,
// the way a C benchmark's timed loop does: one call from Go for the whole
// loop. For NB_SENDRECV each repetition is nb_GroupP2PAt of one send (to peer
// "to") and one receive (from peer "from"). The result says how many
// repetitions were issued whole and, in g, how the failed one ended.
enum { NB_ALLREDUCE = 1, NB_BROADCAST, NB_REDUCE, NB_ALLGATHER, NB_REDUCESCATTER, NB_ALLTOALL, NB_GATHER, NB_SCATTER, NB_SENDRECV };
typedef struct { int kind; devptr send; devptr recv; size_t count; int dt; int op; int root; int to; int from; nb_rot rot; } nb_call;
// nb_one issues k once on c and st, its buffers moved by shift bytes.
static nb_gres nb_one(const nb_call *k, size_t shift, ncclComm_t c, cudaStream_t st) {
	nb_gres g = {0, 0, 0};
	void *s = VP(k->send + shift), *r = VP(k->recv + shift);
	ncclResult_t *e = &g.r;
	switch (k->kind) {
	case NB_ALLREDUCE: *e = p_AllReduce(s, r, k->count, k->dt, k->op, c, st); break;
	case NB_BROADCAST: *e = p_Broadcast(s, r, k->count, k->dt, k->root, c, st); break;
	case NB_REDUCE: *e = p_Reduce(s, r, k->count, k->dt, k->op, k->root, c, st); break;
	case NB_ALLGATHER: *e = p_AllGather(s, r, k->count, k->dt, c, st); break;
	case NB_REDUCESCATTER: *e = p_ReduceScatter(s, r, k->count, k->dt, k->op, c, st); break;
	case NB_ALLTOALL: *e = p_AlltoAll ? p_AlltoAll(s, r, k->count, k->dt, c, st) : CB_MISSING; break;
	case NB_GATHER: *e = p_Gather ? p_Gather(s, r, k->count, k->dt, k->root, c, st) : CB_MISSING; break;
	case NB_SCATTER: *e = p_Scatter ? p_Scatter(s, r, k->count, k->dt, k->root, c, st) : CB_MISSING; break;
	case NB_SENDRECV: {
		const nb_p2p pair[2] = {{k->send, k->count, k->dt, k->to, 1}, {k->recv, k->count, k->dt, k->from, 0}};
		g = nb_GroupP2PAt(pair, 2, shift, c, st);
		break;
	}
	default: *e = CB_MISSING;
	}
	return g;
}
static nb_rres nb_Repeat(const nb_call *k, int n, ncclComm_t c, cudaStream_t st) {
	nb_rres res = {{0, 0, 0}, 0};
	for (; res.done < n; res.done++) {
		res.g = nb_one(k, nb_shift(k->rot, res.done), c, st);
		if (res.g.r != 0 || res.g.end != 0) return res;
	}
	return res;
}
// nb_RepeatGroup issues n groups from the calling thread, each holding
// per[i] times calls[i] on comms[i] and streams[i] for every part i: one
// thread issuing for several GPUs. The result says how many groups were
// issued whole, which part failed (-1: the group call itself) and how.
typedef struct { nb_gres g; int done; int part; ncclResult_t start; ncclResult_t end; } nb_mres;
static nb_mres nb_RepeatGroup(const nb_call *calls, const int *per, const ncclComm_t *comms, const cudaStream_t *streams, int m, int n) {
	nb_mres res = {{0, 0, 0}, 0, -1, 0, 0};
	for (; res.done < n; res.done++) {
		res.start = p_GroupStart();
		if (res.start != 0) return res;
		for (int i = 0; i < m && res.part < 0; i++) {
			for (int j = 0; j < per[i]; j++) {
				nb_gres g = nb_one(&calls[i], nb_shift(calls[i].rot, res.done * per[i] + j), comms[i], streams[i]);
				if (g.r != 0 || g.end != 0) { res.g = g; res.part = i; break; }
			}
		}
		res.end = p_GroupEnd();
		if (res.part >= 0 || res.end != 0) return res;
	}
	return res;
}
static ncclResult_t nb_CommSplit(ncclComm_t c, int color, int key, ncclComm_t *out) { return p_CommSplit ? p_CommSplit(c, color, key, out, NULL) : CB_MISSING; }
static ncclResult_t nb_CommCount(ncclComm_t c, int *n) { return p_CommCount(c, n); }
static ncclResult_t nb_CommRegister(ncclComm_t c, devptr b, size_t n, void **h) { return p_CommRegister ? p_CommRegister(c, VP(b), n, h) : CB_MISSING; }
static ncclResult_t nb_CommDeregister(ncclComm_t c, void *h) { return p_CommDeregister ? p_CommDeregister(c, h) : CB_MISSING; }
static ncclResult_t nb_MemAlloc(devptr *p, size_t n) { void *q = NULL; ncclResult_t r = p_MemAlloc ? p_MemAlloc(&q, n) : CB_MISSING; *p = (devptr)q; return r; }
static ncclResult_t nb_MemFree(devptr p) { return p_MemFree ? p_MemFree(VP(p)) : CB_MISSING; }
static ncclResult_t nb_CommWindowRegister(ncclComm_t c, devptr b, size_t n, void **w, int flags) { return p_CommWindowRegister ? p_CommWindowRegister(c, VP(b), n, w, flags) : CB_MISSING; }
static ncclResult_t nb_CommWindowDeregister(ncclComm_t c, void *w) { return p_CommWindowDeregister ? p_CommWindowDeregister(c, w) : CB_MISSING; }
static ncclResult_t nb_CommUserRank(ncclComm_t c, int *r) { return p_CommUserRank(c, r); }
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"collbench/backend/nccl/driver"
	"collbench/cuda"
)

// Error is a failed NCCL call.
type Error = driver.Error

const (
	featureSendRecv  = 0
	featureAllToAll  = 1
	featureSplit     = 2
	featureAbort     = 3
	featureAsyncErrs = 4
	featureGather    = 5
	featureRegister  = 6
	featureWindows   = 7
)

func ncclCheck(call string, r C.ncclResult_t, comm C.ncclComm_t) error {
	if r == driver.Success {
		return nil
	}
	e := &Error{Call: call, Code: int(r)}
	if r != driver.Missing {
		e.Text = C.GoString(C.nb_GetErrorString(r))
		if s := C.nb_GetLastError(comm); s != nil {
			e.Detail = C.GoString(s)
		}
	}
	return e
}

// system is the machine this process runs on: the CUDA driver (package
// cuda) and the NCCL library loaded with dlopen.
type system struct{}

var (
	libMu     sync.Mutex
	loadedLib *driver.Library
)

// LoadNCCL opens the first candidate that loads, or reports every place
// it looked. Only one NCCL can be loaded per process.
func (system) LoadNCCL(cands []Candidate) (driver.Library, error) {
	libMu.Lock()
	defer libMu.Unlock()
	if loadedLib != nil {
		return *loadedLib, nil
	}
	var tried []string
	for _, c := range cands {
		var buf [512]C.char
		cs := C.CString(c.Path)
		missingSym := C.nb_load(cs, &buf[0], C.size_t(len(buf)))
		C.free(unsafe.Pointer(cs))
		if missingSym != nil {
			if m := C.GoString(missingSym); m != "" {
				tried = append(tried, fmt.Sprintf("%s (%s): lacks %s", c.Path, c.Source, m))
			} else {
				tried = append(tried, fmt.Sprintf("%s (%s): %s", c.Path, c.Source, firstLine(C.GoString(&buf[0]))))
			}
			continue
		}
		var v C.int
		if err := ncclCheck("ncclGetVersion", C.nb_GetVersion(&v), nil); err != nil {
			return driver.Library{}, err
		}
		has := func(f int) bool { return C.nb_has(C.int(f)) != 0 }
		loadedLib = &driver.Library{Path: c.Path, Source: c.Source, Version: int(v), Features: driver.Features{
			SendRecv: has(featureSendRecv), AllToAll: has(featureAllToAll), Split: has(featureSplit),
			Gather: has(featureGather), Register: has(featureRegister), Windows: has(featureWindows),
			Abort: has(featureAbort), AsyncErrs: has(featureAsyncErrs),
		}}
		return *loadedLib, nil
	}
	return driver.Library{}, fmt.Errorf("libnccl not found; looked in: %s (set --nccl-lib or %s)", strings.Join(tried, "; "), EnvLib)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// NewUniqueID asks NCCL for a fresh id.
func (system) NewUniqueID() (driver.UniqueID, error) {
	var id C.ncclUniqueId
	var out driver.UniqueID
	if err := ncclCheck("ncclGetUniqueId", C.nb_GetUniqueId(&id), nil); err != nil {
		return out, err
	}
	copy(out[:], C.GoBytes(unsafe.Pointer(&id), 128))
	return out, nil
}

// InitRank joins a communicator.
func (system) InitRank(nranks int, id driver.UniqueID, rank int) (driver.Comm, error) {
	var cid C.ncclUniqueId
	C.memcpy(unsafe.Pointer(&cid), unsafe.Pointer(&id[0]), 128)
	c := &comm{}
	if err := ncclCheck("ncclCommInitRank", C.nb_CommInitRank(&c.c, C.int(nranks), &cid, C.int(rank)), nil); err != nil {
		return nil, err
	}
	return c, nil
}

// GroupStart and GroupEnd bracket calls NCCL must treat as one.
func (system) GroupStart() error { return ncclCheck("ncclGroupStart", C.nb_GroupStart(), nil) }

// GroupEnd closes a group.
func (system) GroupEnd() error { return ncclCheck("ncclGroupEnd", C.nb_GroupEnd(), nil) }

// MemAlloc allocates device memory NCCL can register (ncclMemAlloc).
func (system) MemAlloc(bytes int64) (cuda.DevPtr, error) {
	var p C.devptr
	err := ncclCheck("ncclMemAlloc", C.nb_MemAlloc(&p, C.size_t(bytes)), nil)
	return cuda.DevPtr(p), err
}

// MemFree frees memory from MemAlloc.
func (system) MemFree(p cuda.DevPtr) error {
	return ncclCheck("ncclMemFree", C.nb_MemFree(C.devptr(p)), nil)
}

// comm is a communicator handle; ops is the C form of the exchange being
// issued, kept so that issuing one allocates nothing.
type comm struct {
	c     C.ncclComm_t
	ops   []C.nb_p2p
	steps []C.nb_step // GroupSteps' steps, kept between calls
}

func (c *comm) Destroy() error { return ncclCheck("ncclCommDestroy", C.nb_CommDestroy(c.c), nil) }

func (c *comm) Abort() error { return ncclCheck("ncclCommAbort", C.nb_CommAbort(c.c), nil) }

func (c *comm) AsyncError() error {
	var r C.ncclResult_t
	if err := ncclCheck("ncclCommGetAsyncError", C.nb_CommGetAsyncError(c.c, &r), c.c); err != nil {
		return err
	}
	if r == driver.Success || r == driver.InProgress {
		return nil
	}
	return ncclCheck("asynchronous NCCL error", r, c.c)
}

func (c *comm) Count() (int, error) {
	var n C.int
	err := ncclCheck("ncclCommCount", C.nb_CommCount(c.c, &n), c.c)
	return int(n), err
}

func (c *comm) Split(color, key int) (driver.Comm, error) {
	out := &comm{}
	if err := ncclCheck("ncclCommSplit", C.nb_CommSplit(c.c, C.int(color), C.int(key), &out.c), c.c); err != nil {
		return nil, err
	}
	return out, nil
}

func stream(s cuda.Stream) C.cudaStream_t { return C.cudaStream_t(s) }

// Repeat enqueues k n times back to back on s in a single call into C, as
// a C benchmark's loop does, so that Go adds no crossing per operation.
func (c *comm) Repeat(k *driver.Op, n int, s cuda.Stream) error {
	if n <= 0 {
		return nil
	}
	call := cCall(k)
	res := C.nb_Repeat(&call, C.int(n), c.c, stream(s))
	if res.g.r == driver.Success && res.g.end == driver.Success {
		return nil
	}
	var err error
	if k.Kind == driver.SendRecv {
		err = groupError(res.g, func(i int) bool { return i == 0 }, c.c)
	} else {
		err = ncclCheck(k.Kind.Call(), res.g.r, c.c)
	}
	if n > 1 {
		err = fmt.Errorf("%w (after %d of %d operations issued)", err, int(res.done), n)
	}
	return err
}

// cCall is k as nb_Repeat takes it.
func cCall(k *driver.Op) C.nb_call {
	return C.nb_call{kind: C.int(k.Kind), send: C.devptr(k.Send), recv: C.devptr(k.Recv), count: C.size_t(k.Count),
		dt: C.int(k.DType), op: C.int(k.RedOp), root: C.int(k.Root), to: C.int(k.To), from: C.int(k.From), rot: cRot(k.Rot)}
}

// cRot is r as the C loops take it.
func cRot(r driver.Rotation) C.nb_rot {
	return C.nb_rot{stride: C.size_t(max(r.Stride, 0)), steps: C.int(r.Steps), first: C.int(r.First)}
}

// RepeatGroup issues n groups, each with every part's operation, in a
// single call into C (see driver.NCCL).
func (system) RepeatGroup(parts []driver.Part, n int) error {
	if n <= 0 || len(parts) == 0 {
		return nil
	}
	calls := make([]C.nb_call, len(parts))
	per := make([]C.int, len(parts))
	comms := make([]C.ncclComm_t, len(parts))
	streams := make([]C.cudaStream_t, len(parts))
	for i, p := range parts {
		calls[i] = cCall(p.Op)
		per[i] = C.int(max(p.Per, 1))
		c, ok := p.Comm.(*comm)
		if !ok {
			return fmt.Errorf("part %d: a communicator this library did not create", i)
		}
		comms[i], streams[i] = c.c, stream(p.Stream)
	}
	res := C.nb_RepeatGroup(&calls[0], &per[0], &comms[0], &streams[0], C.int(len(parts)), C.int(n))
	if res.part < 0 && res.start == driver.Success && res.end == driver.Success {
		return nil
	}
	var err error
	part := int(res.part)
	if part >= 0 {
		k := parts[part].Op
		if k.Kind == driver.SendRecv {
			err = groupError(res.g, func(i int) bool { return i == 0 }, comms[part])
		} else {
			err = ncclCheck(k.Kind.Call(), res.g.r, comms[part])
		}
	}
	err = errors.Join(err, ncclCheck("ncclGroupStart", res.start, nil), ncclCheck("ncclGroupEnd", res.end, nil))
	if n > 1 {
		err = fmt.Errorf("%w (after %d of %d groups issued)", err, int(res.done), n)
	}
	return &driver.PartError{Part: part, Err: err}
}

// groupError names the failed call of a group of sends and receives that
// nb_GroupP2PAt issued: ncclGroupStart, the send or receive at g.at (send
// says which op is a send), and ncclGroupEnd, which closed the group.
func groupError(g C.nb_gres, send func(i int) bool, comm C.ncclComm_t) error {
	if g.r != driver.Success && g.at < 0 {
		return ncclCheck("ncclGroupStart", g.r, nil)
	}
	var err error
	if g.r != driver.Success {
		call := "ncclRecv"
		if send(int(g.at)) {
			call = "ncclSend"
		}
		err = ncclCheck(call, g.r, comm)
	}
	return errors.Join(err, ncclCheck("ncclGroupEnd", g.end, nil))
}

// GroupP2P enqueues ops as one group, n times back to back (moved by rot),
// in a single call into C, so that an exchange costs one crossing from Go for the whole
// loop instead of one per call or per repetition.
func (c *comm) GroupP2P(ops []driver.P2P, n int, rot driver.Rotation, s cuda.Stream) error {
	if len(ops) == 0 || n <= 0 {
		return nil
	}
	c.ops = c.ops[:0]
	for _, o := range ops {
		send := C.int(0)
		if o.Send {
			send = 1
		}
		c.ops = append(c.ops, C.nb_p2p{buf: C.devptr(o.Buf), count: C.size_t(o.Count), dt: C.int(o.DType), peer: C.int(o.Peer), send: send})
	}
	res := C.nb_RepeatP2P(&c.ops[0], C.int(len(c.ops)), C.int(n), cRot(rot), c.c, stream(s))
	if res.g.r == driver.Success && res.g.end == driver.Success {
		return nil
	}
	err := groupError(res.g, func(i int) bool { return ops[i].Send }, c.c)
	if n > 1 {
		err = fmt.Errorf("%w (after %d of %d groups issued)", err, int(res.done), n)
	}
	return err
}

// GroupSteps enqueues steps, n times back to back (moved by rot), in a
// single call into C: the copies through the CUDA driver, the groups as
// GroupP2P issues them (the hypercube's copy and rounds cost one crossing
// for the whole loop).
func (c *comm) GroupSteps(steps []driver.Step, n int, rot driver.Rotation, s cuda.Stream) error {
	if len(steps) == 0 || n <= 0 {
		return nil
	}
	c.ops, c.steps = c.ops[:0], c.steps[:0]
	for _, st := range steps {
		cs := C.nb_step{dst: C.devptr(st.Dst), src: C.devptr(st.Src), bytes: C.size_t(st.Bytes), first: C.int(len(c.ops)), nops: C.int(len(st.Ops))}
		if st.Bytes <= 0 {
			cs.bytes = 0
			for _, o := range st.Ops {
				send := C.int(0)
				if o.Send {
					send = 1
				}
				c.ops = append(c.ops, C.nb_p2p{buf: C.devptr(o.Buf), count: C.size_t(o.Count), dt: C.int(o.DType), peer: C.int(o.Peer), send: send})
			}
		}
		c.steps = append(c.steps, cs)
	}
	var ops *C.nb_p2p
	if len(c.ops) > 0 {
		ops = &c.ops[0]
	}
	res := C.nb_RepeatSteps(&c.steps[0], C.int(len(c.steps)), ops, C.int(n), cRot(rot), cuda.CopyFunc(), c.c, stream(s))
	var err error
	switch {
	case res.copy != 0:
		err = cuda.CopyError(int(res.copy))
	case res.g.r != driver.Success || res.g.end != driver.Success:
		first := int(c.steps[res.step].first)
		err = groupError(res.g, func(i int) bool { return c.ops[first+i].send != 0 }, c.c)
	default:
		return nil
	}
	return fmt.Errorf("step %d of %d: %w (after %d of %d repetitions issued)", int(res.step)+1, len(steps), err, int(res.done), n)
}

// registration is a buffer registered with a communicator.
type registration struct {
	h      unsafe.Pointer
	window bool
}

// winCollSymmetric is NCCL_WIN_COLL_SYMMETRIC: the window is registered on
// every rank with the same size, for the symmetric kernels.
const winCollSymmetric = 1

func (c *comm) Register(p cuda.DevPtr, bytes int64, symmetric bool) (driver.Registration, error) {
	reg := &registration{window: symmetric}
	var err error
	if symmetric {
		err = ncclCheck("ncclCommWindowRegister", C.nb_CommWindowRegister(c.c, C.devptr(p), C.size_t(bytes), &reg.h, winCollSymmetric), c.c)
	} else {
		err = ncclCheck("ncclCommRegister", C.nb_CommRegister(c.c, C.devptr(p), C.size_t(bytes), &reg.h), c.c)
	}
	if err != nil {
		return nil, err
	}
	return reg, nil
}

func (c *comm) Deregister(r driver.Registration) error {
	reg, ok := r.(*registration)
	if !ok {
		return fmt.Errorf("deregistering a buffer this library did not register (%v)", r)
	}
	if reg.window {
		return ncclCheck("ncclCommWindowDeregister", C.nb_CommWindowDeregister(c.c, reg.h), c.c)
	}
	return ncclCheck("ncclCommDeregister", C.nb_CommDeregister(c.c, reg.h), c.c)
}

//go:build mpi

package mpi

// The MPI calls. gompi (github.com/sbromberger/gompi) starts and ends MPI
// and carries the bootstrap's broadcast (bootstrap/mpi.go); it has no
// allgather, reduce-scatter, alltoall(v), gather, scatter, sendrecv,
// communicator split, error handler or library queries, so those are cgo
// calls to the MPI C API here.

/*
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include <mpi-ext.h>

enum { CB_ALLREDUCE, CB_ALLGATHER, CB_REDUCESCATTER, CB_BCAST, CB_REDUCE, CB_ALLTOALL,
       CB_SENDRECV, CB_GATHER, CB_SCATTER, CB_ALLTOALLV, CB_HYPERCUBE };

typedef struct {
	int coll, type, op, root, inplace;
	int count;   // the MPI count argument: per rank, or per peer
	int esz;     // bytes of one element as carried (1 for MPI_BYTE)
	char *send, *recv;
	int *scounts, *sdispls, *rcounts, *rdispls; // alltoallv, malloc'd
	MPI_Comm comm;
} cb_call;

static MPI_Datatype cb_type(int k) {
	switch (k) {
	case 0: return MPI_INT8_T;
	case 1: return MPI_UINT8_T;
	case 2: return MPI_INT32_T;
	case 3: return MPI_UINT32_T;
	case 4: return MPI_INT64_T;
	case 5: return MPI_UINT64_T;
	case 6: return MPI_FLOAT;
	case 7: return MPI_DOUBLE;
	}
	return MPI_BYTE;
}

static MPI_Op cb_op(int k) {
	switch (k) {
	case 1: return MPI_PROD;
	case 2: return MPI_MAX;
	case 3: return MPI_MIN;
	}
	return MPI_SUM;
}

static MPI_Comm cb_world(void) { return MPI_COMM_WORLD; }
static MPI_Comm cb_null(void) { return MPI_COMM_NULL; }

static int cb_errors_return(MPI_Comm c) { return MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN); }

static int cb_one(cb_call *a) {
	MPI_Datatype t = cb_type(a->type);
	MPI_Op op = cb_op(a->op);
	int me, n;
	MPI_Comm_rank(a->comm, &me);
	MPI_Comm_size(a->comm, &n);
	size_t cb = (size_t)a->count * (size_t)a->esz;
	switch (a->coll) {
	case CB_ALLREDUCE:
		return MPI_Allreduce(a->inplace ? MPI_IN_PLACE : a->send, a->recv, a->count, t, op, a->comm);
	case CB_ALLGATHER:
		return MPI_Allgather(a->inplace ? MPI_IN_PLACE : a->send, a->count, t, a->recv, a->count, t, a->comm);
	case CB_REDUCESCATTER:
		if (a->inplace) {
			// MPI leaves the in-place result at the start of the buffer;
			// collbench's (and NCCL's) is at this rank's block.
			int rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, a->send, a->count, t, op, a->comm);
			if (rc == MPI_SUCCESS && a->recv != a->send) memmove(a->recv, a->send, cb);
			return rc;
		}
		return MPI_Reduce_scatter_block(a->send, a->recv, a->count, t, op, a->comm);
	case CB_BCAST:
		if (me == a->root && a->send != a->recv) memcpy(a->recv, a->send, cb);
		return MPI_Bcast(a->recv, a->count, t, a->root, a->comm);
	case CB_REDUCE:
		return MPI_Reduce((a->inplace && me == a->root) ? MPI_IN_PLACE : a->send, a->recv, a->count, t, op, a->root, a->comm);
	case CB_ALLTOALL:
		return MPI_Alltoall(a->inplace ? MPI_IN_PLACE : a->send, a->count, t, a->recv, a->count, t, a->comm);
	case CB_SENDRECV:
		if (n == 1) {
			if (a->send != a->recv) memcpy(a->recv, a->send, cb);
			return MPI_SUCCESS;
		}
		if (a->inplace)
			return MPI_Sendrecv_replace(a->recv, a->count, t, (me + 1) % n, 7, (me - 1 + n) % n, 7, a->comm, MPI_STATUS_IGNORE);
		return MPI_Sendrecv(a->send, a->count, t, (me + 1) % n, 7, a->recv, a->count, t, (me - 1 + n) % n, 7, a->comm, MPI_STATUS_IGNORE);
	case CB_GATHER:
		return MPI_Gather((a->inplace && me == a->root) ? MPI_IN_PLACE : a->send, a->count, t, a->recv, a->count, t, a->root, a->comm);
	case CB_SCATTER:
		return MPI_Scatter(a->send, a->count, t, (a->inplace && me == a->root) ? MPI_IN_PLACE : a->recv, a->count, t, a->root, a->comm);
	case CB_ALLTOALLV:
		return MPI_Alltoallv(a->send, a->scounts, a->sdispls, t, a->recv, a->rcounts, a->rdispls, t, a->comm);
	case CB_HYPERCUBE: {
		// An allgather by recursive doubling: at step mask each rank
		// trades the mask blocks it holds with rank me^mask.
		char *mine = a->recv + (size_t)me * cb;
		if (a->send != mine) memcpy(mine, a->send, cb);
		for (int mask = 1; mask < n; mask <<= 1) {
			int s = me & ~(mask - 1), r = s ^ mask;
			int rc = MPI_Sendrecv(a->recv + (size_t)s * cb, a->count * mask, t, me ^ mask, 8,
			                      a->recv + (size_t)r * cb, a->count * mask, t, me ^ mask, 8, a->comm, MPI_STATUS_IGNORE);
			if (rc != MPI_SUCCESS) return rc;
		}
		return MPI_SUCCESS;
	}
	}
	return MPI_ERR_OP;
}

// cb_run issues the call iters times back to back; with times, each
// operation's time in microseconds by MPI_Wtime.
static int cb_run(cb_call *a, int iters, double *times) {
	for (int i = 0; i < iters; i++) {
		double t0 = times ? MPI_Wtime() : 0;
		int rc = cb_one(a);
		if (rc != MPI_SUCCESS) return rc;
		if (times) times[i] = (MPI_Wtime() - t0) * 1e6;
	}
	return MPI_SUCCESS;
}

static int cb_cuda_aware(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
	return MPIX_Query_cuda_support();
#else
	return -1;
#endif
}

static int cb_errstr(int code, char *buf) {
	int n = 0;
	MPI_Error_string(code, buf, &n);
	return n;
}

static int cb_library(char *buf) {
	int n = 0;
	MPI_Get_library_version(buf, &n);
	return n;
}

static int cb_max_string(void) { return MPI_MAX_ERROR_STRING > MPI_MAX_LIBRARY_VERSION_STRING ? MPI_MAX_ERROR_STRING : MPI_MAX_LIBRARY_VERSION_STRING; }
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"unsafe"

	"collbench/backend/cpu"
	"collbench/bootstrap"
	"collbench/dtype"
	"collbench/measure"
	"collbench/results"
	"collbench/watchdog"
)

// Available reports whether this build has the mpi backend.
const Available = true

// Backend runs collectives through MPI on host memory.
type Backend struct {
	opts Options
}

// New returns the mpi backend; MPI itself starts when the world forms.
func New(opts Options) (measure.Backend, error) { return &Backend{opts: opts}, nil }

// Name returns "mpi".
func (b *Backend) Name() string { return Name }

// DefaultRanks is the number of processes mpirun started.
func (b *Backend) DefaultRanks() int { return 1 }

// Info names the MPI library, its CUDA support and what it moves data over.
func (b *Backend) Info() results.Backend {
	lib := Library()
	return results.Backend{Name: Name, Version: lib, Library: "libmpi", Driver: CUDANote(), Transport: Transport()}
}

// Supports says why MPI cannot run c on t with op (see support.go).
func (b *Backend) Supports(c measure.Collective, t dtype.DType, op measure.ReduceOp) error {
	return Supports(c, t, op)
}

// Open refuses: MPI runs one rank per process, started by mpirun.
func (b *Backend) Open(ctx context.Context, n int) (measure.World, error) {
	return nil, errors.New("the mpi backend runs one rank per process: start it with mpirun -np N bin/collbench-mpi ... --backend mpi")
}

// Library is MPI_Get_library_version's first line ("Open MPI v4.1.4, ...").
func Library() string {
	buf := make([]byte, int(C.cb_max_string())+1)
	n := C.cb_library((*C.char)(unsafe.Pointer(&buf[0])))
	s := string(buf[:int(n)])
	if i := strings.IndexAny(s, "\n\x00"); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimSpace(s)
	if i := strings.Index(s, ", ident:"); i >= 0 {
		s = s[:i] // the ident and repository revision repeat the version
	}
	return strings.TrimSuffix(s, ",")
}

// CUDAAware says what MPIX_Query_cuda_support answers: 1 yes, 0 no, -1
// the library has no such query. Valid once MPI has started.
func CUDAAware() int { return int(C.cb_cuda_aware()) }

// CUDANote puts CUDAAware in words.
func CUDANote() string {
	switch CUDAAware() {
	case 1:
		return "CUDA-aware (MPIX_Query_cuda_support = 1)"
	case 0:
		return "not CUDA-aware (MPIX_Query_cuda_support = 0)"
	}
	return "CUDA support unknown (no MPIX_Query_cuda_support)"
}

// DeviceNote says why the mpi backend does not use GPU memory here.
func DeviceNote() string {
	if CUDAAware() == 1 {
		return "this MPI is CUDA-aware, but the mpi backend runs on host memory only (GPU buffers through MPI are not built)"
	}
	return "this MPI is " + CUDANote() + ": GPU buffers need an MPI built with CUDA"
}

// Transport names what Open MPI moves data with in this process: the
// point-to-point components (pml, btl, mtl) and UCX, as loaded after
// MPI_Init (read from /proc/self/maps), and the MCA settings that chose
// them.
func Transport() string {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return ""
	}
	seen := map[string]bool{}
	var parts []string
	for _, line := range strings.Split(string(maps), "\n") {
		i := strings.LastIndexByte(line, '/')
		if i < 0 {
			continue
		}
		base := line[i+1:]
		name := ""
		switch {
		case strings.HasPrefix(base, "mca_pml_"), strings.HasPrefix(base, "mca_btl_"), strings.HasPrefix(base, "mca_mtl_"):
			name = strings.TrimSuffix(strings.TrimPrefix(base, "mca_"), ".so")
			name = strings.Replace(name, "_", "/", 1)
		case strings.HasPrefix(base, "libucp.so"):
			name = "ucx"
		}
		if name != "" && !seen[name] {
			seen[name] = true
			parts = append(parts, name)
		}
	}
	for _, k := range []string{"OMPI_MCA_pml", "OMPI_MCA_btl", "OMPI_MCA_mtl", "UCX_TLS"} {
		if v := os.Getenv(k); v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	if len(parts) == 0 {
		return "built into libmpi"
	}
	return strings.Join(parts, " ")
}

// mpiError turns an MPI return code into an error naming the call.
func mpiError(code C.int, what string, rank int) error {
	buf := make([]byte, int(C.cb_max_string())+1)
	n := C.cb_errstr(code, (*C.char)(unsafe.Pointer(&buf[0])))
	return fmt.Errorf("rank %d: %s failed: %s (MPI error %d)", rank, what, strings.TrimSpace(string(buf[:int(n)])), int(code))
}

// OpenDistributed creates this process's rank of the MPI job's world.
func (b *Backend) OpenDistributed(ctx context.Context, ctl measure.Control, device int) (measure.World, error) {
	m, err := bootstrap.CurrentMPI()
	if err != nil {
		return nil, err
	}
	if m.Size() != ctl.Size() || m.Rank() != ctl.Rank() {
		return nil, fmt.Errorf("MPI says rank %d of %d, the control connection rank %d of %d", m.Rank(), m.Size(), ctl.Rank(), ctl.Size())
	}
	var rc C.int
	var coll collSettings
	m.Do(func() {
		rc = C.cb_errors_return(C.cb_world())
		coll = readCollSettings()
	})
	if rc != C.MPI_SUCCESS {
		return nil, mpiError(rc, "MPI_Comm_set_errhandler", ctl.Rank())
	}
	hosts, me := ctl.Hosts(), ctl.Rank()
	track := watchdog.BoardFrom(ctx).For(me)
	w := &world{coll: coll, m: m, ctl: ctl, host: cpu.NewHost(me, hosts, b.opts.MemoryLimit, track), opts: b.opts}
	w.rank = &rank{w: w, comm: C.cb_world(), me: me, size: ctl.Size(), hostName: hosts[me], track: track, ops: new(int64)}
	return w, nil
}

type world struct {
	// coll are the settings that choose MPI's collective algorithms.
	coll  collSettings
	m     *bootstrap.MPI
	ctl   measure.Control
	host  *cpu.Host
	opts  Options
	rank  *rank
	child bool
}

func (w *world) Size() int                             { return w.ctl.Size() }
func (w *world) Ranks() []measure.Rank                 { return []measure.Rank{w.rank} }
func (w *world) Run(fn func(measure.Rank) error) error { return fn(w.rank) }
func (w *world) Control() measure.Control              { return w.ctl }

// Abort stops this rank: a call waiting for MPI returns at once (the MPI
// call itself cannot be interrupted; it ends with the process), and long
// loops over memory stop.
func (w *world) Abort(cause error) { w.host.Abort(cause) }

// MemoryBudget is what this process's rank may allocate.
func (w *world) MemoryBudget() (int64, string) { return w.host.Budget() }

// UsedMemory is the host memory the rank has allocated.
func (w *world) UsedMemory() int64 { return w.host.Used() }

// LibraryMemory is what the backend keeps besides the buffers (MPI's own
// memory is not counted).
func (w *world) LibraryMemory() int64 { return 0 }

// Algorithm says what is known of MPI's algorithm for c: the one Open
// MPI's settings force, or that the library chooses per call (MPI does not
// say which it ran).
func (w *world) Algorithm(c measure.Collective, bytes int64, ranks int) *results.AlgoChoice {
	if ranks < 2 {
		return nil
	}
	return w.coll.choice(c)
}

// call runs f on the MPI thread and waits for it, or for the world's
// abort: then it returns the abort's error and leaves f to the MPI thread
// (an MPI call cannot be interrupted). f does not start once the world is
// aborted.
func (w *world) call(f func()) error {
	if err := w.host.Stopped(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		// done closes once Do has returned, so a call that returned here
		// is no longer counted on the MPI thread (Finalize looks there).
		defer close(done)
		w.m.Do(func() {
			if w.host.Stopped() == nil {
				f()
			}
		})
	}()
	select {
	case <-done:
		return w.host.Stopped()
	case <-w.host.Done():
		return w.host.Stopped()
	}
}

// Split makes one communicator per group of l with MPI_Comm_split; every
// process calls it, in the same order.
func (w *world) Split(l measure.Layout) (measure.World, error) {
	me := w.ctl.Rank()
	gid, idx := l.Locate(me)
	color := C.int(gid)
	if gid < 0 {
		color = C.MPI_UNDEFINED
	}
	var comm C.MPI_Comm
	var rc C.int
	if err := w.call(func() {
		rc = C.MPI_Comm_split(C.cb_world(), color, C.int(idx), &comm)
		if rc == C.MPI_SUCCESS && gid >= 0 {
			rc = C.cb_errors_return(comm)
		}
	}); err != nil {
		return nil, err
	}
	if rc != C.MPI_SUCCESS {
		return nil, mpiError(rc, "MPI_Comm_split", me)
	}
	if gid < 0 {
		return nil, fmt.Errorf("rank %d is in no group of %s", me, l.String())
	}
	sw := &world{coll: w.coll, m: w.m, ctl: w.ctl, host: w.host, opts: w.opts, child: true}
	sw.rank = &rank{w: sw, comm: comm, me: idx, size: len(l.Groups[gid]), hostName: w.rank.hostName, track: w.rank.track, ops: w.rank.ops}
	return sw, nil
}

// Close frees a split world's communicator; the whole world's ends with MPI.
func (w *world) Close() error {
	if !w.child || w.rank.comm == C.cb_null() {
		return nil
	}
	var rc C.int
	err := w.call(func() { rc = C.MPI_Comm_free(&w.rank.comm) })
	if err == nil && rc != C.MPI_SUCCESS {
		err = mpiError(rc, "MPI_Comm_free", w.ctl.Rank())
	}
	return err
}

type rank struct {
	w        *world
	comm     C.MPI_Comm
	me, size int
	hostName string
	track    *watchdog.Tracker
	ops      *int64
	// v holds the alltoallv counts and displacements for vCount, in C memory.
	v      *C.int
	vCount int64
	vEsz   int
}

func (r *rank) Rank() int      { return r.me }
func (r *rank) Size() int      { return r.size }
func (r *rank) WorldRank() int { return r.w.ctl.Rank() }
func (r *rank) Device() results.Device {
	return results.Device{Rank: r.WorldRank(), Name: "host memory on " + r.hostName}
}

func (r *rank) Alloc(n int64) (measure.Buffer, error) { return r.w.host.Alloc(n) }

// Free gives a buffer back; after an abort it stays mapped, since an MPI
// call that did not return may still write to it.
func (r *rank) Free(b measure.Buffer) error {
	if r.w.host.Stopped() != nil {
		return nil
	}
	return r.w.host.Free(b)
}
func (r *rank) Fill(dst measure.View, count int64, p measure.Pattern) error {
	return r.w.host.Fill(dst, count, p)
}
func (r *rank) Poison(dst measure.View, count int64, t dtype.DType) error {
	return r.w.host.Poison(dst, count, t)
}
func (r *rank) Check(src measure.View, e measure.Expectation) (int64, error) {
	return r.w.host.Check(src, e)
}
func (r *rank) FindMismatches(src measure.View, e measure.Expectation, limit int) ([]results.Mismatch, error) {
	return r.w.host.FindMismatches(src, e, limit)
}
func (r *rank) ReadHost(src measure.View, bytes int64) ([]byte, error) {
	return r.w.host.ReadHost(src, bytes)
}
func (r *rank) Sync() error { return nil }

// Barrier is MPI_Barrier over the whole world.
func (r *rank) Barrier() error {
	r.track.SetPhase(watchdog.Barrier)
	var rc C.int
	if err := r.w.call(func() { rc = C.MPI_Barrier(C.cb_world()) }); err != nil {
		return err
	}
	if rc != C.MPI_SUCCESS {
		return mpiError(rc, "MPI_Barrier", r.WorldRank())
	}
	return nil
}

// Launch issues c once.
func (r *rank) Launch(c measure.Call) error { return r.Repeat(c, 1) }

// Repeat issues c n times back to back in one call into C, as a C
// benchmark's loop does.
func (r *rank) Repeat(c measure.Call, n int) error { return r.run(c, n, nil) }

// TimeEach times each of iters operations with MPI_Wtime around the call.
func (r *rank) TimeEach(c measure.Call, iters int) ([]float64, error) {
	times := make([]float64, iters)
	if iters == 0 {
		return times, nil
	}
	ct := (*C.double)(C.malloc(C.size_t(iters) * C.size_t(unsafe.Sizeof(C.double(0)))))
	defer C.free(unsafe.Pointer(ct))
	if err := r.run(c, iters, ct); err != nil {
		return nil, err
	}
	copy(times, unsafe.Slice((*float64)(unsafe.Pointer(ct)), iters))
	return times, nil
}

var mpiNames = map[measure.Collective]string{
	measure.AllReduce: "MPI_Allreduce", measure.AllGather: "MPI_Allgather", measure.ReduceScatter: "MPI_Reduce_scatter_block",
	measure.Broadcast: "MPI_Bcast", measure.Reduce: "MPI_Reduce", measure.AllToAll: "MPI_Alltoall", measure.SendRecv: "MPI_Sendrecv",
	measure.Gather: "MPI_Gather", measure.Scatter: "MPI_Scatter", measure.AllToAllV: "MPI_Alltoallv", measure.HyperCube: "MPI_Sendrecv (hypercube)",
}

var collCodes = map[measure.Collective]C.int{
	measure.AllReduce: C.CB_ALLREDUCE, measure.AllGather: C.CB_ALLGATHER, measure.ReduceScatter: C.CB_REDUCESCATTER,
	measure.Broadcast: C.CB_BCAST, measure.Reduce: C.CB_REDUCE, measure.AllToAll: C.CB_ALLTOALL, measure.SendRecv: C.CB_SENDRECV,
	measure.Gather: C.CB_GATHER, measure.Scatter: C.CB_SCATTER, measure.AllToAllV: C.CB_ALLTOALLV, measure.HyperCube: C.CB_HYPERCUBE,
}

var typeCodes = map[dtype.DType]C.int{
	dtype.Int8: 0, dtype.Uint8: 1, dtype.Int32: 2, dtype.Uint32: 3, dtype.Int64: 4, dtype.Uint64: 5, dtype.Float32: 6, dtype.Float64: 7,
}

var opCodes = map[measure.ReduceOp]C.int{measure.Sum: 0, measure.Prod: 1, measure.Max: 2, measure.Min: 3}

// run issues n operations of c through MPI, each timed by MPI_Wtime into
// times.
func (r *rank) run(c measure.Call, n int, times *C.double) error {
	if err := Supports(c.Coll, c.DType, c.Op); err != nil {
		return err
	}
	code, ok := collCodes[c.Coll]
	if !ok {
		return fmt.Errorf("%w: collective %s on the mpi backend", measure.ErrUnsupported, c.Coll)
	}
	esz := int64(c.DType.Size())
	g := measure.CallGeometry(c, r.size)
	send, err := cpu.Bytes(c.Send, g.SendCount*esz)
	if err != nil {
		return err
	}
	recv, err := cpu.Bytes(c.Recv, g.RecvCount*esz)
	if err != nil {
		return err
	}
	a := C.cb_call{coll: code, root: C.int(c.Root), comm: r.comm, esz: C.int(esz)}
	count := c.Count
	scale := int64(1) // carried elements per element
	if t, ok := typeCodes[c.DType]; ok {
		a._type = t
	} else {
		// A data-moving collective on a type MPI lacks: the elements as bytes.
		a._type = 8
		count *= esz
		scale = esz
		a.esz = 1
	}
	if c.Coll.Reduces() {
		a.op = opCodes[c.Op]
	}
	if limit := count * int64(max(r.size, 1)); limit > math.MaxInt32 {
		return fmt.Errorf("rank %d: %s of %d elements per rank is over MPI's int count (%d); use smaller sizes", r.WorldRank(), c.Coll, count, math.MaxInt32)
	}
	a.count = C.int(count)
	a.send, a.recv = ptr(send), ptr(recv)
	a.inplace = 0
	if inPlace(c, send, recv, g, esz, r.me) {
		a.inplace = 1
	}
	if c.Coll == measure.AllToAllV {
		if a.inplace == 1 {
			return fmt.Errorf("%w: alltoallv in place", measure.ErrUnsupported)
		}
		r.vTables(count, scale, int(esz), &a)
	}
	if err := r.planted(); err != nil {
		return err
	}
	var rc C.int
	// Inside MPI a rank waits for every rank of its communicator: the
	// watchdog names the ranks that are not inside.
	r.track.Waiting(watchdog.WaitingAll)
	err = r.w.call(func() { rc = C.cb_run(&a, C.int(n), times) })
	r.track.Waiting(watchdog.NotWaiting)
	if err != nil {
		return err
	}
	if rc != C.MPI_SUCCESS {
		return mpiError(rc, mpiNames[c.Coll], r.WorldRank())
	}
	return nil
}

// planted acts out a planted fault at this collective: a hang until the
// world is aborted, or the process killing or stopping itself.
func (r *rank) planted() error {
	*r.ops++
	me := r.WorldRank()
	if at, ok := r.w.opts.Faults.HangAt(me); ok && *r.ops >= at {
		<-r.w.host.Done()
		return r.w.host.Stopped()
	}
	r.w.opts.Faults.ActOnProcess(me, *r.ops)
	return nil
}

// inPlace says whether the call's output shares its input in the way MPI's
// MPI_IN_PLACE means for the collective (collbench's in-place layouts).
func inPlace(c measure.Call, send, recv []byte, g measure.Geometry, esz int64, me int) bool {
	if len(send) == 0 || len(recv) == 0 {
		return false
	}
	s, r := uintptr(unsafe.Pointer(&send[0])), uintptr(unsafe.Pointer(&recv[0]))
	switch c.Coll {
	case measure.AllGather, measure.Gather:
		return s == r+uintptr(int64(me)*g.SendCount*esz)
	case measure.ReduceScatter, measure.Scatter:
		return r == s+uintptr(int64(me)*g.RecvCount*esz)
	}
	return s == r
}

func ptr(b []byte) *C.char {
	if len(b) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(&b[0]))
}

// vTables fills the alltoallv counts and displacements (in carried
// elements; scale is carried elements per element of esz bytes) in C
// memory, kept for the next call of the same count and element size.
func (r *rank) vTables(count, scale int64, esz int, a *C.cb_call) {
	n := r.size
	if r.v == nil || r.vCount != count || r.vEsz != esz {
		if r.v == nil {
			r.v = (*C.int)(C.malloc(C.size_t(4*n) * C.size_t(unsafe.Sizeof(C.int(0)))))
		}
		t := unsafe.Slice(r.v, 4*n)
		base := count / scale
		for p := 0; p < n; p++ {
			t[p] = C.int(measure.VCount(base, esz, r.me, p, n) * scale)
			t[n+p] = C.int(measure.VDispl(base, esz, r.me, p, n) * scale)
			t[2*n+p] = C.int(measure.VCount(base, esz, p, r.me, n) * scale)
			t[3*n+p] = C.int(measure.VRecvDispl(base, esz, p, r.me, n) * scale)
		}
		r.vCount, r.vEsz = count, esz
	}
	t := unsafe.Slice(r.v, 4*n)
	a.scounts, a.sdispls, a.rcounts, a.rdispls = &t[0], &t[n], &t[2*n], &t[3*n]
}

// Describe names the MPI library this build runs with and its CUDA support.
func Describe() (string, error) {
	return Library() + "; " + CUDANote() + " (bin/collbench-mpi; --backend mpi under mpirun)", nil
}

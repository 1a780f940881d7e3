// Package fakegpu is a simulated GPU machine behind package driver's
// interface: the CUDA driver and NCCL of a whole host (an nvmlmock machine)
// in host memory, so the NCCL backend's own logic runs in tests without
// GPUs. Streams run their work in order on their own goroutine; NCCL
// collectives meet across ranks as on a real machine and compute their
// results in Go; the fill and check kernels run the kernels' own C code
// compiled for the host, after their launch parameters are checked
// against the PTX's. Faults (a failed call, an asynchronous error, a
// corrupt result) are planted by call, GPU and count. Only tests import it.
package fakegpu

import (
	"crypto/rand"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"collbench/backend/nccl/driver"
	"collbench/cuda"
	"collbench/internal/nvmlmock"
)

// Options shape the machine's software and its faults.
type Options struct {
	// NCCLVersion is the library's version code; 22803 when 0.
	NCCLVersion int
	// Features are the optional NCCL calls; every one when nil.
	Features *driver.Features
	// NoKernels makes module loading fail, as on a driver that cannot JIT
	// the PTX: the backend then fills and checks through host copies.
	NoKernels bool
	// NoCapture makes the driver lack stream capture.
	NoCapture bool
	// MemoryBytes is each GPU's memory; 1 GiB when 0 (the machine's own
	// size is reported by NVML, not here: tests allocate for real).
	MemoryBytes int64
	// Timeout bounds every wait inside the machine (a collective waiting
	// for its peers, a stream synchronize); 30 s when 0. A wait that runs
	// out fails with an error naming who was waited for.
	Timeout time.Duration
	// Faults are planted failures.
	Faults []Fault
	// Model, if set, times the machine's work on a virtual clock (see
	// Model); nil times it by the host's clock.
	Model *Model
	// OrderByPast turns each reduction's order by one rank unless the
	// communicator's previous collective had the same count: a result
	// that depends on what ran before, as NVLS's can, for collbench
	// determinism's history check.
	OrderByPast bool
	// OrderByRun turns each reduction's order by one rank on every other
	// reduction of a communicator and on every other communicator: the
	// same call on the same inputs gives other bits run to run, in one
	// communicator (collbench --bitwise) and on fresh ones (determinism's
	// run check), as a library reducing with atomics can.
	OrderByRun bool
	// OrderByRank has every rank of an allreduce sum in its own order (a
	// turn by its rank), so ranks hold results that differ in their last
	// bits: determinism's and --bitwise's ranks check.
	OrderByRank bool
	// NoLL128 plays an NCCL that cannot run LL128 here (its cost table
	// marks every LL128 pair unable to run, as over its network transport
	// between hosts): a tuner that forces LL128 is not followed.
	NoLL128 bool
	// RejectProfiler plays an NCCL that finds no profiler interface
	// version it knows in the plugin: it runs without one.
	RejectProfiler bool
	// ProxySteps sends point-to-point traffic through the proxy, as
	// between hosts: the profiler plugin then sees its network steps.
	ProxySteps bool
	// WireDelay holds each of those send steps on the wire this long,
	// by {sending GPU, receiving GPU}: a slow path between them.
	WireDelay map[[2]int]time.Duration
	// ProfilerStall plays NCCL 2.28.3's profiler stall: a recorded group
	// of sends and receives with more than two peers' operations that
	// moves at least this many bytes on one rank runs, but its kernel
	// events are never ended (the proxy thread is stuck on them), and
	// ncclCommDestroy of that communicator then waits until it is aborted.
	// Seen on 4x H200 from 1 GiB (alltoall of 512 MiB); that is the
	// default on a 2.28 library, and negative turns it off.
	ProfilerStall int64
	// ClockOffsets sets each GPU's timer apart from the host's clock, in
	// ns by GPU index, as real GPUs' global timers are (tens of ms).
	ClockOffsets []int64
}

// Fault is a failure planted in one call on one GPU.
type Fault struct {
	// Call is the API name: "ncclAllReduce", "ncclSend", "ncclCommInitRank",
	// "ncclGroupEnd", "ncclCommRegister", "cuMemAlloc", "cuStreamSynchronize", ...
	Call string
	// Device is the GPU the call fails on; -1 every GPU.
	Device int
	// Skip is how many of those calls succeed first.
	Skip int
	// Code is the result returned: an ncclResult_t for nccl calls
	// (internal error when 0), a CUresult for cu calls (999 when 0).
	Code int
	// Async makes an NCCL collective succeed, then the communicator report
	// Code asynchronously.
	Async bool
	// Corrupt makes a collective succeed with one wrong element in the
	// output on Device.
	Corrupt bool
	// Hang makes the call block in the thread that issues it, as a blocking
	// communicator does while it waits for a peer that never comes, until
	// the communicator is aborted (or the machine's Timeout runs out).
	Hang bool
}

// Driver is the simulated machine; it implements driver.Driver.
type Driver struct {
	m    nvmlmock.Machine
	opts Options

	mu       sync.Mutex
	current  map[int]*context // by OS thread id, as CUDA keeps it
	contexts []*context
	handles  map[unsafe.Pointer]any
	mem      memory
	cliques  map[driver.UniqueID]*clique
	// serials numbers the communicators made (Options.OrderByRun).
	serials atomic.Int64
	calls   map[string]int // by call and device: how many were made
	// crossings counts the driver's entries that are one crossing from Go
	// into C in the real binding (Crossings).
	crossings map[string]int64
	depth     int // NCCL group depth
	// issuers are the OS threads that enqueued NCCL operations, by GPU.
	issuers map[int]map[int]bool
	loaded  bool
	clk     *clock // nil: the host's clock
	// prof is the profiler plugin NCCL loaded (nil: none); profTried says
	// whether the first communicator looked for it.
	prof      *profiler
	profTried bool
	// tuner says whether NCCL loaded the tuner plugin; tunerTried whether
	// the first communicator looked for it.
	tuner, tunerTried bool
	// tunerChunks: the plugin answers the chunk size (interface 6, NCCL
	// 2.30 and later).
	tunerChunks bool
	// anyAbort is closed when the first communicator is aborted: it ends
	// the calls that a planted fault holds (Fault.Hang).
	anyAbort  chan struct{}
	abortOnce sync.Once
}

// New builds the machine m with opts.
func New(m nvmlmock.Machine, opts Options) *Driver {
	if opts.NCCLVersion == 0 {
		opts.NCCLVersion = 22803
	}
	if opts.MemoryBytes == 0 {
		opts.MemoryBytes = 1 << 30
	}
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.ProfilerStall == 0 && opts.NCCLVersion >= 22800 && opts.NCCLVersion < 22900 {
		opts.ProfilerStall = 1 << 30
	}
	d := &Driver{m: m, opts: opts, current: map[int]*context{}, handles: map[unsafe.Pointer]any{},
		cliques: map[driver.UniqueID]*clique{}, calls: map[string]int{}, issuers: map[int]map[int]bool{},
		anyAbort: make(chan struct{})}
	d.mem.init(len(m.GPUs))
	if opts.Model != nil {
		d.clk = newClock(d, opts.Model)
	}
	for i := range m.GPUs {
		d.contexts = append(d.contexts, &context{dev: i})
	}
	d.m.Running = d.running
	return d
}

// running lists this process on GPU i while it holds i's context, with the
// memory it allocated there, as NVML lists a process with a context.
func (d *Driver) running(i int) []nvml.ProcessInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	if i < 0 || i >= len(d.contexts) || d.contexts[i].retained == 0 {
		return nil
	}
	return []nvml.ProcessInfo{{Pid: uint32(os.Getpid()), UsedGpuMemory: uint64(max(d.mem.used[i], 0))}} //nolint:gosec // G115: a pid and a byte count
}

// HGX is an HGX board of model "H100" or "H200" with n of its 8 GPUs and
// opts.
func HGX(model string, n int, opts Options) *Driver {
	m := nvmlmock.HGX(model)
	m.GPUs = m.GPUs[:min(max(n, 0), len(m.GPUs))]
	return New(m, opts)
}

type context struct {
	dev      int
	retained int
}

// cross counts one entry of the driver that the real binding makes with
// one crossing from Go into C.
func (d *Driver) cross(name string) {
	d.mu.Lock()
	if d.crossings == nil {
		d.crossings = map[string]int64{}
	}
	d.crossings[name]++
	d.mu.Unlock()
}

// Crossings are the driver's entries made so far that the real binding
// makes with one crossing from Go into C each (an NCCL call loop, a
// group, an event, a synchronize, a copy), by entry: what a test counts
// per operation, since each crossing costs the host time small messages
// are made of.
func (d *Driver) Crossings() map[string]int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int64, len(d.crossings))
	for k, v := range d.crossings {
		out[k] = v
	}
	return out
}

// fault returns the error a planted fault gives call on dev now, counting
// the call; async and corrupt faults are returned for the caller to plant.
func (d *Driver) fault(call string, dev int) *Fault {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := fmt.Sprintf("%s@%d", call, dev)
	n := d.calls[key]
	d.calls[key] = n + 1
	for i := range d.opts.Faults {
		f := &d.opts.Faults[i]
		if f.Call == call && (f.Device < 0 || f.Device == dev) && n >= f.Skip {
			return f
		}
	}
	return nil
}

// failNow is a planted synchronous failure of call on dev, or nil.
func (d *Driver) failNow(call string, dev int) error {
	f := d.fault(call, dev)
	if f == nil || f.Async || f.Corrupt {
		return nil
	}
	if f.Hang && (call == "ncclCommAbort" || call == "ncclCommDestroy") {
		// A teardown that never returns: no abort releases it.
		time.Sleep(d.opts.Timeout)
		return ncclErr(call, driver.InternalError, fmt.Sprintf("the call hung for %v (fault planted on GPU %d)", d.opts.Timeout, dev))
	}
	if f.Hang {
		return d.hang(call, dev)
	}
	if strings.HasPrefix(call, "nccl") {
		return ncclErr(call, orInt(f.Code, driver.InternalError), fmt.Sprintf("fault planted on GPU %d", dev))
	}
	return cudaErr(call, orInt(f.Code, 999))
}

// hang holds call on dev, as a planted Fault.Hang, until a communicator is
// aborted or the machine's timeout runs out.
func (d *Driver) hang(call string, dev int) error {
	t := time.NewTimer(d.opts.Timeout)
	defer t.Stop()
	select {
	case <-d.anyAbort:
		return ncclErr(call, driver.InvalidUsage, fmt.Sprintf("the communicator was aborted while the call hung (fault planted on GPU %d)", dev))
	case <-t.C:
		return ncclErr(call, driver.InternalError, fmt.Sprintf("the call hung for %v (fault planted on GPU %d)", d.opts.Timeout, dev))
	}
}

func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// cudaNames are the CUresult names the fake returns.
var cudaNames = map[int][2]string{
	1:   {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	2:   {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	100: {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	101: {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	201: {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	209: {"CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
	400: {"CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	500: {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	600: {"CUDA_ERROR_NOT_READY", "device not ready"},
	700: {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	801: {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	900: {"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
	999: {"CUDA_ERROR_UNKNOWN", "unknown error"},
}

func cudaErr(call string, code int) error {
	n := cudaNames[code]
	return &cuda.Error{Call: call, Code: code, Name: n[0], Msg: n[1]}
}

// cudaErrf is a CUDA error whose message says more than the code's text.
func cudaErrf(call string, code int, format string, args ...any) error {
	n := cudaNames[code]
	return &cuda.Error{Call: call, Code: code, Name: n[0], Msg: fmt.Sprintf(format, args...)}
}

var ncclTexts = map[int]string{
	driver.UnhandledCudaError: "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
	driver.SystemError:        "unhandled system error (run with NCCL_DEBUG=INFO for details)",
	driver.InternalError:      "internal error - please report this issue to the NCCL developers",
	driver.InvalidArgument:    "invalid argument (run with NCCL_DEBUG=WARN for details)",
	driver.InvalidUsage:       "invalid usage (run with NCCL_DEBUG=WARN for details)",
	driver.RemoteError:        "remote process exited or there was a network error",
	driver.InProgress:         "NCCL operation in progress",
}

func ncclErr(call string, code int, detail string) error {
	return &driver.Error{Call: call, Code: code, Text: ncclTexts[code], Detail: detail}
}

// register makes a Go object an opaque driver handle.
func register[T any](d *Driver, obj *T) unsafe.Pointer {
	p := unsafe.Pointer(obj)
	d.mu.Lock()
	d.handles[p] = obj
	d.mu.Unlock()
	return p
}

func (d *Driver) release(p unsafe.Pointer) {
	d.mu.Lock()
	delete(d.handles, p)
	d.mu.Unlock()
}

// lookup returns handle p's object of type *T, or CUDA_ERROR_INVALID_HANDLE.
func lookup[T any](d *Driver, call string, p unsafe.Pointer) (*T, error) {
	d.mu.Lock()
	obj, ok := d.handles[p]
	d.mu.Unlock()
	t, isT := obj.(*T)
	if !ok || !isT {
		return nil, cudaErr(call, 400)
	}
	return t, nil
}

// noteIssuer records that the calling thread enqueued an NCCL operation
// for GPU dev.
func (d *Driver) noteIssuer(dev int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.issuers[dev] == nil {
		d.issuers[dev] = map[int]bool{}
	}
	d.issuers[dev][thread()] = true
}

// Issuers lists, by GPU, the OS threads (by id) that have enqueued NCCL
// operations for it: one thread for every GPU when one thread issues for
// them all, a thread of its own per GPU otherwise.
func (d *Driver) Issuers() map[int][]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[int][]int{}
	for dev, ts := range d.issuers {
		for t := range ts {
			out[dev] = append(out[dev], t)
		}
		sort.Ints(out[dev])
	}
	return out
}

// thread is the calling OS thread's id: CUDA's current context is per thread.
func thread() int { return syscall.Gettid() }

// ctx is the calling thread's current context, or CUDA_ERROR_INVALID_CONTEXT.
func (d *Driver) ctx(call string) (*context, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.current[thread()]
	if c == nil {
		return nil, cudaErrf(call, 201, "no current context on this thread (call cuCtxSetCurrent first)")
	}
	return c, nil
}

// newID is a fresh unique id.
func newID() driver.UniqueID {
	var id driver.UniqueID
	if _, err := rand.Read(id[:16]); err != nil {
		copy(id[:], time.Now().String()) // crypto/rand does not fail on Linux
	}
	return id
}

// Machine is the machine the driver simulates, for an NVML of the same
// GPUs (nvmlmock.Machine.NVML).
func (d *Driver) Machine() nvmlmock.Machine { return d.m }

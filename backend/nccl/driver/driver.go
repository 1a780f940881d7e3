// Package driver declares what collbench's NCCL backend needs from the CUDA
// driver and from NCCL: the calls, the handles and the errors. Package nccl
// implements it on the real libraries (dlopen through cgo); package
// backend/nccl/fakegpu implements it on a simulated machine in host memory, so the
// backend's own logic (streams, groups, registration, verification, errors)
// runs in tests without GPUs.
package driver

import (
	"fmt"
	"strings"
	"time"

	"collbench/cuda"
)

// VirtualClock is implemented by machines whose streams keep modeled
// time (the fake machine under a model): StreamTime waits for the
// stream's work and says the time it reached; false on a machine without
// a model.
type VirtualClock interface {
	StreamTime(s cuda.Stream) (time.Time, bool)
}

// Driver is the CUDA driver and NCCL together, as one machine offers them.
type Driver interface {
	CUDA
	NCCL
}

// HostDelayer is a driver that models the host's own time (the fake
// machine): told that the host issued nothing to a stream for a while (a
// late host), the stream starts its next work that much later, as a real
// GPU sits idle waiting for its host.
type HostDelayer interface {
	HostDelay(s cuda.Stream, d time.Duration) error
}

// DeviceInfo is what the backend asks the driver about one GPU.
type DeviceInfo struct {
	Name    string
	BusID   string
	CCMajor int
	CCMinor int
	SMs     int
}

// CUDA is the part of the CUDA driver API the backend calls. As in CUDA,
// the current context belongs to the calling OS thread: memory, streams,
// events and modules are made in the context the thread last set current.
type CUDA interface {
	// Load opens the driver and initialises it.
	Load() error
	DriverVersion() (int, error)
	DeviceCount() (int, error)
	Device(index int) (DeviceInfo, error)
	// RetainPrimary returns device index's primary context.
	RetainPrimary(index int) (cuda.Context, error)
	ReleasePrimary(index int) error
	SetCurrent(c cuda.Context) error
	// MemInfo is the current device's free and total memory.
	MemInfo() (free, total int64, err error)
	Alloc(bytes int64) (cuda.DevPtr, error)
	Free(p cuda.DevPtr) error
	CopyToDevice(dst cuda.DevPtr, src []byte) error
	CopyToHost(dst []byte, src cuda.DevPtr) error
	// NewStream creates a non-blocking stream.
	NewStream() (cuda.Stream, error)
	DestroyStream(s cuda.Stream) error
	CopyAsync(dst, src cuda.DevPtr, bytes int64, s cuda.Stream) error
	MemsetAsync(p cuda.DevPtr, v byte, bytes int64, s cuda.Stream) error
	Synchronize(s cuda.Stream) error
	NewEvent() (cuda.Event, error)
	DestroyEvent(e cuda.Event) error
	Record(e cuda.Event, s cuda.Stream) error
	// Elapsed is the time in ms between two recorded events.
	Elapsed(start, end cuda.Event) (float32, error)
	LoadModule(ptx string) (cuda.Module, error)
	UnloadModule(m cuda.Module) error
	GetFunction(m cuda.Module, name string) (cuda.Function, error)
	// Launch starts a one-dimensional grid of f on s; each argument is a
	// kernel parameter (int32, uint32, int64, uint64, float64 or DevPtr).
	Launch(f cuda.Function, grid, block uint32, s cuda.Stream, args ...any) error
	// CanCapture says why stream capture is unavailable, or nil.
	CanCapture() error
	// BeginCapture starts capturing s's work (thread-local mode).
	BeginCapture(s cuda.Stream) error
	// EndCapture ends the capture and instantiates the graph.
	EndCapture(s cuda.Stream) (Graph, error)
}

// Graph is an instantiated CUDA graph.
type Graph interface {
	Launch(s cuda.Stream) error
	Destroy()
}

// NCCL is the part of NCCL the backend calls. Only one library is loaded
// per process.
type NCCL interface {
	// LoadNCCL opens the first candidate that loads, or says where it looked.
	LoadNCCL(cands []Candidate) (Library, error)
	NewUniqueID() (UniqueID, error)
	// InitRank joins communicator id as rank of n; inside GroupStart and
	// GroupEnd one thread may create several ranks.
	InitRank(n int, id UniqueID, rank int) (Comm, error)
	GroupStart() error
	GroupEnd() error
	// RepeatGroup issues n groups from the calling thread, each holding
	// every part's operation Per times on the part's communicator and
	// stream (one thread issuing for several GPUs, as NCCL's benchmark does
	// with -g). A failed call's error is a *PartError naming its part.
	RepeatGroup(parts []Part, n int) error
	// MemAlloc allocates device memory NCCL can register (ncclMemAlloc).
	MemAlloc(bytes int64) (cuda.DevPtr, error)
	MemFree(p cuda.DevPtr) error
}

// Comm is one rank of a communicator.
type Comm interface {
	Destroy() error
	// Abort tears the communicator down without waiting for peers.
	Abort() error
	// AsyncError is an error NCCL recorded asynchronously, or nil.
	AsyncError() error
	Count() (int, error)
	// Split creates sub-communicators by color and key (a collective call).
	Split(color, key int) (Comm, error)
	// Repeat enqueues op n times back to back on s; it stops at the first
	// failed call, and its error names the call and how many were issued.
	Repeat(op *Op, n int, s cuda.Stream) error
	// GroupP2P enqueues sends and receives as one group (ncclGroupStart,
	// the calls in order, ncclGroupEnd, always closing the group), n times
	// back to back, each moved by rot; it stops at the first failed group,
	// and its error says how many were issued.
	GroupP2P(ops []P2P, n int, rot Rotation, s cuda.Stream) error
	// GroupSteps enqueues steps in order, n times back to back, each
	// repetition moved by rot, in one call: a step is a device-to-device
	// copy (Bytes > 0) or one group of sends and receives, as GroupP2P
	// issues it. It stops at the first failed step, and its error names
	// the step and how many repetitions were issued.
	GroupSteps(steps []Step, n int, rot Rotation, s cuda.Stream) error
	// Register registers bytes at p: locally, or as a symmetric window (a
	// collective call: every rank registers the same size).
	Register(p cuda.DevPtr, bytes int64, symmetric bool) (Registration, error)
	Deregister(reg Registration) error
}

// Registration is a buffer registered with a communicator.
type Registration any

// Candidate is a place to load NCCL from, and why it is tried.
type Candidate struct {
	Path   string // passed to dlopen: a path, or a bare name for the linker's search
	Source string // why it is tried: --nccl-lib, $COLLBENCH_NCCL_LIB, dynamic linker, python
}

// Library is a loaded NCCL.
type Library struct {
	Path     string // the path or name it was opened by
	Source   string // the candidate's source
	Version  int    // ncclGetVersion code
	Features Features
}

// Features are the optional calls the loaded library has.
type Features struct {
	SendRecv  bool // ncclSend, ncclRecv (2.7+)
	AllToAll  bool // ncclAlltoAll (2.28.3+)
	Split     bool // ncclCommSplit (2.18+)
	Gather    bool // ncclGather, ncclScatter (2.28.3+)
	Register  bool // ncclCommRegister and ncclMemAlloc (2.19+)
	Windows   bool // ncclCommWindowRegister (2.27+)
	Abort     bool // ncclCommAbort
	AsyncErrs bool // ncclCommGetAsyncError
}

// UniqueID is an ncclUniqueId.
type UniqueID [128]byte

// OpKind says which NCCL call an Op is.
type OpKind int

// The operations Repeat issues.
const (
	AllReduce OpKind = iota + 1
	Broadcast
	Reduce
	AllGather
	ReduceScatter
	AllToAll
	Gather
	Scatter
	// SendRecv is one send (to To) and one receive (from From) in a group.
	SendRecv
)

var opCalls = map[OpKind]string{
	AllReduce: "ncclAllReduce", Broadcast: "ncclBroadcast", Reduce: "ncclReduce",
	AllGather: "ncclAllGather", ReduceScatter: "ncclReduceScatter", AllToAll: "ncclAlltoAll",
	Gather: "ncclGather", Scatter: "ncclScatter", SendRecv: "ncclSend/ncclRecv",
}

// Call is the NCCL function k stands for.
func (k OpKind) Call() string {
	if s, ok := opCalls[k]; ok {
		return s
	}
	return fmt.Sprintf("operation kind %d", int(k))
}

// Op is one operation for Repeat. DType and RedOp are NCCL's enum values
// (collbench's dtype and op numbers are NCCL's); Root is the root of a
// rooted collective, To and From the peers of a send/recv.
type Op struct {
	Kind       OpKind
	Send, Recv cuda.DevPtr
	Count      int64
	DType      int
	RedOp      int
	Root       int
	To, From   int
	// Rot moves the buffers from one repetition to the next.
	Rot Rotation
}

// Rotation moves an operation's buffers between repetitions, as NCCL's
// benchmark does, so that no repetition reads what the one before left in
// the GPU's cache: repetition i of a Repeat, RepeatGroup or GroupP2P (in
// issue order, from 0) adds ((First + i) % Steps) * Stride bytes to every
// buffer address. The zero Rotation moves nothing.
type Rotation struct {
	Stride       int64
	Steps, First int
}

// Shift is the bytes added to the buffers of repetition i.
func (r Rotation) Shift(i int) int64 {
	if r.Steps <= 1 || r.Stride <= 0 {
		return 0
	}
	return int64((r.First+i)%r.Steps) * r.Stride
}

// P2P is one send or receive of a grouped exchange.
type P2P struct {
	Buf   cuda.DevPtr
	Count int64
	DType int
	Peer  int
	Send  bool
}

// Step is one step of GroupSteps: a copy of Bytes from Src to Dst where
// Bytes > 0, else the group of Ops.
type Step struct {
	Dst, Src cuda.DevPtr
	Bytes    int64
	Ops      []P2P
}

// Part is one GPU's share of the groups RepeatGroup issues: Op, Per times
// in each group, on Comm and Stream.
type Part struct {
	Comm   Comm
	Op     *Op
	Per    int
	Stream cuda.Stream
}

// PartError is a failed call of a group that one thread issued for several
// GPUs: Part is the index of the part whose call failed, or -1 when the
// group itself failed (ncclGroupStart or ncclGroupEnd).
type PartError struct {
	Part int
	Err  error
}

func (e *PartError) Error() string { return e.Err.Error() }
func (e *PartError) Unwrap() error { return e.Err }

// NCCL result codes.
const (
	Success            = 0
	UnhandledCudaError = 1
	SystemError        = 2
	InternalError      = 3
	InvalidArgument    = 4
	InvalidUsage       = 5
	RemoteError        = 6
	InProgress         = 7
	// Missing marks a call the loaded library does not have.
	Missing = 999999
)

// Error is a failed NCCL call.
type Error struct {
	Call   string
	Code   int
	Text   string // ncclGetErrorString
	Detail string // ncclGetLastError, when the library has it
}

func (e *Error) Error() string {
	if e.Code == Missing {
		return e.Call + ": not available in this NCCL"
	}
	s := fmt.Sprintf("%s: %s (ncclResult %d)", e.Call, e.Text, e.Code)
	if e.Detail != "" {
		s += ": " + strings.TrimSpace(e.Detail)
	}
	return s
}

package measure

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"collbench/dtype"
	"collbench/internal/words"
	"collbench/results"
)

// Backend is a way of running collectives: NCCL on GPUs or goroutines on
// host memory. Benchmark logic only sees this interface.
type Backend interface {
	// Name is the backend's short name: "cpu" or "nccl".
	Name() string
	// Info describes the backend for result headers.
	Info() results.Backend
	// Supports returns nil when the backend can run c on t with op, else an
	// error saying why not.
	Supports(c Collective, t dtype.DType, op ReduceOp) error
	// DefaultRanks is the rank count used when none is asked for.
	DefaultRanks() int
	// Open creates a world of n ranks driven by this process.
	Open(ctx context.Context, n int) (World, error)
}

// World is a communicator and the ranks of it this process drives.
type World interface {
	// Size is the number of ranks in the communicator.
	Size() int
	// Ranks are the ranks this process drives, in rank order.
	Ranks() []Rank
	// Run calls fn for every local rank concurrently, each on the rank's own
	// thread, and returns the first error once all calls have returned.
	Run(fn func(Rank) error) error
	// Split creates one communicator per group of l. The returned world
	// holds this process's ranks in the same order, each with its group's
	// rank and size; its Barrier still spans the whole world, and closing it
	// frees only the group communicators.
	Split(l Layout) (World, error)
	// Close releases the communicator and every buffer.
	Close() error
}

// Buffer is memory on one rank's device.
type Buffer interface {
	// Len is the buffer's size in bytes.
	Len() int64
}

// View is a byte offset into a Buffer.
type View struct {
	Buf Buffer
	Off int64
}

// At returns the view elems elements of size esz further on.
func (v View) At(elems int64, esz int) View { return View{v.Buf, v.Off + elems*int64(esz)} }

// Call is one collective operation as one rank issues it.
type Call struct {
	Coll  Collective
	DType dtype.DType
	Op    ReduceOp
	Root  int
	Count int64 // the count argument: per rank, or per peer for alltoall
	Send  View
	Recv  View
	// Rotate allows a backend that moves buffers (BufferRotator) to run
	// successive repetitions of the call on successive places of its
	// buffers, as NCCL's benchmark does, so that none is timed on what the
	// one before left in the GPU's cache. It names the loop the
	// repetitions belong to (RotateWarmup, RotateTimed): each loop starts
	// at the buffers' start, as each of NCCL's benchmark's loops does,
	// and the repetitions of one loop issued in several steps go on where
	// the last step ended. NoRotation (the zero value) moves nothing, and
	// is what a call whose output is checked takes.
	Rotate Rotation
}

// Rotation is the loop a call's repetitions belong to (Call.Rotate).
type Rotation uint8

// The loops whose repetitions a backend may move through its buffers.
const (
	NoRotation Rotation = iota
	RotateWarmup
	RotateTimed
)

// CallGeometry recovers one rank's buffer lengths from a call's count on n ranks.
func CallGeometry(c Call, n int) Geometry {
	nn := int64(n)
	switch specs[c.Coll].shape {
	case gathered:
		return Geometry{Count: c.Count, SendCount: c.Count, RecvCount: c.Count * nn}
	case scattered:
		return Geometry{Count: c.Count, SendCount: c.Count * nn, RecvCount: c.Count}
	case exchanged:
		if c.Coll == AllToAllV {
			t := VRecvDispl(c.Count, c.DType.Size(), n, 0, n) // the sum of the parts
			return Geometry{Count: c.Count, SendCount: t, RecvCount: t}
		}
		return Geometry{Count: c.Count, SendCount: c.Count * nn, RecvCount: c.Count * nn}
	}
	return Geometry{Count: c.Count, SendCount: c.Count, RecvCount: c.Count}
}

// Rank is one member of a communicator, bound to one device and stream.
// Its methods are called only from the goroutine World.Run gives it.
// DeviceTimer is a rank that times work on its device itself (GPU events
// around it), rather than by the host's clock around the work and a wait.
type DeviceTimer interface {
	// TimeOnDevice runs work, which enqueues on the rank's device, and
	// returns how long the device took, in seconds.
	TimeOnDevice(work func() error) (float64, error)
}

// Rank is one rank of a world: its buffers, collectives and timing.
type Rank interface {
	// Rank and Size are within the rank's communicator (its group).
	Rank() int
	Size() int
	// WorldRank is the rank in the whole world.
	WorldRank() int
	// Device names what this rank runs on.
	Device() results.Device
	Alloc(bytes int64) (Buffer, error)
	Free(Buffer) error
	// Fill writes count elements of p at dst.
	Fill(dst View, count int64, p Pattern) error
	// Poison overwrites count elements of type t at dst with a value patterns
	// avoid (NaN for floats, 0x80 bytes for integers), so an output the
	// operation did not write is caught.
	Poison(dst View, count int64, t dtype.DType) error
	// Check counts the elements of e's output at src that differ from the
	// expected values.
	Check(src View, e Expectation) (int64, error)
	// Launch issues c; it may return before c completes. Sync waits for
	// every issued operation.
	Launch(c Call) error
	Sync() error
	// Barrier returns once every rank of the world has entered it.
	Barrier() error
}

// TogetherStarter is implemented by ranks whose barrier releases them
// apart in time (processes joined over a network): StartTogether is a
// barrier that returns on every rank of one host at one instant of its
// clock, for an operation whose kernels' starts are compared.
type TogetherStarter interface {
	StartTogether() error
}

// startTogether is r's StartTogether where it has one, else its barrier.
func startTogether(r Rank) error {
	if s, ok := r.(TogetherStarter); ok {
		return s.StartTogether()
	}
	return r.Barrier()
}

// OutOfMemoryError reports an allocation a device could not satisfy.
type OutOfMemoryError struct {
	Rank      int
	Requested int64
	Free      int64 // -1 if unknown
}

func (e *OutOfMemoryError) Error() string {
	free := "unknown"
	if e.Free >= 0 {
		free = words.BytesApprox(e.Free)
	}
	return fmt.Sprintf("out of memory on rank %d: asked for %s, %s free", e.Rank, words.BytesApprox(e.Requested), free)
}

// ErrUnsupported marks a combination a backend cannot run.
var ErrUnsupported = errors.New("unsupported")

// IterTimer is implemented by ranks that can time each operation on their
// own (GPU events around each op; a host clock on the CPU backend).
type IterTimer interface {
	// TimeEach issues c iters times and returns each operation's time in µs.
	TimeEach(c Call, iters int) ([]float64, error)
}

// Graph is a captured sequence of operations that can be replayed.
type Graph interface {
	Replay() error
	Destroy()
}

// GraphCapturer is implemented by ranks that can capture operations into a
// CUDA graph, which removes host launch overhead from small-message latency.
type GraphCapturer interface {
	// Capture records ops launches of c into a graph without running them.
	Capture(c Call, ops int) (Graph, error)
}

// GraphBackend is implemented by backends whose ranks can capture CUDA graphs.
type GraphBackend interface {
	// CanCaptureGraphs returns nil when graph capture is available.
	CanCaptureGraphs() error
}

// MismatchFinder is implemented by ranks that can list wrong elements of an
// output for diagnosis (only called once Check has counted some).
type MismatchFinder interface {
	FindMismatches(src View, e Expectation, limit int) ([]results.Mismatch, error)
}

// HostReader is implemented by ranks that can copy device bytes to the host
// (small outputs only: verify-groups reads a few KiB per rank).
type HostReader interface {
	ReadHost(src View, bytes int64) ([]byte, error)
}

// Control connects the processes of a world for small messages: the NCCL
// unique id, layouts and each rank's results. Every process calls its
// methods in the same order.
type Control interface {
	// Rank and Size are this process's place in the world of processes.
	Rank() int
	Size() int
	// Hosts is the host of each process, by rank.
	Hosts() []string
	// AllGather returns every process's data, by rank.
	AllGather(data []byte) ([][]byte, error)
	// Gather returns every process's data, by rank, on rank 0; the others
	// get nil.
	Gather(data []byte) ([][]byte, error)
	// Abort tells every process that this one failed with cause, so they
	// stop instead of waiting for it.
	Abort(cause error)
	// Close ends the session after a final barrier.
	Close() error
}

// DistributedBackend is implemented by backends that can run one rank per
// process, joined through a Control.
type DistributedBackend interface {
	// OpenDistributed creates this process's rank of a world of ctl.Size()
	// ranks on the given local device.
	OpenDistributed(ctx context.Context, ctl Control, device int) (World, error)
}

// Distributed is implemented by worlds that span several processes; the
// runner gathers every rank's results through the Control.
type Distributed interface {
	Control() Control
}

// GroupLauncher is implemented by ranks that can issue several operations
// as one group (ncclGroupStart/End), as NCCL's benchmark does with -m.
type GroupLauncher interface {
	// LaunchGroup issues c n times inside one group.
	LaunchGroup(c Call, n int) error
}

// Repeater is implemented by ranks that can issue one operation many times
// back to back in a single step, the way a C benchmark's loop does. The
// NCCL backend issues a whole timed loop with one call into C, so that
// each operation costs what it costs NCCL's own benchmark to issue.
type Repeater interface {
	// Repeat issues c n times, stopping at the first failure.
	Repeat(c Call, n int) error
}

// Registrar is implemented by ranks whose library can register buffers
// with their communicator (NCCL).
type Registrar interface {
	// AllocRegistered allocates bytes and registers them with the rank's
	// communicator: locally, or as a symmetric window (a collective call:
	// every rank of the communicator calls it with the same size at once).
	AllocRegistered(bytes int64, symmetric bool) (Buffer, error)
}

// MemoryMeter is implemented by worlds that can say how much device memory
// their library and the run use (the memory report, -M).
type MemoryMeter interface {
	// LibraryMemory is the memory the communicators took when they were
	// created (-1 if unknown), the largest over local ranks.
	LibraryMemory() int64
	// UsedMemory is the memory in use now on the busiest local device
	// (-1 if unknown).
	UsedMemory() int64
}

// BufferRotator is implemented by worlds whose ranks move the buffers of
// a call with Rotate between repetitions, within the buffers' room: the
// runner then allocates buffers of RotationRoom (at most the largest size
// needs) from the start, where memory allows.
type BufferRotator interface {
	RotatesBuffers() bool
}

// RotationRoom is the least a rotating world's buffers are allocated at,
// where the sweep's largest size needs that much: a size of 16 MiB then
// runs on 64 places in turn, as NCCL's benchmark's sweep to 1 GiB does.
const RotationRoom = 1 << 30

// MemoryBudgeter is implemented by worlds that know how much memory each
// of their local ranks may still allocate.
type MemoryBudgeter interface {
	// MemoryBudget returns the bytes each local rank may allocate (-1 if
	// unknown) and what sets that limit, in words.
	MemoryBudget() (int64, string)
}

// TrafficCounter is implemented by ranks that count the bytes they move
// over links (the CPU backend across processes).
type TrafficCounter interface {
	// Traffic returns the bytes sent and received so far, headers included.
	Traffic() (sent, recvd int64)
}

// SizesTooLargeError lists the sizes of a plan that cannot fit in memory.
type SizesTooLargeError struct {
	Sizes   []int64 // requested sizes that do not fit
	Need    []int64 // what one rank needs for each
	Budget  int64   // what one rank may allocate
	What    string  // what sets the budget
	Largest int64   // the largest requested size that fits; 0 if none
	Rank    int     // a rank short of memory (the first found)
}

func (e *SizesTooLargeError) Error() string {
	var names []string
	for _, s := range e.Sizes {
		names = append(names, words.SizeArg(s))
	}
	noun := "size"
	if len(names) > 1 {
		noun = "sizes"
	}
	msg := fmt.Sprintf("%s %s cannot fit in memory: rank %d needs two buffers of the message (%s for %s) and may allocate %s, %s",
		noun, strings.Join(names, ", "), e.Rank, words.BytesApprox(e.Need[len(e.Need)-1]), words.SizeArg(e.Sizes[len(e.Sizes)-1]),
		words.BytesApprox(e.Budget), e.What)
	if e.Largest > 0 {
		msg += fmt.Sprintf("; the largest requested size that fits is %s (use smaller --sizes or fewer ranks)", words.SizeArg(e.Largest))
	} else {
		msg += "; no requested size fits (use smaller --sizes or fewer ranks)"
	}
	return msg
}

// Aborter is implemented by worlds that can be torn down from another
// goroutine, so ranks blocked in a collective return (a peer died).
type Aborter interface {
	Abort(cause error)
}

// Forcer is implemented by worlds that can be told which algorithm to run
// a collective with, inside one start of the library (the cpu backend's
// own algorithms): collbench tune's space.
type Forcer interface {
	// Choices are the algorithms c can be forced to run with on a
	// communicator of ranks ranks (none: it runs one way only).
	Choices(c Collective, ranks int) []string
	// Force makes c run with algo from now on, on every communicator of
	// this process; "" returns to the library's own rule. Every process of
	// the world must force the same before the next operation.
	Force(c Collective, algo string) error
}

// VirtualClock is implemented by ranks of a modeled machine (the fake GPU
// machine under a model), whose work takes the model's time rather than
// the host's: loops timed on the host read Clock instead, so a benchmark
// measures the model. Clock is nil on real hardware.
type VirtualClock interface {
	Clock() func() time.Time
}

// ForcePreparer is implemented by backends whose worlds can be forced
// only if the library is told before its first communicator (NCCL loads
// collbench's tuner plugin then): collbench tune calls it before opening
// a world, and its error says why nothing can be forced.
type ForcePreparer interface {
	PrepareForcing() error
}

// ForceReporter is implemented by Forcers that can tell whether the
// operations since Force ran with the forced choice: the library may find
// it cannot run it at some size, and run its own instead.
type ForceReporter interface {
	Forced(c Collective) (ran bool, why string)
}

// ChunkReporter is a Forcer whose library can be given the chunk size
// (NCCL 2.30 and later, through its tuner interface 6): the chunk it
// computed for the last forced operation of c and the one it ran it with
// (bytes); both 0 where the library did not ask.
type ChunkReporter interface {
	Chunk(c Collective) (computed, used int64)
}

// Explainer is implemented by worlds that know which algorithm they run a
// collective with: the cpu backend always, the NCCL backend for what it
// builds from sends and receives (NCCL's other choices come from its
// profiler or its log).
type Explainer interface {
	// Algorithm names the algorithm of c on a communicator of ranks ranks
	// for a row of bytes bytes, or nil where the world cannot say (the row
	// then keeps what the library recorded).
	Algorithm(c Collective, bytes int64, ranks int) *results.AlgoChoice
}

// Recorder is implemented by worlds whose library reports, from inside
// the measuring process, what it did for an operation: the algorithm, and
// each rank's kernel time on its GPU (NCCL's profiler plugin).
type Recorder interface {
	// Recording says whether Record records anything, and if not, why.
	Recording() (bool, string)
	// Record runs fn, which issues operations on every local rank and
	// waits for them, with the library's recorder on. It returns what
	// each local rank's operations were, by position in Ranks() (nil
	// where nothing was recorded), and a note ("" or what is missing).
	Record(fn func() error) ([]*results.OpRecord, string, error)
	// Recordable says why an operation of c at a row of size bytes is
	// not recorded (the library cannot record it safely), or "".
	Recordable(c Collective, size int64) string
}

// RecordingBackend is implemented by backends whose worlds may record
// (see Recorder); Records says, before any world is open, whether they
// will, and if not, why.
type RecordingBackend interface {
	Records() (bool, string)
}

// How a process with several GPUs issues their operations (--threads).
const (
	// ThreadsPerGPU issues each GPU's operations from an OS thread of its
	// own, the threads started together at each step (NCCL's benchmark's
	// -t N -g 1). The default.
	ThreadsPerGPU = "per-gpu"
	// ThreadsOne issues every local GPU's operations from one thread, one
	// NCCL group per step (NCCL's benchmark's -t 1 -g N).
	ThreadsOne = "one"
)

// ThreadModes are the issuing modes, the default first.
func ThreadModes() []string { return []string{ThreadsPerGPU, ThreadsOne} }

// Threaded is implemented by backends whose ranks in one process can issue
// their operations each from its own thread or all from one (NCCL).
type Threaded interface {
	// SetThreads sets the mode of the worlds opened from now on: one of
	// ThreadModes, or "" for the default.
	SetThreads(mode string) error
	// Threads is the mode in force.
	Threads() string
}

package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"collbench/backend/nccl/driver"
	"collbench/backend/nccl/profiler"
	"collbench/cuda"
	"collbench/dtype"
	"collbench/internal/faults"
	"collbench/internal/syncx"
	"collbench/measure"
	"collbench/results"
	"collbench/watch"
	"collbench/watchdog"
)

// Options configure the NCCL backend.
type Options struct {
	// Lib is the library to load (the --nccl-lib flag); "" searches.
	Lib string
	// Search is where discovery looks; SystemSearchEnv when zero.
	Search SearchEnv
	// Driver is the machine's CUDA driver and NCCL; nil means this
	// machine's own libraries (tests pass a fakegpu machine).
	Driver driver.Driver
	// SysRoot is where sysfs is read from to place each GPU's thread on
	// the CPUs local to it; "/" when empty.
	SysRoot string
}

// Backend runs collectives with NCCL on this process's GPUs, one thread per GPU.
type Backend struct {
	drv     driver.Driver
	lib     driver.Library
	driver  int
	devices []gpu
	// profOn says whether NCCL is to load collbench's profiler plugin;
	// profWhy says why not.
	profOn  bool
	profWhy string
	// force is collbench's tuner plugin's state (PrepareForcing).
	force forcing
	// threads is how a world's local GPUs issue their operations
	// (SetThreads); "" is measure.ThreadsPerGPU.
	threads string
	sysRoot string
	// faults are planted for tests and drills (PlantFaults); nil plants
	// nothing.
	faults *faults.Set
	// watch receives a summary of every operation issued (SetWatch), nil
	// when no collbench watch collector is named; watchHost is the host
	// the summaries name.
	watch     watch.Sink
	watchHost string
}

// PlantFaults plants the hangs, kills and stops of fs ($COLLBENCH_FAULTS,
// a testing option). A hang: rank R's Nth operation, and every later one,
// is never issued until the world is aborted, as a thread stuck before its
// call would be; its peers' GPUs wait for it inside NCCL. A kill or stop
// (a rank with a process of its own): the process signals itself before
// it issues its Nth operation. A late rank waits before it issues each
// operation. The faults of links, ranks' rates and corruption are the CPU
// backend's only.
func (b *Backend) PlantFaults(fs *faults.Set) { b.faults = fs }

type gpu struct {
	index   int
	name    string
	busID   string
	ccMajor int
	ccMinor int
	sms     int
}

// Open loads the CUDA driver and NCCL and lists the visible GPUs. Its error
// says exactly what is missing and where it looked.
func Open(opts Options) (*Backend, error) {
	drv := opts.Driver
	if drv == nil {
		drv = system{}
	}
	if err := drv.Load(); err != nil {
		return nil, fmt.Errorf("no usable GPU driver: %w", err)
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("no GPU visible (CUDA_VISIBLE_DEVICES=%q)", os.Getenv("CUDA_VISIBLE_DEVICES"))
	}
	search := opts.Search
	if search.Getenv == nil {
		search = SystemSearchEnv()
	}
	lib, err := drv.LoadNCCL(Candidates(opts.Lib, search))
	if err != nil {
		return nil, err
	}
	b := &Backend{drv: drv, lib: lib, sysRoot: opts.SysRoot}
	if b.sysRoot == "" {
		b.sysRoot = "/"
	}
	b.profOn, b.profWhy = profiler.Prepare(lib.Version, os.Getenv, os.Setenv)
	b.driver, _ = drv.DriverVersion()
	for i := 0; i < n; i++ {
		d, err := drv.Device(i)
		if err != nil {
			return nil, err
		}
		b.devices = append(b.devices, gpu{index: i, name: d.Name, busID: d.BusID, ccMajor: d.CCMajor, ccMinor: d.CCMinor, sms: d.SMs})
	}
	return b, nil
}

// Name returns "nccl".
func (b *Backend) Name() string { return "nccl" }

// DefaultRanks is the number of visible GPUs.
func (b *Backend) DefaultRanks() int { return len(b.devices) }

// Info describes the library, driver and GPUs.
func (b *Backend) Info() results.Backend {
	info := results.Backend{
		Name:        "nccl",
		Version:     FormatVersion(b.lib.Version),
		VersionCode: b.lib.Version,
		Library:     b.lib.Path,
		Driver:      "CUDA driver " + cuda.FormatVersion(b.driver),
	}
	for _, g := range b.devices {
		info.Devices = append(info.Devices, results.Device{Rank: g.index, Name: g.name, BusID: g.busID})
	}
	return info
}

// Supports checks the library version and GPUs against what c on t with op needs.
func (b *Backend) Supports(c measure.Collective, t dtype.DType, op measure.ReduceOp) error {
	v := b.lib.Version
	ver := FormatVersion(v)
	switch {
	case (t == dtype.BFloat16) && !AtLeast(v, 2, 10, 0):
		return fmt.Errorf("%w: dtype bfloat16 needs NCCL 2.10 or newer (loaded %s)", measure.ErrUnsupported, ver)
	case t.IsFP8() && !AtLeast(v, 2, 24, 0):
		return fmt.Errorf("%w: dtype %s needs NCCL 2.24 or newer (loaded %s)", measure.ErrUnsupported, t, ver)
	case c.Reduces() && op == measure.Avg && !AtLeast(v, 2, 10, 0):
		return fmt.Errorf("%w: op avg needs NCCL 2.10 or newer (loaded %s)", measure.ErrUnsupported, ver)
	case c.Reduces() && t.IsFP8() && (op == measure.Prod || op == measure.Avg):
		return fmt.Errorf("%w: op %s on dtype %s (valid ops for %s: sum, max, min)", measure.ErrUnsupported, op, t, t)
	case (c == measure.AllToAll || c == measure.SendRecv) && !b.lib.Features.SendRecv && !b.lib.Features.AllToAll:
		return fmt.Errorf("%w: %s needs ncclSend/ncclRecv (NCCL 2.7+; loaded %s)", measure.ErrUnsupported, c, ver)
	case (c == measure.AllToAllV || c == measure.HyperCube) && !b.lib.Features.SendRecv:
		return fmt.Errorf("%w: %s needs ncclSend/ncclRecv (NCCL 2.7+; loaded %s)", measure.ErrUnsupported, c, ver)
	case (c == measure.Gather || c == measure.Scatter) && !b.lib.Features.Gather && !b.lib.Features.SendRecv:
		return fmt.Errorf("%w: %s needs ncclGather/ncclScatter (2.28.3+) or ncclSend/ncclRecv (2.7+); loaded %s", measure.ErrUnsupported, c, ver)
	}
	if c.Reduces() && t.IsFP8() {
		for _, g := range b.devices {
			if g.ccMajor < 9 {
				return fmt.Errorf("%w: %s reductions need compute capability 9.0+; GPU %d (%s) is %d.%d",
					measure.ErrUnsupported, t, g.index, g.name, g.ccMajor, g.ccMinor)
			}
		}
	}
	return nil
}

// Open creates n ranks on GPUs 0..n-1, each driven by its own locked OS
// thread, with all communicators created in one group call.
func (b *Backend) Open(ctx context.Context, n int) (measure.World, error) {
	if n < 1 {
		return nil, fmt.Errorf("invalid rank count %d: must be at least 1", n)
	}
	if n > len(b.devices) {
		return nil, fmt.Errorf("asked for %d ranks but only %d GPUs are visible (one rank per GPU)", n, len(b.devices))
	}
	w := &world{b: b, bar: syncx.NewSpinBarrier(n), size: n, profInits: profiler.Inits(), wedged: new(atomic.Bool)}
	board := watchdog.BoardFrom(ctx)
	for i := 0; i < n; i++ {
		wk := &worker{tasks: make(chan func())}
		go wk.loop()
		r := &rank{w: w, drv: b.drv, id: i, size: n, worldRank: i, dev: b.devices[i], wk: wk, owned: &bufList{}, track: board.For(i), ops: new(atomic.Int64), aborted: newCommAbort()}
		w.ranks = append(w.ranks, r)
	}
	// Per-rank setup on each rank's own thread.
	if err := w.Run(func(sr measure.Rank) error { return sr.(*rank).setup() }); err != nil {
		w.Close()
		return nil, err
	}
	id, err := b.drv.NewUniqueID()
	if err != nil {
		w.Close()
		return nil, err
	}
	for _, r := range w.ranks {
		_ = r.wk.do(func() error {
			r.freeBefore, _, _ = b.drv.MemInfo()
			return nil
		})
	}
	// One thread creates every local communicator inside one group,
	// switching to each GPU's context in turn.
	err = w.ranks[0].wk.do(func() error {
		if err := b.drv.GroupStart(); err != nil {
			return err
		}
		var initErr error
		for _, r := range w.ranks {
			if err := b.drv.SetCurrent(r.ctx); err != nil {
				initErr = err
				break
			}
			r.watchComm = commID(id)
			if r.comm, err = b.drv.InitRank(n, id, r.id); err != nil {
				initErr = err
				break
			}
		}
		endErr := b.drv.GroupEnd()
		if err := b.drv.SetCurrent(w.ranks[0].ctx); err != nil && initErr == nil {
			initErr = err
		}
		return errors.Join(initErr, endErr)
	})
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("creating the NCCL communicators: %w", err)
	}
	for _, r := range w.ranks {
		_ = r.wk.do(func() error {
			r.freeAfter, _, _ = b.drv.MemInfo()
			return nil
		})
	}
	w.place()
	w.formGangs([][]*rank{w.ranks})
	return w, nil
}

// worker runs tasks on one locked OS thread.
type worker struct{ tasks chan func() }

func (wk *worker) loop() {
	runtime.LockOSThread()
	for f := range wk.tasks {
		f()
	}
}

func (wk *worker) do(f func() error) error {
	done := make(chan error, 1)
	wk.tasks <- func() { done <- f() }
	return <-done
}

type world struct {
	b        *Backend
	size     int             // ranks in the world, in every process
	ctl      measure.Control // set when the world spans processes
	ranks    []*rank
	bar      *syncx.SpinBarrier
	abortOne sync.Once
	stopOnce sync.Once
	closed   bool
	derived  bool // a split world: closing it stops no worker
	// children are the worlds split from this one; aborting this world
	// aborts their communicators too.
	childMu  sync.Mutex
	children []*world
	// profInits is the profiler plugin's init count before this world's
	// communicators were created (see Recording).
	profInits int
	// gangs are the world's local ranks by communicator when one thread
	// issues for each communicator's local GPUs (--threads one).
	gangs []*gang
	// stopped is closed when the world is aborted, with stopCause: it
	// ends a planted hang.
	stopped   chan struct{}
	stopCause error
	// wedged is set, for a world and every world split from it, when NCCL
	// never ended the events of a recorded operation (its proxy thread is
	// stuck): nothing more is recorded, and the communicators are aborted
	// rather than destroyed at the end.
	wedged *atomic.Bool
	// together times the starts together of a distributed world's
	// processes (see startTogether); shared with its splits.
	together *together
}

// stopChan is the channel closed when the world (or the world it was
// split from) is aborted.
func (w *world) stopChan() chan struct{} {
	w.stopOnce.Do(func() {
		if w.stopped == nil {
			w.stopped = make(chan struct{})
		}
	})
	return w.stopped
}

// Split creates one communicator per group: with ncclCommSplit where the
// library has it (each rank on its own thread), otherwise with a new unique
// id per group and every communicator created in one group call.
func (w *world) Split(l measure.Layout) (measure.World, error) {
	sw := &world{b: w.b, bar: w.bar, derived: true, size: w.size, ctl: w.ctl, profInits: w.profInits, wedged: w.wedged, together: w.together}
	w.childMu.Lock()
	w.children = append(w.children, sw)
	w.childMu.Unlock()
	local := map[int]bool{}
	for _, r := range w.ranks {
		local[r.worldRank] = true
	}
	byWorld := map[int]*rank{}
	for gi, g := range l.Groups {
		for i, wr := range g {
			if wr < 0 || wr >= w.size {
				return nil, fmt.Errorf("rank %d is outside the world of %d ranks", wr, w.size)
			}
			if !local[wr] {
				continue
			}
			p := w.rankOf(wr)
			nr := *p
			nr.w, nr.id, nr.size, nr.derived, nr.comm, nr.aborted = sw, i, len(g), true, nil, newCommAbort()
			nr.events, nr.gang, nr.gi = nil, nil, 0
			nr.watchComm, nr.watchSeq = splitID(p.watchComm, gi), 0
			byWorld[wr] = &nr
		}
	}
	for _, r := range w.ranks {
		sw.ranks = append(sw.ranks, byWorld[r.worldRank])
	}
	color := map[int]int{}
	for gi, g := range l.Groups {
		for _, wr := range g {
			color[wr] = gi
		}
	}
	var err error
	if w.b.lib.Features.Split {
		err = w.Run(func(sr measure.Rank) error {
			p := sr.(*rank)
			nr := byWorld[p.worldRank]
			c, err := p.comm.Split(color[p.worldRank], nr.id)
			nr.comm = c
			return err
		})
	} else {
		var ids []driver.UniqueID
		if ids, err = w.groupIDs(len(l.Groups)); err == nil {
			err = w.ranks[0].wk.do(func() error { return initGroups(w.b.drv, l, ids, byWorld) })
		}
	}
	if err != nil {
		sw.Close()
		return nil, fmt.Errorf("creating the group communicators: %w", err)
	}
	var byGroup [][]*rank
	for _, g := range l.Groups {
		var members []*rank
		for _, wr := range g {
			if r, ok := byWorld[wr]; ok {
				members = append(members, r)
			}
		}
		byGroup = append(byGroup, members)
	}
	sw.formGangs(byGroup)
	return sw, nil
}

// rankOf returns the local rank with world rank wr.
func (w *world) rankOf(wr int) *rank {
	for _, r := range w.ranks {
		if r.worldRank == wr {
			return r
		}
	}
	return nil
}

// groupIDs creates one NCCL id per group; across processes rank 0 creates
// them and shares them.
func (w *world) groupIDs(n int) ([]driver.UniqueID, error) {
	ids := make([]driver.UniqueID, n)
	if w.ctl == nil || w.ctl.Rank() == 0 {
		for i := range ids {
			var err error
			if ids[i], err = w.b.drv.NewUniqueID(); err != nil {
				return nil, err
			}
		}
	}
	if w.ctl == nil {
		return ids, nil
	}
	blob := make([]byte, 0, n*len(driver.UniqueID{}))
	for _, id := range ids {
		blob = append(blob, id[:]...)
	}
	all, err := w.ctl.AllGather(blob)
	if err != nil {
		return nil, err
	}
	for i := range ids {
		copy(ids[i][:], all[0][i*len(driver.UniqueID{}):])
	}
	return ids, nil
}

// initGroups creates the local ranks' group communicators from one thread,
// inside one NCCL group, switching to each GPU's context in turn.
func initGroups(drv driver.Driver, l measure.Layout, ids []driver.UniqueID, byWorld map[int]*rank) error {
	if err := drv.GroupStart(); err != nil {
		return err
	}
	var initErr error
	for gi, g := range l.Groups {
		for _, wr := range g {
			r, ok := byWorld[wr]
			if !ok {
				continue // another process's rank
			}
			if err := drv.SetCurrent(r.ctx); err != nil {
				initErr = err
				break
			}
			c, err := drv.InitRank(len(g), ids[gi], r.id)
			if err != nil {
				initErr = err
				break
			}
			r.comm = c
		}
	}
	endErr := drv.GroupEnd()
	first := -1
	for wr := range byWorld {
		if first < 0 || wr < first {
			first = wr
		}
	}
	if r0, ok := byWorld[first]; ok {
		if err := drv.SetCurrent(r0.ctx); err != nil && initErr == nil {
			initErr = err
		}
	}
	return errors.Join(initErr, endErr)
}

func (w *world) Size() int { return w.size }

// RotatesBuffers says that the world's ranks move a call's buffers between
// repetitions where the call allows it (measure.BufferRotator).
func (w *world) RotatesBuffers() bool { return true }

// Control returns the control connection of a world that spans processes.
func (w *world) Control() measure.Control { return w.ctl }

// Abort tears the communicators down so ranks blocked in NCCL return.
func (w *world) Abort(cause error) { w.abort(cause) }

// barrier waits for every rank of the world: local threads spin, processes
// meet over the control connection.
func (w *world) barrier() error {
	if w.ctl != nil {
		_, err := w.ctl.AllGather(nil)
		return err
	}
	return w.bar.Wait()
}

// OpenDistributed creates this process's rank of a world of ctl.Size()
// processes, on local GPU device. Rank 0 creates the NCCL id and shares it.
func (b *Backend) OpenDistributed(ctx context.Context, ctl measure.Control, device int) (measure.World, error) {
	if device < 0 || device >= len(b.devices) {
		return nil, fmt.Errorf("local device %d does not exist: %d GPUs are visible (set --device or CUDA_VISIBLE_DEVICES)", device, len(b.devices))
	}
	n, me := ctl.Size(), ctl.Rank()
	w := &world{b: b, bar: syncx.NewSpinBarrier(1), size: n, ctl: ctl, profInits: profiler.Inits(), wedged: new(atomic.Bool), together: &together{}}
	wk := &worker{tasks: make(chan func())}
	go wk.loop()
	r := &rank{w: w, drv: b.drv, id: me, size: n, worldRank: me, dev: b.devices[device], wk: wk, owned: &bufList{}, ops: new(atomic.Int64), aborted: newCommAbort(),
		track: watchdog.BoardFrom(ctx).For(me)}
	w.ranks = []*rank{r}
	if err := wk.do(r.setup); err != nil {
		w.Close()
		return nil, err
	}
	var id driver.UniqueID
	var err error
	if me == 0 {
		if id, err = b.drv.NewUniqueID(); err != nil {
			w.Close()
			return nil, err
		}
	}
	all, err := ctl.AllGather(id[:])
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sharing the NCCL id: %w", err)
	}
	copy(id[:], all[0])
	r.watchComm = commID(id)
	err = wk.do(func() error {
		var err error
		r.freeBefore, _, _ = b.drv.MemInfo()
		r.comm, err = b.drv.InitRank(n, id, me)
		r.freeAfter, _, _ = b.drv.MemInfo()
		return err
	})
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("joining the NCCL communicator as rank %d of %d: %w", me, n, err)
	}
	w.place()
	return w, nil
}

func (w *world) Ranks() []measure.Rank {
	out := make([]measure.Rank, len(w.ranks))
	for i, r := range w.ranks {
		out[i] = r
	}
	return out
}

// Run calls fn on every rank's thread. When one rank fails the others may
// be waiting inside NCCL for it: the communicators are then aborted so
// every rank returns, and the world cannot be used again.
//
// The error returned is the first rank's to fail, naming it and its GPU:
// the others' errors (an aborted communicator, an abandoned barrier) are
// consequences of it.
func (w *world) Run(fn func(measure.Rank) error) error {
	errs := make([]error, len(w.ranks))
	var mu sync.Mutex
	cause := -1
	var wg sync.WaitGroup
	for i, r := range w.ranks {
		wg.Add(1)
		r.wk.tasks <- func() {
			defer wg.Done()
			// A rank that has finished its part waits for the world's
			// other ranks (those of other groups too) until the next.
			defer r.track.Awaits(watchdog.WaitingAll)
			r.track.Awaits(watchdog.NotWaiting)
			if errs[i] = fn(r); errs[i] != nil {
				mu.Lock()
				if cause < 0 && !errors.Is(errs[i], syncx.ErrAborted) {
					cause = i
				}
				mu.Unlock()
				w.abort(fmt.Errorf("%s: %w", r.label(), errs[i]))
			}
		}
	}
	wg.Wait()
	if cause >= 0 {
		return fmt.Errorf("%s: %w", w.ranks[cause].label(), errs[cause])
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (w *world) abort(cause error) {
	w.abortOne.Do(func() {
		ch := w.stopChan()
		w.stopCause = cause
		close(ch)
		w.bar.Abort(cause)
		for _, g := range w.gangs {
			g.abort(cause)
		}
		w.childMu.Lock()
		children := append([]*world(nil), w.children...)
		w.childMu.Unlock()
		for _, c := range children {
			c.abort(cause)
		}
		// ncclCommAbort can itself block (a proxy thread that never
		// returns): each runs on a goroutine of its own, so that no
		// caller (the watchdog, a signal, a failed rank) waits on it. The
		// ranks blocked in NCCL return once it has.
		for _, r := range w.ranks {
			if r != nil && r.comm != nil {
				r.aborted.start(r.comm)
			}
		}
	})
}

// closeBound bounds how long the communicators and device resources may
// take to be released when a world closes. NCCL's destroy waits for its
// proxy thread; one that never returns must not hold the process.
var closeBound = 10 * time.Second

// Close releases every rank's communicator and device resources, each on
// its rank's thread. A rank whose release has not returned within
// closeBound is left behind: the error names it and its GPU, and the
// process can exit (what was measured is kept).
func (w *world) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	var errs []error
	var mu sync.Mutex
	deadline := time.NewTimer(closeBound)
	defer deadline.Stop()
	expired := false
	var stuck []string
	done := make([]chan struct{}, len(w.ranks))
	for i, r := range w.ranks {
		done[i] = make(chan struct{})
		task := func() {
			defer close(done[i])
			if err := r.teardown(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", r.label(), err))
				mu.Unlock()
			}
		}
		if expired {
			continue
		}
		// A rank's thread still inside an earlier call (stuck in NCCL)
		// takes no new task: that, too, is bounded.
		select {
		case r.wk.tasks <- task:
		case <-deadline.C:
			expired = true
		}
	}
	for i, r := range w.ranks {
		if !expired {
			select {
			case <-done[i]:
				continue
			case <-deadline.C:
				expired = true
			}
		}
		select {
		case <-done[i]:
		default:
			stuck = append(stuck, r.label())
		}
	}
	if !w.derived {
		for _, r := range w.ranks {
			close(r.wk.tasks)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stuck) > 0 {
		errs = append(errs, &StuckCloseError{Ranks: stuck, After: closeBound})
	}
	return errors.Join(errs...)
}

// StuckCloseError reports communicators NCCL did not release in time.
type StuckCloseError struct {
	Ranks []string
	After time.Duration
}

func (e *StuckCloseError) Error() string {
	return fmt.Sprintf("NCCL did not release the communicator of %s within %v (ncclCommDestroy or ncclCommAbort did not return); left behind",
		strings.Join(e.Ranks, ", "), e.After)
}

// CanCaptureGraphs reports whether the driver offers stream capture.
func (b *Backend) CanCaptureGraphs() error { return b.drv.CanCapture() }

// NewestSupports is what the newest NCCL runs on GPUs of compute capability
// 9.0 and up, for a support matrix where no NCCL is loaded: everything but
// products and averages of 8-bit floats.
func NewestSupports(c measure.Collective, t dtype.DType, op measure.ReduceOp) error {
	if c.Reduces() && t.IsFP8() && (op == measure.Prod || op == measure.Avg) {
		return fmt.Errorf("%w: op %s on dtype %s (valid ops for %s: sum, max, min)", measure.ErrUnsupported, op, t, t)
	}
	return nil
}

// Package cpu is the host-memory backend. In one process each rank is a
// goroutine that meets the others in shared memory; across processes each
// rank talks to its peers over TCP with the ring, chain and pairwise
// algorithms real libraries use (see algo.go). Every collective really
// moves and reduces the data, so every command, check and report works on
// machines without GPUs, and across processes the figures measure the host
// network.
package cpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"collbench/dtype"
	"collbench/internal/faults"
	"collbench/internal/syncx"
	"collbench/internal/words"
	"collbench/measure"
	"collbench/results"
	"collbench/watch"
	"collbench/watchdog"
)

// Options tune the backend.
type Options struct {
	// AfterOp, if set, is called on each rank after every collective with
	// the rank's output bytes. Tests use it to corrupt results and prove the
	// verifier notices.
	AfterOp func(rank int, c measure.Call, out []byte)
	// MemoryLimit caps the bytes the ranks of this process may allocate; 0
	// means three quarters of the memory the system reports available,
	// shared by the collbench processes of this host.
	MemoryLimit int64
	// Faults are planted faults (tests and drills only).
	Faults *faults.Set
	// Watch, if set, receives a summary of every collective a rank of a
	// world across processes runs (collbench watch's collector); Send must
	// not block.
	Watch watch.Sink
}

// MaxRanks is the most ranks one process runs: each is a goroutine, and
// past this a sweep on a few cores takes hours.
const MaxRanks = 1024

// Backend runs collectives on host memory.
type Backend struct{ opts Options }

// New returns a CPU backend.
func New(opts Options) *Backend { return &Backend{opts: opts} }

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// DefaultRanks is 4.
func (b *Backend) DefaultRanks() int { return 4 }

// Info describes the backend.
func (b *Backend) Info() results.Backend {
	return results.Backend{Name: "cpu", Version: runtime.Version(), Driver: "goroutines on host memory"}
}

// Supports accepts what NCCL accepts: every type and op except products
// and averages of 8-bit floats.
func (b *Backend) Supports(c measure.Collective, t dtype.DType, op measure.ReduceOp) error {
	if c.Reduces() && t.IsFP8() && (op == measure.Prod || op == measure.Avg) {
		return fmt.Errorf("%w: op %s on dtype %s (valid ops for %s: sum, max, min)", measure.ErrUnsupported, op, t, t)
	}
	return nil
}

// Open creates n ranks in this process.
func (b *Backend) Open(ctx context.Context, n int) (measure.World, error) {
	if n < 1 {
		return nil, fmt.Errorf("invalid rank count %d: must be at least 1", n)
	}
	if n > MaxRanks {
		return nil, fmt.Errorf("%d ranks is more than the cpu backend runs in one process (%d): each rank is a goroutine on this host's %d cores",
			n, MaxRanks, runtime.NumCPU())
	}
	limit := b.opts.MemoryLimit
	if limit == 0 {
		limit = memAvailable() * 3 / 4
	}
	w := &world{hub: newHub(n), opts: b.opts, mem: &memory{limit: limit, shared: 1, set: b.opts.MemoryLimit > 0}, stop: make(chan struct{}), stopOnce: new(sync.Once),
		all: &hubList{}}
	w.hubs = []*hub{w.hub}
	w.all.add(w.hub)
	board := watchdog.BoardFrom(ctx)
	host, _ := os.Hostname()
	for r := 0; r < n; r++ {
		w.ranks = append(w.ranks, &rank{w: w, comm: w.hub, id: r, size: n, worldRank: r, track: board.For(r),
			local: &faults.Throttle{Rate: b.opts.Faults.RankRate(r, host)}})
	}
	return w, nil
}

// memory accounts for the bytes the ranks of this process have allocated.
type memory struct {
	mu     sync.Mutex
	used   int64
	limit  int64
	shared int  // collbench processes on this host the limit was divided by
	set    bool // the limit was given in Options, not read from the system
	// inside counts the ranks now inside an exchange of a hub, where they
	// read and write their peers' buffers; a buffer freed meanwhile (by a
	// rank that left an aborted operation early) is unmapped only when the
	// last of them has left: a peer still in its step would read unmapped
	// memory, a fault that ends the whole process.
	inside int
	freed  [][]byte
}

// enter marks a rank as inside an exchange.
func (m *memory) enter() {
	m.mu.Lock()
	m.inside++
	m.mu.Unlock()
}

// leave marks a rank as out of its exchange; the last one out unmaps what
// was freed while ranks were inside.
func (m *memory) leave() {
	m.mu.Lock()
	m.inside--
	var freed [][]byte
	if m.inside == 0 {
		freed, m.freed = m.freed, nil
	}
	m.mu.Unlock()
	for _, b := range freed {
		_ = syscall.Munmap(b) // a mapping of Alloc's: nothing else can fail here
	}
}

// release unmaps b now, or once no rank is inside an exchange.
func (m *memory) release(b []byte) error {
	m.mu.Lock()
	if m.inside > 0 {
		m.freed = append(m.freed, b)
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()
	return syscall.Munmap(b)
}

// budget returns what each of n ranks may allocate, and how the limit came about.
func (m *memory) budget(n int) (int64, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.limit <= 0 {
		return -1, "unknown (the system does not report available memory)"
	}
	free := max(m.limit-m.used, 0)
	what := fmt.Sprintf("the cpu backend's memory limit of %s", words.BytesApprox(m.limit))
	if !m.set {
		what = fmt.Sprintf("the cpu backend's budget of %s (three quarters of the %s available", words.BytesApprox(m.limit),
			words.BytesApprox(m.limit*4/3*int64(max(m.shared, 1))))
		if m.shared > 1 {
			what += fmt.Sprintf(", shared by the %d collbench processes of this host", m.shared)
		}
		what += ")"
	}
	if n > 1 {
		what += fmt.Sprintf(", shared by %d ranks", n)
	}
	return free / int64(n), what
}

type world struct {
	// hub is the whole world's hub: its barrier is the world barrier.
	hub *hub
	// hubs are this world's communicators' hubs, aborted together when a
	// rank fails; all holds those of every world split from the same one.
	hubs  []*hub
	all   *hubList
	ranks []*rank
	opts  Options
	mem   *memory
	// stop is closed when the world is aborted; long loops look at it.
	stop     chan struct{}
	stopOnce *sync.Once
	stopErr  error
}

func (w *world) stopped() error {
	select {
	case <-w.stop:
		if w.stopErr != nil {
			return w.stopErr
		}
		return syncx.ErrAborted
	default:
		return nil
	}
}

// hubList holds every hub of a world and of the worlds split from it.
type hubList struct {
	mu   sync.Mutex
	hubs []*hub
}

func (l *hubList) add(h ...*hub) {
	l.mu.Lock()
	l.hubs = append(l.hubs, h...)
	l.mu.Unlock()
}

// Abort wakes every rank waiting for another, in this world and every
// world split from it, and stops long loops.
func (w *world) Abort(cause error) {
	w.stopOnce.Do(func() {
		w.stopErr = fmt.Errorf("%w (%v)", syncx.ErrAborted, cause)
		close(w.stop)
	})
	w.all.mu.Lock()
	hubs := append([]*hub(nil), w.all.hubs...)
	w.all.mu.Unlock()
	for _, h := range hubs {
		h.abort(cause)
	}
}

// MemoryBudget is what each rank of this process may allocate.
func (w *world) MemoryBudget() (int64, string) { return w.mem.budget(len(w.ranks)) }

// Split gives every group of l its own hub.
func (w *world) Split(l measure.Layout) (measure.World, error) {
	sw := &world{hub: w.hub, opts: w.opts, mem: w.mem, hubs: []*hub{w.hub}, stop: w.stop, stopOnce: w.stopOnce, all: w.all}
	for _, g := range l.Groups {
		h := newHub(len(g))
		sw.hubs = append(sw.hubs, h)
		w.all.add(h)
		for i, wr := range g {
			if wr < 0 || wr >= len(w.ranks) {
				return nil, fmt.Errorf("rank %d is outside the world of %d ranks", wr, len(w.ranks))
			}
			sw.ranks = append(sw.ranks, &rank{w: sw, comm: h, id: i, size: len(g), worldRank: wr, track: w.ranks[wr].track, local: w.ranks[wr].local})
		}
	}
	// Keep world-rank order.
	sort.Slice(sw.ranks, func(a, b int) bool { return sw.ranks[a].worldRank < sw.ranks[b].worldRank })
	return sw, nil
}

func (w *world) Size() int { return len(w.ranks) }

func (w *world) Ranks() []measure.Rank {
	out := make([]measure.Rank, len(w.ranks))
	for i, r := range w.ranks {
		out[i] = r
	}
	return out
}

func (w *world) Run(fn func(measure.Rank) error) error {
	errs := make([]error, len(w.ranks))
	var wg sync.WaitGroup
	for i, r := range w.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = fn(r); errs[i] != nil {
				for _, h := range w.hubs {
					h.abort(fmt.Errorf("rank %d failed", r.worldRank))
				}
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil && !errors.Is(e, syncx.ErrAborted) {
			return e
		}
	}
	return errors.Join(errs...)
}

func (w *world) Close() error { return nil }

// buffer is host memory mapped for one rank, outside Go's heap, so freeing
// it gives the memory back at once.
type buffer struct {
	bytes []byte
}

func (b *buffer) Len() int64 { return int64(len(b.bytes)) }

type rank struct {
	w         *world
	comm      *hub // the rank's communicator
	id        int  // rank in comm
	size      int
	worldRank int
	track     *watchdog.Tracker
	ops       int64
	// local paces the rank's own copies and fills to a planted slow rate.
	local *faults.Throttle
}

// paceLocal holds the rank to its planted rate for n more bytes it moved on
// its own; it returns early if the world is aborted.
func (r *rank) paceLocal(n int) error {
	if r.local == nil || r.local.Rate <= 0 {
		return nil
	}
	t := time.NewTimer(r.local.Wait(n))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.w.stop:
		return r.w.stopped()
	}
}

func (r *rank) Rank() int      { return r.id }
func (r *rank) Size() int      { return r.size }
func (r *rank) WorldRank() int { return r.worldRank }
func (r *rank) Device() results.Device {
	return results.Device{Rank: r.worldRank, Name: "host memory"}
}

func (r *rank) Alloc(n int64) (measure.Buffer, error) {
	m := r.w.mem
	m.mu.Lock()
	if m.limit > 0 && m.used+n > m.limit {
		free := m.limit - m.used
		m.mu.Unlock()
		return nil, &measure.OutOfMemoryError{Rank: r.worldRank, Requested: n, Free: max(free, 0)}
	}
	m.used += n
	m.mu.Unlock()
	if n == 0 {
		return &buffer{}, nil
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		m.mu.Lock()
		m.used -= n
		m.mu.Unlock()
		return nil, &measure.OutOfMemoryError{Rank: r.worldRank, Requested: n, Free: -1}
	}
	return &buffer{bytes: b}, nil
}

func (r *rank) Free(sb measure.Buffer) error {
	b := sb.(*buffer)
	r.w.mem.mu.Lock()
	r.w.mem.used -= b.Len()
	r.w.mem.mu.Unlock()
	if len(b.bytes) == 0 {
		return nil
	}
	err := r.w.mem.release(b.bytes)
	b.bytes = nil
	return err
}

// span returns bytes of v's buffer starting at its offset.
func span(v measure.View, bytes int64) ([]byte, error) {
	b, ok := v.Buf.(*buffer)
	if !ok {
		return nil, fmt.Errorf("cpu backend: foreign buffer %T", v.Buf)
	}
	if v.Off < 0 || v.Off+bytes > int64(len(b.bytes)) {
		return nil, fmt.Errorf("cpu backend: %d bytes at offset %d overrun a %d-byte buffer", bytes, v.Off, len(b.bytes))
	}
	return b.bytes[v.Off : v.Off+bytes], nil
}

// step is how many elements long loops handle between looks at abort.
const step = 1 << 20

// copyStep is how many bytes a copy moves between looks at abort: a few
// milliseconds of memory bandwidth, so a stop is seen well within 100 ms
// however large the message, and a long copy never holds a scheduler
// thread (and the signal handler behind it) for long.
const copyStep = 4 << 20

// copyOrStop copies src into dst (as copy does) in steps of copyStep
// bytes, returning stopped's error as soon as it has one.
func copyOrStop(dst, src []byte, stopped func() error) error {
	n := min(len(dst), len(src))
	if n <= copyStep || overlap(dst[:n], src[:n]) {
		if err := stopped(); err != nil {
			return err
		}
		copy(dst, src)
		return nil
	}
	for off := 0; off < n; off += copyStep {
		if err := stopped(); err != nil {
			return err
		}
		end := min(off+copyStep, n)
		copy(dst[off:end], src[off:end])
	}
	return nil
}

// overlap says whether two non-empty byte ranges share memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// copyOrStop copies as copy does, stopping early when the world is aborted.
func (r *rank) copyOrStop(dst, src []byte) error {
	if stepHook == nil {
		return copyOrStop(dst, src, r.w.stopped)
	}
	return copyOrStop(dst, src, func() error {
		if err := r.w.stopped(); err != nil {
			return err
		}
		stepHook(r.worldRank)
		return nil
	})
}

func (r *rank) Fill(dst measure.View, count int64, p measure.Pattern) error {
	b, err := span(dst, count*int64(p.DType.Size()))
	if err != nil {
		return err
	}
	esz := int64(p.DType.Size())
	for first := int64(0); first < count; first += step {
		if err := r.w.stopped(); err != nil {
			return err
		}
		n := min(step, count-first)
		p.FillRange(b[first*esz:(first+n)*esz], first, n)
		r.track.Moved()
		if err := r.paceLocal(int(n * esz)); err != nil {
			return err
		}
	}
	return nil
}

func (r *rank) Poison(dst measure.View, count int64, t dtype.DType) error {
	b, err := span(dst, count*int64(t.Size()))
	if err != nil {
		return err
	}
	v := byte(0x80)
	if t.IsFloat() {
		v = 0xff
	}
	for off := 0; off < len(b); off += copyStep {
		if err := r.w.stopped(); err != nil {
			return err
		}
		part := b[off:min(off+copyStep, len(b))]
		for i := range part {
			part[i] = v
		}
	}
	return nil
}

func (r *rank) Check(src measure.View, e measure.Expectation) (int64, error) {
	n := e.OutputCount()
	b, err := span(src, n*int64(e.DType.Size()))
	if err != nil {
		return 0, err
	}
	esz := int64(e.DType.Size())
	var wrong int64
	for first := int64(0); first < n; first += step {
		if err := r.w.stopped(); err != nil {
			return 0, err
		}
		k := min(step, n-first)
		wrong += e.CountWrong(b[first*esz:(first+k)*esz], first, k)
		r.track.Moved()
	}
	return wrong, nil
}

func (r *rank) Sync() error { return nil }

func (r *rank) Barrier() error {
	r.track.SetPhase(watchdog.Barrier)
	return r.w.hub.bar.Wait()
}

func (r *rank) Launch(c measure.Call) error {
	if err := r.w.stopped(); err != nil {
		return err
	}
	r.ops++
	if at, ok := r.w.opts.Faults.HangAt(r.worldRank); ok && r.ops >= at {
		// Planted: this collective never returns until the world is aborted.
		<-r.w.stop
		return r.w.stopErr
	}
	r.w.mem.enter()
	out, err := r.comm.run(r, c)
	r.w.mem.leave()
	if err != nil {
		return err
	}
	if err := r.paceLocal(len(out)); err != nil {
		return err
	}
	if len(out) > 0 && r.w.opts.Faults.Corrupts(r.worldRank) {
		out[len(out)-1] ^= 1
	}
	if r.w.opts.AfterOp != nil && out != nil {
		r.w.opts.AfterOp(r.worldRank, c, out)
	}
	return nil
}

// memAvailable reads MemAvailable from /proc/meminfo; 0 if unknown.
func memAvailable() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

// TimeEach times each of iters operations with the host clock.
func (r *rank) TimeEach(c measure.Call, iters int) ([]float64, error) { return timeEach(r, c, iters) }

func timeEach(r measure.Rank, c measure.Call, iters int) ([]float64, error) {
	out := make([]float64, iters)
	for k := range out {
		t0 := time.Now()
		if err := r.Launch(c); err != nil {
			return nil, err
		}
		out[k] = float64(time.Since(t0).Nanoseconds()) / 1e3
	}
	return out, nil
}

// FindMismatches lists up to limit wrong elements of e's output at src.
func (r *rank) FindMismatches(src measure.View, e measure.Expectation, limit int) ([]results.Mismatch, error) {
	n := e.OutputCount()
	b, err := span(src, n*int64(e.DType.Size()))
	if err != nil {
		return nil, err
	}
	return findMismatches(b, e, n, limit, r.w.stopped)
}

// findMismatches checks n elements of b against e in steps, looking at
// the world's abort between them.
func findMismatches(b []byte, e measure.Expectation, n int64, limit int, stopped func() error) ([]results.Mismatch, error) {
	var out []results.Mismatch
	esz := int64(e.DType.Size())
	for first := int64(0); first < n && len(out) < limit; first += step {
		if err := stopped(); err != nil {
			return nil, err
		}
		k := min(step, n-first)
		out = append(out, e.FindMismatches(b[first*esz:(first+k)*esz], first, k, limit-len(out))...)
	}
	return out, nil
}

// ReadHost copies bytes at src.
func (r *rank) ReadHost(src measure.View, bytes int64) ([]byte, error) {
	b, err := span(src, bytes)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

// LibraryMemory is what the backend keeps besides the buffers: nothing in
// one process (ranks meet in shared memory).
func (w *world) LibraryMemory() int64 { return 0 }

// UsedMemory is the host memory the ranks of this process have allocated.
func (w *world) UsedMemory() int64 {
	w.mem.mu.Lock()
	defer w.mem.mu.Unlock()
	return w.mem.used
}

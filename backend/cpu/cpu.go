// Package cpu is the host-memory backend: each rank is a goroutine, buffers
// are host memory and every collective really moves and reduces the data,
// so every command, check and report works on machines without GPUs.
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
	"time"
	"unsafe"

	"collbench/dtype"
	"collbench/internal/syncx"
	"collbench/results"
	"collbench/suites"
)

// Options tune the backend.
type Options struct {
	// AfterOp, if set, is called on each rank after every collective with
	// the rank's output bytes. Tests use it to corrupt results and prove the
	// verifier notices.
	AfterOp func(rank int, c suites.Call, out []byte)
	// MemoryLimit caps the bytes all ranks together may allocate; 0 means
	// the memory the system reports available.
	MemoryLimit int64
}

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
func (b *Backend) Supports(c suites.Collective, t dtype.DType, op suites.ReduceOp) error {
	if c.Reduces() && t.IsFP8() && (op == suites.Prod || op == suites.Avg) {
		return fmt.Errorf("%w: op %s on dtype %s (valid ops for %s: sum, max, min)", suites.ErrUnsupported, op, t, t)
	}
	return nil
}

// Open creates n ranks.
func (b *Backend) Open(ctx context.Context, n int) (suites.World, error) {
	if n < 1 {
		return nil, fmt.Errorf("invalid rank count %d: must be at least 1", n)
	}
	limit := b.opts.MemoryLimit
	if limit == 0 {
		limit = memAvailable() * 3 / 4
	}
	mem := &memory{limit: limit}
	w := &world{hub: newHub(n), opts: b.opts, mem: mem}
	w.hubs = []*hub{w.hub}
	for r := 0; r < n; r++ {
		w.ranks = append(w.ranks, &rank{w: w, comm: w.hub, id: r, size: n, worldRank: r})
	}
	return w, nil
}

// memory accounts for the bytes all ranks of a world have allocated.
type memory struct {
	mu    sync.Mutex
	used  int64
	limit int64
}

type world struct {
	// hub is the whole world's hub: its barrier is the world barrier.
	hub *hub
	// hubs are every communicator's hub, aborted together when a rank fails.
	hubs  []*hub
	ranks []*rank
	opts  Options
	mem   *memory
}

// Split gives every group of l its own hub.
func (w *world) Split(l suites.Layout) (suites.World, error) {
	sw := &world{hub: w.hub, opts: w.opts, mem: w.mem, hubs: []*hub{w.hub}}
	for _, g := range l.Groups {
		h := newHub(len(g))
		sw.hubs = append(sw.hubs, h)
		for i, wr := range g {
			if wr < 0 || wr >= len(w.ranks) {
				return nil, fmt.Errorf("rank %d is outside the world of %d ranks", wr, len(w.ranks))
			}
			sw.ranks = append(sw.ranks, &rank{w: sw, comm: h, id: i, size: len(g), worldRank: wr})
		}
	}
	// Keep world-rank order.
	sort.Slice(sw.ranks, func(a, b int) bool { return sw.ranks[a].worldRank < sw.ranks[b].worldRank })
	return sw, nil
}

func (w *world) Size() int { return len(w.ranks) }

func (w *world) Ranks() []suites.Rank {
	out := make([]suites.Rank, len(w.ranks))
	for i, r := range w.ranks {
		out[i] = r
	}
	return out
}

func (w *world) Run(fn func(suites.Rank) error) error {
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

type buffer struct {
	words []uint64 // 8-byte aligned backing store
	bytes []byte
}

func (b *buffer) Len() int64 { return int64(len(b.bytes)) }

type rank struct {
	w         *world
	comm      *hub // the rank's communicator
	id        int  // rank in comm
	size      int
	worldRank int
}

func (r *rank) Rank() int      { return r.id }
func (r *rank) Size() int      { return r.size }
func (r *rank) WorldRank() int { return r.worldRank }
func (r *rank) Device() results.Device {
	return results.Device{Rank: r.worldRank, Name: "host memory"}
}

func (r *rank) Alloc(n int64) (suites.Buffer, error) {
	m := r.w.mem
	m.mu.Lock()
	if m.limit > 0 && m.used+n > m.limit {
		free := m.limit - m.used
		m.mu.Unlock()
		return nil, &suites.OutOfMemoryError{Rank: r.worldRank, Requested: n, Free: max(free, 0)}
	}
	m.used += n
	m.mu.Unlock()
	words := make([]uint64, (n+7)/8)
	var bytes []byte
	if len(words) > 0 {
		bytes = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
	}
	return &buffer{words: words, bytes: bytes}, nil
}

func (r *rank) Free(b suites.Buffer) error {
	r.w.mem.mu.Lock()
	r.w.mem.used -= b.Len()
	r.w.mem.mu.Unlock()
	return nil
}

// span returns bytes of v's buffer starting at its offset.
func span(v suites.View, bytes int64) ([]byte, error) {
	b, ok := v.Buf.(*buffer)
	if !ok {
		return nil, fmt.Errorf("cpu backend: foreign buffer %T", v.Buf)
	}
	if v.Off < 0 || v.Off+bytes > int64(len(b.bytes)) {
		return nil, fmt.Errorf("cpu backend: %d bytes at offset %d overrun a %d-byte buffer", bytes, v.Off, len(b.bytes))
	}
	return b.bytes[v.Off : v.Off+bytes], nil
}

func (r *rank) Fill(dst suites.View, count int64, p suites.Pattern) error {
	b, err := span(dst, count*int64(p.DType.Size()))
	if err != nil {
		return err
	}
	p.FillHost(b, count)
	return nil
}

func (r *rank) Poison(dst suites.View, count int64, t dtype.DType) error {
	b, err := span(dst, count*int64(t.Size()))
	if err != nil {
		return err
	}
	v := byte(0x80)
	if t.IsFloat() {
		v = 0xff
	}
	for i := range b {
		b[i] = v
	}
	return nil
}

func (r *rank) Check(src suites.View, e suites.Expectation) (int64, error) {
	n := e.OutputCount()
	b, err := span(src, n*int64(e.DType.Size()))
	if err != nil {
		return 0, err
	}
	return e.CountWrong(b, 0, n), nil
}

func (r *rank) Sync() error    { return nil }
func (r *rank) Barrier() error { return r.w.hub.bar.Wait() }

func (r *rank) Launch(c suites.Call) error {
	out, err := r.comm.run(r.id, c)
	if err != nil {
		return err
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
func (r *rank) TimeEach(c suites.Call, iters int) ([]float64, error) {
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
func (r *rank) FindMismatches(src suites.View, e suites.Expectation, limit int) ([]results.Mismatch, error) {
	n := e.OutputCount()
	b, err := span(src, n*int64(e.DType.Size()))
	if err != nil {
		return nil, err
	}
	return e.FindMismatches(b, 0, n, limit), nil
}

// ReadHost copies bytes at src.
func (r *rank) ReadHost(src suites.View, bytes int64) ([]byte, error) {
	b, err := span(src, bytes)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}
